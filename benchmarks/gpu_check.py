"""The prepared GPU check (run through ``benchmarks/gpu_check.sh``): what has to hold, and how
fast the full shape runs, on one CUDA GPU.

1. invariant: ``forward_train`` block logits vs ``step(denoise=...)`` after committing the clean
   prefix (tests/model/test_invariant.py), on the GPU in fp32 and bf16, each against the fp64
   CPU model with the same weights;
2. fla: fla's ``chunk_gated_delta_rule`` on the GPU against ``delta_rule_chunked`` in fp64 on
   the CPU (without fla or a GPU, the torch chunked kernel stands in and the JSON says so);
3. speed: the ``qwen3.6-35b-a3b`` preset with random bf16 weights built on the GPU: prefill
   tokens/s at 4K tokens, engine decode tokens/s at batch 1 and 16 for ``ar`` (TPF 1) and
   ``fixed`` at 8 passes per 32-token block (TPF 4; random weights, so the policy sets TPF),
   the same ``fixed`` decode with and without CUDA graphs (``Engine(cuda_graphs=True)``, the same
   prompts, tokens compared), and peak GPU memory;
4. sglang: ``clover bench sglang --device cuda`` (the bundled model served by SGLang's engine
   through the Clover plugin against Clover's own engine, docs/sglang.md), when an SGLang
   environment is there ($CLOVER_SGLANG_PYTHON, .venv-sglang, or this Python with SGLang); else
   skipped, saying why. The dry run skips it (``make test-sglang`` covers SGLang on the CPU).

Each section runs under its own time budget and its own error handling, and the JSON is written
after every section, so a section that fails or overruns leaves the others' figures.
``--dry-run``: the same on the CPU with the tiny preset and small sizes (the test suite runs it);
CUDA graphs are replayed there by their CPU stand-in (``clover.engine.graphs.EagerGraph``: the
same static buffers, buckets and copies, each pass run eagerly).

    python benchmarks/gpu_check.py [--dry-run] [--json gpu_check.json] [--budget-s 420]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the test helpers the invariant reuses (tests/model/helpers.py)

from clover.api.loading import place_model  # noqa: E402
from clover.bench.exactness import perturb  # noqa: E402
from clover.bench.passes import pass_ms, sync, warm_compiled  # noqa: E402
from clover.model import CloverForBlockDiffusion, preset  # noqa: E402
from tests.model.helpers import incremental_logits, noisy  # noqa: E402

# the published reference point for a model of this shape (35B total, 3B active) decoding on one
# H200, in tokens/s; shown next to the measured figures, never measured here
SEEDS_REFERENCE_TOK_S = 515

# sizes: (GPU run, dry run)
SIZES = {
    "invariant": {
        "gpu": dict(preset="small", block_size=32, batch=2, length=200, prompt=45),
        "dry": dict(preset="tiny", block_size=8, batch=2, length=37, prompt=5),
    },
    "fla": {"gpu": dict(B=2, T=512, H=8, dk=128, dv=128), "dry": dict(B=1, T=100, H=2, dk=16, dv=16)},
    "sglang": {
        "gpu": dict(prompts=32, max_tokens=64, timeout_s=300),
        "dry": dict(prompts=4, max_tokens=16, timeout_s=120),
    },
    "speed": {
        "gpu": dict(
            preset="qwen3.6-35b-a3b", prefill_tokens=4096, prompt=128, ar_tokens=64, fixed_tokens=128, history=512
        ),
        "dry": dict(preset="tiny", prefill_tokens=1024, prompt=64, ar_tokens=16, fixed_tokens=32, history=64),
    },
}
# of --budget-s; fla's first calls compile and autotune its Triton kernels (tens of seconds), and
# the speed section takes whatever the others leave
BUDGET_SHARE = {"invariant": 0.15, "fla": 0.22, "sglang": 0.2, "speed": 0.43}
BATCHES = (1, 16)
SGLANG_KEYS = (
    "same_tokens",
    "prompts",
    "sglang_tokens_per_s",
    "clover_tokens_per_s",
    "sglang_tpf",
    "clover_tpf",
    "max_rel_logit_err",
    "sglang_start_s",
)
BLOCK, FIXED_STEPS = 32, 8


class Overrun(Exception):
    """A section ran past its time budget."""


def _err(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double().cpu() - b.double().cpu()).abs().max().item()


# -- 1. the exactness invariant ---------------------------------------------------------------------
def _reference_model(name: str, block_size: int) -> CloverForBlockDiffusion:
    """fp64 on the CPU, Clover's own parameters moved off their init so that every branch counts
    (``clover.bench.exactness.perturb``). Every expert weighs in (top-k = all): a top-k choice is
    a discontinuity, and random routers' near-tied scores flip under bf16 rounding, which would
    measure the flips rather than the arithmetic."""
    torch.manual_seed(0)
    cfg = preset(name, block_size=block_size)
    return perturb(CloverForBlockDiffusion(cfg.replace(num_experts_per_tok=cfg.num_experts)).double().eval())


def _gen_blocks(model, x0, xt, prompt: int, bs: int, device) -> tuple[torch.Tensor, dict]:
    """forward_train logits and engine-style step logits of every generation block, on ``device``."""
    x0, xt = x0.to(device), xt.to(device)
    train = model.forward_train(x0, xt, bs).logits
    steps = incremental_logits(model, x0, xt, prompt, bs)
    sync(device)
    return train, steps


def _block_err(model, train: torch.Tensor, steps: dict, ref: torch.Tensor, bs: int) -> tuple[float, float, float]:
    """Largest |difference| over the generation blocks: train vs ref, steps vs ref, train vs steps."""
    e_train = e_step = e_both = 0.0
    for b, lg in steps.items():
        s = b * bs
        lo = 1 if (model.config.shift_logits and s == 0) else 0  # token 0 is never predicted
        r = ref[:, s : s + lg.shape[1]][:, lo:]
        t = train[:, s : s + lg.shape[1]][:, lo:]
        e_train, e_step = max(e_train, _err(t, r)), max(e_step, _err(lg[:, lo:], r))
        e_both = max(e_both, _err(t, lg[:, lo:]))
    return e_train, e_step, e_both


def check_invariant(out: dict, device: torch.device, size: dict, left) -> None:
    bs = size["block_size"]
    ref = _reference_model(size["preset"], bs)
    g = torch.Generator().manual_seed(0)
    x0 = torch.randint(0, ref.config.vocab_size - 1, (size["batch"], size["length"]), generator=g)
    xt = noisy(x0, ref.config.mask_token_id, size["prompt"])
    with torch.no_grad():
        ref_train, ref_steps = _gen_blocks(ref, x0, xt, size["prompt"], bs, torch.device("cpu"))
        out["reference_max_abs_logit"] = ref_train.abs().max().item()
        out["fp64_train_vs_step"] = _block_err(ref, ref_train, ref_steps, ref_train, bs)[1]
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            left()
            m = place_model(copy.deepcopy(ref), device, dtype)
            train, steps = _gen_blocks(m, x0, xt, size["prompt"], bs, device)
            e_train, e_step, e_both = _block_err(m, train, steps, ref_train, bs)
            out[name] = {
                "device": str(device),
                "forward_train_max_abs_err": e_train,
                "step_max_abs_err": e_step,
                "train_vs_step_max_abs_err": e_both,
            }
            del m


# -- 2. fla against the reference kernel -------------------------------------------------------------
def _fla_chunk():
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except Exception:
        return None
    return chunk_gated_delta_rule


def check_fla(out: dict, device: torch.device, size: dict, left) -> None:
    """fla's chunked kernel as it is (bf16 q/k/v, which it requires; fp32 gates and state), and
    the model's own ``delta_rule`` (fla inside on CUDA when it imports) in fp32 and bf16 with
    states at every 32nd token, each against ``delta_rule_chunked`` in fp64 on the CPU."""
    import torch.nn.functional as F

    from clover.ops import delta_rule as ops
    from clover.ops.delta_rule import delta_rule, delta_rule_chunked

    B, T, H, dk, dv = (size[k] for k in ("B", "T", "H", "dk", "dv"))
    gen = torch.Generator().manual_seed(0)
    q = F.normalize(torch.randn(B, T, H, dk, generator=gen, dtype=torch.float64), dim=-1)
    k = F.normalize(torch.randn(B, T, H, dk, generator=gen, dtype=torch.float64), dim=-1)
    v = torch.randn(B, T, H, dv, generator=gen, dtype=torch.float64)
    g = -F.softplus(torch.randn(B, T, H, generator=gen, dtype=torch.float64))  # log decay < 0
    beta = torch.sigmoid(torch.randn(B, T, H, generator=gen, dtype=torch.float64))
    S0 = 0.1 * torch.randn(B, H, dk, dv, generator=gen, dtype=torch.float64)
    scale, bounds = dk**-0.5, list(range(BLOCK - 1, T, BLOCK))
    out["shape"] = f"B {B}, T {T}, H {H}, dk {dk}, dv {dv}; states after every {BLOCK} tokens"
    ref_o, ref_S = delta_rule_chunked(q, k, v, g, beta, S0, bounds, scale)
    ref_last = delta_rule_chunked(q, k, v, g, beta, S0, [T - 1], scale)[1][:, 0]
    chunk = _fla_chunk() if device.type == "cuda" else None
    kern = out["chunk_kernel"]
    if chunk is None:
        kern["error"] = "fla not importable or no CUDA device: not measured"
        out["note"] = "no fla kernel measured (fla not importable or no CUDA device); delta_rule runs the torch kernel"
    else:
        left()
        try:
            with torch.no_grad():
                o, S = chunk(
                    *(t.to(device, torch.bfloat16) for t in (q, k, v)),
                    g=g.to(device, torch.float32),
                    beta=beta.to(device, torch.float32),
                    scale=scale,
                    initial_state=S0.to(device, torch.float32),
                    output_final_state=True,
                )
            sync(device)
            kern.update(o_max_abs_err=_err(o, ref_o), state_max_abs_err=_err(S, ref_last))
        except Exception as e:
            kern["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    probe = q[:1, :1].to(device, torch.bfloat16)
    pick = getattr(ops, "_fla_kernels", lambda x: None)  # the dispatch's own choice of kernel
    inside = "fla" if pick(probe) is not None else "torch chunked"
    out["candidate"] = f"clover.ops.delta_rule on {device}: {inside}"
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        left()
        args = [t.to(device, dtype) for t in (q, k, v, g, beta)]
        try:
            with torch.no_grad():
                o, S = delta_rule(*args, S0.to(device, torch.float32), bounds, scale)
            sync(device)
            out[name] = {"o_max_abs_err": _err(o, ref_o), "state_max_abs_err": _err(S, ref_S)}
        except Exception as e:
            out[name] = {"o_max_abs_err": None, "state_max_abs_err": None, "error": f"{type(e).__name__}: {e}"}


# -- 3. the full shape, random weights -----------------------------------------------------------------
def random_model(name: str, device: torch.device, dtype: torch.dtype) -> CloverForBlockDiffusion:
    """Random weights built where they live: the constructors and ``reset_parameters`` (normal
    with the config's initializer_range, norms as the model sets them) run on ``device`` in
    ``dtype``, so no weight ever exists on the CPU or in fp32."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        torch.manual_seed(0)
        with torch.device(device):
            return CloverForBlockDiffusion(preset(name)).eval()
    finally:
        torch.set_default_dtype(default)


def _decode(engine, model, policy: str, batch: int, size: dict, device) -> dict:
    return _decode_ids(engine, model, policy, batch, size, device)[0]


def _decode_ids(engine, model, policy: str, batch: int, size: dict, device) -> tuple[dict, list[list[int]]]:
    """One timed ``generate_batch`` of ``batch`` random prompts (seeded by the batch size) → its
    figures and every prompt's tokens."""
    from clover.engine import SamplingParams

    n = size["ar_tokens"] if policy == "ar" else size["fixed_tokens"]
    params = SamplingParams(
        max_tokens=n,
        block_size=BLOCK,
        policy=policy,
        ignore_eos=True,
        steps_per_block=FIXED_STEPS if policy == "fixed" else None,
    )
    gen = torch.Generator().manual_seed(batch)
    V = model.config.vocab_size
    prompts = [torch.randint(0, V - 1, (size["prompt"],), generator=gen).tolist() for _ in range(batch)]
    sync(device)
    t0 = time.perf_counter()
    outs = engine.generate_batch(prompts, params)
    sync(device)
    wall = time.perf_counter() - t0
    tokens = sum(len(o.token_ids) for o in outs)
    passes = max(o.stats["forward_passes"] for o in outs)
    figures = {
        "batch": batch,
        "policy": policy,
        "tokens": tokens,
        "seconds": wall,
        "tokens_per_s": tokens / wall,
        "tpf": tokens / batch / passes if passes else None,
    }
    return figures, [o.token_ids for o in outs]


def check_speed(out: dict, device: torch.device, size: dict, left) -> None:
    from clover.engine import Engine, SamplingParams
    from clover.model.quant import weight_bytes

    def peak() -> None:  # after every measurement, so that an overrun keeps the figure so far
        if device.type == "cuda":
            out["peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30

    cfg = preset(size["preset"])
    need = weight_bytes(cfg, float_bytes=2)["total"]
    out["weights_gib"] = need / 2**30
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        if free < 1.08 * need:
            raise RuntimeError(
                f"{free / 2**30:.1f} GiB free of {total / 2**30:.1f}: the bf16 weights need {need / 2**30:.1f}"
            )
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    model = random_model(size["preset"], device, torch.bfloat16)
    sync(device)
    out["init_s"] = time.perf_counter() - t0
    out["params"] = model.num_parameters()["total_params"]
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        left()
        warm = torch.randint(0, cfg.vocab_size - 1, (1, 8 * BLOCK), generator=gen).to(device)
        model.prefill(warm, BLOCK)  # first calls: kernel compilation (Triton) and allocator warm-up
        sync(device)
        left()
        prompt = torch.randint(0, cfg.vocab_size - 1, (1, size["prefill_tokens"]), generator=gen).to(device)
        t0 = time.perf_counter()
        model.prefill(prompt, BLOCK)
        sync(device)
        wall = time.perf_counter() - t0
        out["prefill"] = {
            "tokens": size["prefill_tokens"],
            "seconds": wall,
            "tokens_per_s": size["prefill_tokens"] / wall,
        }
        del prompt
    engine = Engine(model, max_batch_size=max(BATCHES))
    for policy in ("ar", "fixed"):  # warm-up: the decode shapes of each policy once
        engine.generate_batch(
            [list(range(1, BLOCK + 1))],
            SamplingParams(
                max_tokens=BLOCK,
                block_size=BLOCK,
                policy=policy,
                steps_per_block=FIXED_STEPS if policy == "fixed" else None,
                ignore_eos=True,
            ),
        )
    peak()
    for b in BATCHES:  # batch 1 of both policies first: the figures that matter most if time runs out
        for policy in ("ar", "fixed"):
            left()
            out["decode"][f"{policy}_b{b}"] = _decode(engine, model, policy, b, size, device)
            peak()
    _graph_decode(out["graphs"], model, device, size, left)
    peak()
    _compiled_passes(out["compiled"], model, device, size, left)
    peak()


def _graph_decode(out: dict, model, device: torch.device, size: dict, left) -> None:
    """``fixed`` decoding at each batch size by an engine without CUDA graphs and by one with them
    (the dry run: their CPU stand-in), the same prompts: tokens/s of each, and the share of prompts
    decoded to the same tokens. The graphed engine decodes the prompts once first, which captures
    the graphs its run needs (timed apart: ``first_s``)."""
    from clover.engine import Engine
    from clover.engine.graphs import DecodeGraphs, EagerGraph

    for b in BATCHES:
        left()
        plain = Engine(model, max_batch_size=b)
        graphed = Engine(model, max_batch_size=b, cuda_graphs=device.type == "cuda")
        if device.type != "cuda":
            graphed.runner.graphs = DecodeGraphs(model, b, capture=EagerGraph)
        first = _decode_ids(graphed, model, "fixed", b, size, device)[0]
        left()
        eager, ids = _decode_ids(plain, model, "fixed", b, size, device)
        left()
        fast, ids_g = _decode_ids(graphed, model, "fixed", b, size, device)
        st = graphed.stats()
        out[f"fixed_b{b}"] = {
            "tokens_per_s_eager": eager["tokens_per_s"],
            "tokens_per_s_graphs": fast["tokens_per_s"],
            "speedup": fast["tokens_per_s"] / eager["tokens_per_s"],
            "first_s": first["seconds"],
            "same_tokens": sum(a == g for a, g in zip(ids, ids_g)) / b,
            "graph_captures": st["graph_captures"],
            "buckets": sorted({rows for c in graphed.runner.graphs.caches.values() for _, rows in c.graphs}),
            "graph_passes": st["graph_passes"],
            "eager_passes": st["graph_eager_passes"],
            "eager_why": "; ".join(st["graph_eager_why"]) or None,
        }


# HBM bandwidth by device name, bytes/s (the vendors' figures), for the bound a pass cannot beat
BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12}


def _compiled_passes(out: dict, model, device: torch.device, size: dict, left) -> None:
    """One denoise pass at batch 1 after ``history`` tokens: eager, compiled, and compiled with CUDA
    graphs (mode "reduce-overhead"), against the time to read the weights it touches once. The dry
    run traces with backend "aot_eager" (the graphs without code generation) and skips CUDA graphs."""
    from clover.model.quant import weight_bytes

    cfg = model.config
    wb = weight_bytes(cfg, float_bytes=2)
    union = 1 - (1 - cfg.num_experts_per_tok / max(cfg.num_experts, 1)) ** BLOCK  # experts a block reaches
    out["bytes_per_pass"] = wb["total"] - wb["experts"] + union * wb["experts"]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
    bw = next((v for k, v in BANDWIDTH.items() if k in name), None)
    out["bandwidth_bound_ms"] = 1e3 * out["bytes_per_pass"] / bw if bw else None
    history = size["history"]
    out["pass_ms_eager"] = pass_ms(model, history, reps=10)["denoise"]
    left()
    backend = "aot_eager" if device.type == "cpu" else "inductor"
    for key, mode in (("pass_ms_compiled", None), ("pass_ms_graphs", "reduce-overhead")):
        if mode is not None and device.type != "cuda":
            continue
        model.compile_passes(mode=mode, backend=backend)
        out[key.replace("pass_ms", "compile_s")] = warm_compiled(model, history)  # the first calls compile
        left()
        out[key] = pass_ms(model, history, reps=10)["denoise"]
        left()
    model.compile_passes(False)


def sglang_available() -> str | None:
    """Why SGLang cannot run here, or None when it can."""
    from clover.bench.sglang import sglang_python

    try:
        py = sglang_python()
    except RuntimeError as e:
        return str(e)
    probe = subprocess.run([py, "-c", "import sglang, clover_sglang"], capture_output=True, text=True)
    return None if probe.returncode == 0 else f"{py} cannot import sglang and clover_sglang"


def check_sglang(out: dict, device: torch.device, size: dict, left) -> None:
    """``clover bench sglang`` on this device in a subprocess (SGLang starts its own processes)."""
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "sglang.json"
        cmd = [
            sys.executable,
            "-m",
            "clover",
            "bench",
            "sglang",
            "--device",
            device.type,
            "--json",
            str(path),
            "--prompts",
            str(size["prompts"]),
            "--max-tokens",
            str(size["max_tokens"]),
        ]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=size["timeout_s"])
        if r.returncode != 0:
            raise RuntimeError(f"clover bench sglang exited {r.returncode}: {(r.stderr or r.stdout)[-400:]}")
        fig = json.loads(path.read_text())["figures"]  # a result file (clover.bench.results)
    for key in SGLANG_KEYS:
        out[key] = fig.get(key)


