"""Per-rank training memory of a preset under FSDP2 (clover/train/memory_model.py), as a table.

For each world size and with/without activation checkpointing: sharded fp32 weights, fp32
gradients, AdamW moments, the gathered layers and root, activations (measured on one layer of
each type on the CPU, then scaled), logits, and the peak. bf16 compute, fp32 master weights.

python benchmarks/memory_model.py [--preset qwen3.6-35b-a3b] [--tokens 4096] [--worlds 8 16 32] [--json out.json]
"""

from __future__ import annotations

import argparse

import torch

from clover.bench import print_table, set_threads, write_json
from clover.bench.results import Recorder
from clover.model.config import preset
from clover.train.memory_model import GIB, activation_terms, estimate, parameter_counts

PARTS = ("params", "grads", "optimizer", "gathered", "activations", "logits", "peak")


def main() -> None:
    rec = Recorder()  # the result file: this command line, its start, the tables printed
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="qwen3.6-35b-a3b")
    ap.add_argument("--tokens", type=int, default=4096, help="clean tokens per rank per step (as many noisy)")
    ap.add_argument("--worlds", type=int, nargs="+", default=[8, 16, 32])
    ap.add_argument("--gpu-memory-gib", type=float, default=141.0, help="what one GPU holds (H200: 141)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args()
    set_threads(args.threads)
    config = preset(args.preset)
    counts = parameter_counts(config)
    terms = activation_terms(config, torch.bfloat16)
    rows, figures = [], []
    for ck in (False, True):
        for w in args.worlds:
            e = estimate(config, w, args.tokens, ck, terms=terms)
            d = e.to_dict()
            fits = "yes" if e.peak <= args.gpu_memory_gib * GIB else "no"
            rows.append([w, "on" if ck else "off", *(round(d[k] / GIB, 1) for k in PARTS), fits])
            figures.append({"world": w, "activation_checkpointing": ck, **d, "fits": fits == "yes"})
    print_table(
        rec,
        f"{args.preset}: per-rank GiB, {args.tokens} clean + {args.tokens} noisy tokens per rank, bf16 compute",
        ["GPUs", "act. ckpt", *PARTS, f"fits {args.gpu_memory_gib:g} GiB"],
        rows,
        notes=[
            f"{counts['total']:,} parameters ({counts['root']:,} in embedding + head); largest layer "
            f"{max(counts['layers']):,}",
            "activations per clean token and layer (measured, CPU kernels, bf16): "
            + ", ".join(f"{t} {lin / 2**10:.0f} KiB" for t, (lin, _) in terms.items()),
        ],
    )
    write_json(
        rec,
        args.json,
        {
            "preset": args.preset,
            "tokens_per_rank": args.tokens,
            "param_count": counts["total"],
            "activation_bytes_per_token": {t: lin for t, (lin, _) in terms.items()},
            "attention_bytes_per_token_squared_cpu_kernel": {t: q for t, (_, q) in terms.items()},
            "rows": figures,
        },
    )


if __name__ == "__main__":
    main()
