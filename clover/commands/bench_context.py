"""``clover bench context``: its flags and table; what it measures is ``clover.bench.context``
(decode cost and cache size at long prompts, Clover hybrid vs all-attention, random weights)."""

from __future__ import annotations

import argparse

from clover.bench import print_table, set_threads, write_json
from clover.bench.context import context_config, measure_context
from clover.commands.common import add_device_args, add_threads_arg, device_setup, recorder
from clover.commands.threads import use_threads


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def add_context_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lengths", default="1024,4096,16384,32768", help="prompt lengths")
    p.add_argument("--preset", default="small", help="model shape (random weights)")
    p.add_argument("--tokens", type=int, default=64, help="new tokens decoded at each length")
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--steps-per-block", type=int, default=4, help="passes per block ('fixed' policy, same for both)")
    p.add_argument("--real-prefill", action="store_true", help="prefill for real (minutes at 16K on a CPU)")
    add_threads_arg(p)
    add_device_args(p)
    p.add_argument("--json", metavar="PATH", help="write the figures here")


def run_context(args: argparse.Namespace) -> int:
    import torch  # deferred: torch, not for clover --help

    rec = recorder(args)
    device, dtype = device_setup(args, "clover bench context")
    set_threads(args.threads)
    lengths = _ints(args.lengths)
    torch.manual_seed(0)
    cfg = context_config(args.preset, lengths)
    use_threads(args.threads, cfg)
    figures = measure_context(
        cfg, lengths, args.tokens, args.block_size, args.steps_per_block, device, dtype, args.real_prefill, args.compile
    )
    ms = zip(figures["clover_ms_per_token"], figures["attention_ms_per_token"], figures["ms_ratio"])
    mib = zip(figures["clover_cache_bytes"], figures["attention_cache_bytes"], figures["bytes_ratio"])
    rows = [[L, *m, f"{c / 2**20:.2f}", f"{a / 2**20:.2f}", r] for L, m, (c, a, r) in zip(lengths, ms, mib)]
    print_table(
        rec,
        f"clover bench context ({args.preset} preset, random weights, block {args.block_size}, "
        f"{args.steps_per_block} passes/block, {device} {figures['dtype']}, {torch.get_num_threads()} thread(s))",
        ["prompt", "clover ms/tok", "attention ms/tok", "ratio", "clover cache MiB", "attention cache MiB", "ratio"],
        rows,
        ["history is synthetic (random cache of the right size) unless --real-prefill"]
        if not args.real_prefill
        else [],
    )
    write_json(rec, args.json, figures)
    return 0