# -- driver ------------------------------------------------------------------------------------------
def _template(dry: bool) -> dict:
    """Every key the JSON has, in both modes (None until measured)."""
    per = {
        "device": None,
        "forward_train_max_abs_err": None,
        "step_max_abs_err": None,
        "train_vs_step_max_abs_err": None,
    }
    run = {"batch": None, "policy": None, "tokens": None, "seconds": None, "tokens_per_s": None, "tpf": None}
    graphed = {
        "tokens_per_s_eager": None,
        "tokens_per_s_graphs": None,
        "speedup": None,
        "first_s": None,
        "same_tokens": None,
        "graph_captures": None,
        "buckets": None,
        "graph_passes": None,
        "eager_passes": None,
        "eager_why": None,
    }
    mode = "dry" if dry else "gpu"
    base = {"status": "not run", "seconds": None, "note": None}
    return {
        "invariant": {
            **base,
            **SIZES["invariant"][mode],
            "reference": "fp64 on the CPU, same weights",
            "reference_max_abs_logit": None,
            "fp64_train_vs_step": None,
            "fp32": dict(per),
            "bf16": dict(per),
        },
        "fla": {
            **base,
            "candidate": None,
            "reference": "delta_rule_chunked, fp64 on the CPU",
            "shape": None,
            "chunk_kernel": {
                "kernel": "fla chunk_gated_delta_rule, bf16 q/k/v",
                "o_max_abs_err": None,
                "state_max_abs_err": None,
                "error": None,
            },
            "fp32": {"o_max_abs_err": None, "state_max_abs_err": None},
            "bf16": {"o_max_abs_err": None, "state_max_abs_err": None},
        },
        "speed": {
            **base,
            **SIZES["speed"][mode],
            "dtype": "bfloat16",
            "block_size": BLOCK,
            "fixed_steps_per_block": FIXED_STEPS,
            "params": None,
            "weights_gib": None,
            "init_s": None,
            "prefill": {"tokens": None, "seconds": None, "tokens_per_s": None},
            "decode": {f"{p}_b{b}": dict(run) for b in BATCHES for p in ("ar", "fixed")},
            "graphs": {f"fixed_b{b}": dict(graphed) for b in BATCHES},
            "compiled": {
                "pass_ms_eager": None,
                "pass_ms_compiled": None,
                "compile_s_compiled": None,
                "pass_ms_graphs": None,
                "compile_s_graphs": None,
                "bytes_per_pass": None,
                "bandwidth_bound_ms": None,
            },
            "peak_memory_gib": None,
            "seeds_reference_tok_s": SEEDS_REFERENCE_TOK_S,
            "seeds_reference_note": "the published reference point for this shape (35B-A3B) decoding on one "
            "H200, tokens/s; not measured here: compare with the decode rows at the TPF it was measured at",
        },
        "sglang": {**base, **{k: None for k in SGLANG_KEYS}},
    }


