"""``clover convert`` end to end in a fresh process, and its peak memory on a synthetic
multi-shard checkpoint: it must stay near a layer's tensors, not grow with the model.

One subprocess does both (a process start costs seconds on a small machine): a tiny
checkpoint first (which also warms up every code path), then the synthetic one with the
peak-RSS counter reset.
"""

import json
import math
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file

from clover.model.io import load_model
from tests.convert.helpers import TEXT, write_tokenizer

SYNTH = dict(
    TEXT,
    vocab_size=8192,
    hidden_size=256,
    num_hidden_layers=16,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    linear_key_head_dim=64,
    linear_value_head_dim=64,
    num_experts=32,
    num_experts_per_tok=4,
    moe_intermediate_size=256,
    shared_expert_intermediate_size=256,
)

SCRIPT = r"""
import json, sys
from clover.cli import main

def status():
    d = {}
    for line in open("/proc/self/status"):
        k, v = line.split(":", 1)
        if k in ("VmRSS", "VmHWM"):
            d[k] = int(v.split()[0]) * 1024
    return d

def convert(args):
    try:
        main(["convert", *args, "--quiet", "--json"])
    except SystemExit as e:
        assert not e.code, e.code

tiny, tiny_out, big, big_out = sys.argv[1:5]
convert(["--from", tiny, "--out", tiny_out, "--block-size", "4", "--calib-seqs", "1", "--calib-blocks", "2"])
before = status()["VmRSS"]
try:
    open("/proc/self/clear_refs", "w").write("5")  # reset the peak-RSS counter to the current RSS
    reset = True
except OSError:
    reset = False
convert(["--from", big, "--out", big_out, "--block-size", "8", "--calib-seqs", "2", "--calib-blocks", "4",
         "--max-shard-gb", str(16 / 1024)])
print(json.dumps({"before": before, "peak": status()["VmHWM"], "reset": reset}))
"""


def write_synthetic(d, config: dict, shard_bytes: int = 8 << 20) -> int:
    """A bf16 Qwen3.5-MoE checkpoint as the hub stores it (one tensor per expert), ~``shard_bytes``
    per shard, random values, written shard by shard. Names and shapes come from transformers'
    own model (built on the meta device). Returns the total bytes."""
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    d.mkdir(parents=True)
    cfg = Qwen3_5MoeTextConfig(**config)
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in Qwen3_5MoeForCausalLM(cfg).state_dict().items()}
    specs = []
    for k, s in shapes.items():
        if k.endswith("experts.gate_up_proj"):
            E, I2, H = s
            base = k.removesuffix("gate_up_proj")
            specs += [(f"{base}{e}.{p}_proj.weight", (I2 // 2, H)) for e in range(E) for p in ("gate", "up")]
        elif k.endswith("experts.down_proj"):
            E, H, I = s
            specs += [(f"{k.removesuffix('down_proj')}{e}.down_proj.weight", (H, I)) for e in range(E)]
        else:
            specs.append((k, s))
    pool = (torch.randn(1 << 22, generator=torch.Generator().manual_seed(0)) * 0.05).to(torch.bfloat16)
    shards, cur, size, off = [], {}, 0, 0
    for k, s in specs:
        n = math.prod(s)
        off = (off + 7919) % (pool.numel() - n)  # random-looking values without drawing 100M numbers
        cur[k] = pool[off : off + n].clone().view(s)
        size += cur[k].numel() * 2
        if size >= shard_bytes:
            shards.append(cur)
            cur, size = {}, 0
    shards.append(cur) if cur else None
    weight_map = {}
    total = 0
    for i, sh in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(sh, d / name, metadata={"format": "pt"})
        weight_map.update({k: name for k in sh})
        total += sum(v.numel() * 2 for v in sh.values())
    idx = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    cfg.save_pretrained(d)
    write_tokenizer(d)
    return total


@pytest.fixture(scope="module")
def run(sources, tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    total = write_synthetic(root / "synthetic", SYNTH)
    n_shards = len(list((root / "synthetic").glob("*.safetensors")))
    args = [str(sources["vl"]), str(root / "tiny_out"), str(root / "synthetic"), str(root / "big_out")]
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "OMP_NUM_THREADS": "1"},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    tiny_report, big_report, mem = lines
    return root, tiny_report, big_report, mem, total, n_shards


def test_cli_convert_end_to_end(run):
    root, report, *_ = run
    assert report["used"] + sum(report["skipped"].values()) == report["source_tensors"]
    m = load_model(root / "tiny_out")
    assert m.model.embed_tokens.weight.dtype == torch.bfloat16  # the default --dtype
    assert m.config.block_size == 4 and m.config.mask_token_id == 99
    with torch.no_grad():
        cache, _ = m.prefill(torch.tensor([[1, 2, 3, 4]]), 4)
        assert torch.isfinite(m.step(cache, denoise=torch.full((1, 4), 99), block_size=4).float()).all()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_peak_memory_stays_near_one_layer_not_the_model(run):
    root, _, report, mem, total, n_shards = run
    extra = mem["peak"] - mem["before"]
    largest = report["largest_tensor_bytes"]
    print(
        f"\nconvert {total / 2**20:.0f} MiB in {n_shards} shards ({report['written']} Clover tensors,"
        f" {len(report['files'])} output shards): peak extra RSS {extra / 2**20:.1f} MiB,"
        f" largest tensor {largest / 2**20:.1f} MiB, ratio to total {extra / total:.2f}"
        f"{'' if mem['reset'] else ' (peak counter not reset: upper bound)'}"
    )
    assert report["total_bytes"] >= 0.95 * total and n_shards >= 20 and len(report["files"]) > 10
    # One layer's tensors are ~1/16 of the total here; at the peak a layer is in memory with its
    # calibration activations and whatever the allocator has not handed back yet (measured 0.20 to
    # 0.26 of the total on different machines). A conversion holding the model needs >= 1x.
    assert extra < 0.4 * total
    assert extra < 12 * largest
    load_model(root / "big_out", dtype=torch.float32)  # and the result is a valid checkpoint
