"""The prepared GPU check runs as is: ``benchmarks/gpu_check.sh --dry-run`` on the CPU writes the
JSON the GPU run writes (same keys), with the invariant holding."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import benchmark_script

ROOT = Path(__file__).parents[1]


def test_dry_run_writes_every_key_and_the_invariant_holds(tmp_path):
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHON": sys.executable}
    r = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--dry-run", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    d = json.loads(out.read_text())
    assert d["dry_run"] and d["device"] == "cpu" and "gpu_check" in r.stdout and "seeds_reference_tok_s" in r.stdout
    s = d["sections"]
    statuses = {k: v["status"] for k, v in s.items()}
    assert statuses == {"invariant": "ok", "fla": "ok", "sglang": "skipped", "speed": "ok"}
    assert "make test-sglang" in s["sglang"]["note"] and "same_tokens" in s["sglang"]
    # the keys a GPU run fills in
    for key in ("reference_max_abs_logit", "fp64_train_vs_step"):
        assert key in s["invariant"]
    for d_ in ("fp32", "bf16"):
        assert set(s["invariant"][d_]) == {
            "device",
            "forward_train_max_abs_err",
            "step_max_abs_err",
            "train_vs_step_max_abs_err",
        }
        assert set(s["fla"][d_]) == {"o_max_abs_err", "state_max_abs_err"}
    assert set(s["fla"]["chunk_kernel"]) == {"kernel", "o_max_abs_err", "state_max_abs_err", "error"}
    assert s["fla"]["chunk_kernel"]["error"]  # no fla on a CPU: said, not measured
    assert set(s["speed"]["decode"]) == {"ar_b1", "fixed_b1", "ar_b16", "fixed_b16"}
    for k in ("prefill", "peak_memory_gib", "weights_gib", "params", "seeds_reference_tok_s", "seeds_reference_note"):
        assert k in s["speed"]
    cp = s["speed"]["compiled"]  # traced (aot_eager) in the dry run: the compiled pass runs; CUDA graphs GPU only
    assert cp["pass_ms_eager"] > 0 and cp["pass_ms_compiled"] > 0 and cp["pass_ms_graphs"] is None
    assert cp["bytes_per_pass"] > 0 and cp["bandwidth_bound_ms"] is None
    # the invariant: exact in fp64, fp32 at rounding level, bf16 within a few percent of the logits
    inv = s["invariant"]
    scale = inv["reference_max_abs_logit"]
    assert scale > 0.1 and inv["fp64_train_vs_step"] < 1e-10
    for k in ("forward_train_max_abs_err", "step_max_abs_err", "train_vs_step_max_abs_err"):
        assert inv["fp32"][k] < 1e-5 * scale, (k, inv["fp32"][k])
        assert inv["bf16"][k] < 0.05 * scale, (k, inv["bf16"][k])
    assert s["fla"]["fp32"]["o_max_abs_err"] < 1e-5 and s["fla"]["bf16"]["state_max_abs_err"] < 0.05
    # random weights: the policy sets the tokens per forward
    dec = s["speed"]["decode"]
    assert dec["ar_b1"]["tpf"] == 1.0 and dec["fixed_b16"]["tpf"] == 4.0
    # CUDA graphs' path, replayed by its CPU stand-in: every pass through the static buffers, same tokens
    gr = s["speed"]["graphs"]
    assert set(gr) == {"fixed_b1", "fixed_b16"}
    # (the first 8 prompts start alone: prefill_chunk admits 512 of the 1,024 prompt tokens in a step)
    assert gr["fixed_b1"]["buckets"] == [1] and gr["fixed_b16"]["buckets"] == [8, 16]
    for r in gr.values():
        assert r["same_tokens"] == 1.0 and r["graph_passes"] > 0 and r["eager_passes"] == 0, r
        assert r["tokens_per_s_eager"] > 0 and r["tokens_per_s_graphs"] > 0 and r["eager_why"] is None
    assert all(r["tokens_per_s"] > 0 for r in dec.values()) and s["speed"]["prefill"]["tokens_per_s"] > 0


def _paths(d: dict, at: str = "") -> set[str]:
    return set().union(*([{at + k} | (_paths(v, f"{at}{k}.") if isinstance(v, dict) else set()) for k, v in d.items()]))


def test_the_gpu_run_and_the_dry_run_write_the_same_keys(tmp_path):
    mod = benchmark_script("gpu_check")
    assert _paths(mod._template(dry=True)) == _paths(mod._template(dry=False))
    assert mod._template(dry=False)["speed"]["preset"] == "qwen3.6-35b-a3b"