def _run_section(name: str, fn, out: dict, device, size: dict, budget_s: float) -> None:
    """One section under its budget: ``left()`` (called between steps) and an alarm both stop it."""
    t0 = time.perf_counter()
    deadline = t0 + budget_s

    def left() -> None:
        if time.perf_counter() > deadline:
            raise Overrun

    def alarm(*_):
        raise Overrun

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(max(1, int(budget_s) + 5))
    try:
        fn(out, device, size, left)
        out["status"] = "ok"
    except KeyboardInterrupt:  # the shell script's overall limit: keep what was measured
        out["status"], out["note"] = "interrupted", "stopped by the overall time limit"
        raise
    except Overrun:
        out["status"] = "timeout"
        out["note"] = f"stopped after its {budget_s:.0f} s budget; the figures above were measured before that"
    except Exception as e:
        out["status"] = "error"
        out["note"] = f"{type(e).__name__}: {str(e)[:400]}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        out["seconds"] = time.perf_counter() - t0
        if device.type == "cuda":
            torch.cuda.empty_cache()


def _rows(res: dict) -> list[list]:
    inv, fla, sp = res["sections"]["invariant"], res["sections"]["fla"], res["sections"]["speed"]
    scale = inv["reference_max_abs_logit"]
    rel = lambda e: f"{e / scale:.2g} of max |logit|" if e is not None and scale else ""
    rows = [
        ["invariant", "status", inv["status"], inv["note"] or f"{inv['preset']} preset, block {inv['block_size']}"],
        ["invariant", "max |logit|, fp64 cpu", scale, "the reference"],
        ["invariant", "fp64 cpu: train vs step", inv["fp64_train_vs_step"], "the invariant in fp64"],
    ]
    for d in ("fp32", "bf16"):
        for k, what in (
            ("forward_train_max_abs_err", "train vs fp64"),
            ("step_max_abs_err", "step vs fp64"),
            ("train_vs_step_max_abs_err", "train vs step"),
        ):
            rows.append(["invariant", f"{inv[d]['device']} {d}: {what}", inv[d][k], rel(inv[d][k])])
    rows.append(["fla", "status", fla["status"], fla["note"] or fla["shape"] or ""])
    ck = fla["chunk_kernel"]
    for k, what in (("o_max_abs_err", "output"), ("state_max_abs_err", "final state")):
        rows.append(["fla", f"chunk kernel bf16: {what} vs fp64", ck[k], ck["error"] or ck["kernel"]])
    for d in ("fp32", "bf16"):
        for k, what in (("o_max_abs_err", "output"), ("state_max_abs_err", "states")):
            rows.append(
                ["fla", f"delta_rule {d}: {what} vs fp64", fla[d][k], fla[d].get("error") or fla["candidate"] or ""]
            )
    rows += [
        ["speed", "status", sp["status"], sp["note"] or f"{sp['preset']}, random bf16 weights"],
        [
            "speed",
            "weights GiB",
            sp["weights_gib"],
            f"{sp['params'] or 0:.4g} params, built in {sp['init_s'] or 0:.1f} s",
        ],
        ["speed", f"prefill tok/s at {sp['prefill']['tokens']}", sp["prefill"]["tokens_per_s"], "batch 1"],
    ]
    for key, r in sp["decode"].items():
        rows.append(["speed", f"decode tok/s {key}", r["tokens_per_s"], f"TPF {r['tpf']}, {r['tokens']} tokens"])
    for key, r in sp["graphs"].items():
        same = "-" if r["same_tokens"] is None else f"{100 * r['same_tokens']:.0f} %"
        rows.append(
            [
                "speed",
                f"decode tok/s {key}, CUDA graphs",
                r["tokens_per_s_graphs"],
                f"eager {r['tokens_per_s_eager'] or 0:.4g}, same tokens {same}, "
                f"{r['graph_passes']} graph / {r['eager_passes']} eager passes",
            ]
        )
    cp = sp["compiled"]
    for k, what in (("pass_ms_eager", "eager"), ("pass_ms_compiled", "compiled"), ("pass_ms_graphs", "CUDA graphs")):
        rows.append(["speed", f"pass ms, {what}", cp[k], f"batch 1, {BLOCK}-position denoise after {sp['history']}"])
    rows.append(
        [
            "speed",
            "bandwidth bound ms",
            cp["bandwidth_bound_ms"],
            f"{(cp['bytes_per_pass'] or 0) / 1e9:.1f} GB read per pass (experts a block reaches)",
        ]
    )
    rows += [
        ["speed", "peak GPU memory GiB", sp["peak_memory_gib"], "torch.cuda.max_memory_allocated"],
        [
            "speed",
            "seeds_reference_tok_s",
            sp["seeds_reference_tok_s"],
            "published reference for this shape on one H200 (not measured here)",
        ],
    ]
    sg = res["sections"]["sglang"]
    rows.append(["sglang", "status", sg["status"], sg["note"] or "clover bench sglang, the bundled model"])
    if sg["status"] == "ok":
        rows += [
            ["sglang", "same tokens", f"{sg['same_tokens']}/{sg['prompts']}", "as Clover's engine, batch 1, 16"],
            [
                "sglang",
                "tokens/s at batch 16",
                sg["sglang_tokens_per_s"],
                f"Clover's engine {sg['clover_tokens_per_s']:.4g}",
            ],
            ["sglang", "max relative logit error", sg["max_rel_logit_err"], "vs PyTorch"],
        ]
    return [[a, b, "-" if c is None else (f"{c:.3g}" if isinstance(c, float) else str(c)), d] for a, b, c, d in rows]


