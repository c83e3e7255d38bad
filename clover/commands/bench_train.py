"""``clover bench train-memory``: its flags and table; what it measures (one training step under
torchrun at 1 and 2 processes, each rank's peak resident set) is ``clover.bench.train_memory``."""

from __future__ import annotations

import argparse

from clover.bench import BENCHMARKS, print_table, write_json
from clover.bench.train_memory import MMAP_THRESHOLD, TARGET, measure_train_memory
from clover.commands.common import recorder


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--world-sizes", default="1,2", help="process counts to run, comma-separated")
    p.add_argument("--work-dir", help="keep the source model and the runs here (default: a temporary directory)")
    p.add_argument(
        "--malloc-mmap-threshold",
        type=int,
        default=MMAP_THRESHOLD,
        metavar="BYTES",
        help="glibc MALLOC_MMAP_THRESHOLD_ for the training processes: larger blocks are mapped and given "
        "back to the system when freed, so the peak is what the step holds (0: glibc's default, whose "
        "rising threshold keeps freed activations in the heap)",
    )
    p.add_argument("--json", metavar="PATH", help="write the figures here")


SUMMARY_COLUMNS = ["run", "measured peak per rank", "memory model", "measured / model"]


def summary_rows(res: dict, worlds: list[int]) -> list[list[str]]:
    """docs/memory.md's check: per process count each rank's measured peak, the memory model's
    figure for rank 0 (the baseline after importing torch and clover plus the model's estimate) and
    their ratio; then, with 1 and 2 processes, the 2 / 1 ratio of the peaks and of the model."""

    def mib(b: int) -> str:
        return f"{b >> 20:,}"

    rows, model_at = [], {}
    for w in map(str, worlds):
        peaks, model = res["peak_rss_bytes"][w], res["baseline_rss_bytes"][w][0] + res["memory_model_bytes"][w]
        model_at[w] = model
        ranks = f" (rank {' / rank '.join(map(str, range(len(peaks))))})" if len(peaks) > 1 else ""
        name = f"{w} process{'es' if w != '1' else ''}{ranks}"
        rows.append([name, " / ".join(map(mib, peaks)) + " MiB", f"{mib(model)} MiB", f"{peaks[0] / model:.2f}"])
    if "ratio_2_over_1" in res and {"1", "2"} <= set(model_at):
        rows.append(["2 / 1", f"{res['ratio_2_over_1']:.2f}", f"{model_at['2'] / model_at['1']:.2f}", ""])
    return rows


def run(args: argparse.Namespace) -> int:
    rec = recorder(args)
    worlds = [int(w) for w in args.world_sizes.split(",")]
    try:
        res = measure_train_memory(worlds, args.work_dir, args.malloc_mmap_threshold)
    except RuntimeError as e:
        raise SystemExit(f"clover bench train-memory: {e}") from None
    rows = []
    for w in map(str, worlds):
        name, model, wall = f"{w} process{'es' if w != '1' else ''}", res["memory_model_bytes"][w], res["wall_s"][w]
        for k, (base, peak) in enumerate(zip(res["baseline_rss_bytes"][w], res["peak_rss_bytes"][w])):
            mib = [base >> 20, peak >> 20, (base + model) >> 20]
            rows.append([name, k, *mib, peak / res["param_bytes"], f"{wall:.0f}"])
    notes = [
        f"parameters: {res['param_bytes'] / 2**20:.0f} MiB in fp32; baseline: after importing torch and clover, "
        "before training (part of the peak, not subtracted)"
    ]
    if "ratio_2_over_1" in res:
        met = "met" if res["target_met"] else "not met"
        ratio = res["ratio_2_over_1"]
        notes.append(f"per-rank peak at 2 processes / 1 process: {ratio:.2f} (target <= {TARGET}: {met})")
    notes.append("memory model: baseline + clover/train/memory_model.py's estimate (docs/memory.md)")
    cols = ["run", "rank", "baseline MiB", "peak MiB", "memory model MiB", "peak / param bytes", "wall s"]
    print_table(
        rec,
        "one training step, every scale feature on (clover train under torchrun, gloo)",
        cols,
        rows,
        notes,
    )
    print_table(rec, "measured against the memory model, per rank", SUMMARY_COLUMNS, summary_rows(res, worlds))
    write_json(rec, args.json, res)
    return 0


BENCHMARKS["train-memory"] = (
    "peak memory per rank of a training step at 1 and 2 processes (FSDP2, meta init, streamed --init-from, "
    "bf16, activation checkpointing, sharded checkpoint)",
    add_args,
    run,
)