def print_rows(title: str, rows: list[list], note: str) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title)
    for i, c in enumerate(["section", "figure", "value", "note"]):
        t.add_column(c, justify="right" if i == 2 else "left")
    for r in rows:
        t.add_row(*r)
    console = Console(width=max(120, Console().width))
    console.print(t)
    console.print(note)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true", help="on the CPU with the tiny preset and small sizes")
    p.add_argument("--json", default=os.environ.get("GPU_CHECK_JSON", "gpu_check.json"), help="where the figures go")
    p.add_argument("--budget-s", type=float, default=420.0, help="time for all sections together")
    args = p.parse_args()
    t_start = time.perf_counter()
    if args.dry_run:
        device = torch.device("cpu")
    elif torch.cuda.is_available():
        device = torch.device("cuda")
    else:
        print("gpu_check: no CUDA GPU visible to torch; run with --dry-run for the CPU version", file=sys.stderr)
        return 2
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    torch.set_flush_denormal(True)
    mode = "dry" if args.dry_run else "gpu"
    fla = _fla_chunk()
    res = {
        "dry_run": args.dry_run,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "fla": None if fla is None else getattr(sys.modules.get("fla"), "__version__", "installed"),
        "threads": torch.get_num_threads(),
        "budget_s": args.budget_s,
        "seconds": None,
        "sections": _template(args.dry_run),
    }
    print(
        f"gpu_check: {res['device_name']} ({device}), torch {res['torch']}, CUDA {res['cuda']}, fla {res['fla']}, "
        f"{res['threads']} CPU thread(s){', dry run' if args.dry_run else ''}",
        flush=True,
    )
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    no_sglang = "the dry run leaves SGLang to `make test-sglang`" if args.dry_run else sglang_available()
    sections = (("invariant", check_invariant), ("fla", check_fla), ("sglang", check_sglang), ("speed", check_speed))
    for name, fn in sections:
        left = args.budget_s - (time.perf_counter() - t_start)
        share = BUDGET_SHARE[name] * args.budget_s
        budget = left if name == "speed" else min(share, left)  # the last section takes what is left
        out = res["sections"][name]
        try:
            if name == "sglang" and no_sglang:
                out["status"], out["note"] = "skipped", no_sglang
            elif budget < 5:
                out["status"], out["note"] = "skipped", "no time left in the budget"
            else:
                _run_section(name, fn, out, device, SIZES[name][mode], budget)
        finally:  # after every section, and on an interrupt: what was measured is kept
            res["seconds"] = time.perf_counter() - t_start
            path.write_text(json.dumps(res, indent=1) + "\n")
        print(f"gpu_check: {name}: {out['status']} in {out['seconds'] or 0:.1f} s", flush=True)
    print_rows(f"gpu_check ({res['device_name']}, {res['seconds']:.0f} s)", _rows(res), f"JSON: {path}")
    skippable = lambda n, s: n == "sglang" and s["status"] == "skipped" and no_sglang
    return 0 if all(s["status"] == "ok" or skippable(n, s) for n, s in res["sections"].items()) else 1


if __name__ == "__main__":
    sys.exit(main())
