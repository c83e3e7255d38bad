"""What a training step costs at each block size: seconds per step and the process's peak resident
memory, on the bundled model's shape (random weights) and the airspace recipe's batches, the same
steps for each size, each size in a fresh process (so that each peak is its own).

    python benchmarks/bench_block_sizes.py [--sizes 1 4 32 64] [--steps 3] [--threads 1] [--json PATH]

``clover train --recipe airspace`` draws each step's block size from 1 to 64 (log-uniformly,
``TrainConfig.block_size_range``); here every step of a run is at one size. The table's last
column estimates a step under that draw: each measured size stands for the drawn sizes from it
up to the next one measured, weighted by how often the recipe's first 10,000 steps draw them.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # clover from this tree when run as a script

FIRST = 1000  # past any curriculum: the batches are the recipe's steady ones


def measure(block_size: int, steps: int, threads: int) -> dict:
    """In this process: one warm-up step, then ``steps`` timed steps at ``block_size``."""
    import torch

    from clover.airspace.diffusion_recipe import Airspace2Recipe
    from clover.bench import set_threads
    from clover.data import default_model_dir
    from clover.data.tokenizer import CloverTokenizer
    from clover.model import CloverForBlockDiffusion
    from clover.train.trainer import Trainer

    set_threads(threads)
    tok = CloverTokenizer.load(default_model_dir())
    recipe = Airspace2Recipe()
    recipe.train.block_size_range = [block_size, block_size]
    torch.manual_seed(0)
    trainer = Trainer(CloverForBlockDiffusion(recipe.model_config(tok)), recipe.source(tok), recipe.train, None)
    trainer.train_step(FIRST - 1)
    t0 = time.perf_counter()
    for s in range(FIRST, FIRST + steps):
        trainer.train_step(s)
    return {
        "s_per_step": (time.perf_counter() - t0) / steps,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
    }


def main() -> None:
    from clover.bench.results import Recorder

    rec = Recorder()  # the result file: this command line, its start, the tables printed
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    p.add_argument("--steps", type=int, default=3, help="timed steps per size (after one warm-up step)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", metavar="PATH", help="write the result file here")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child is not None:
        print(json.dumps(measure(a.child, a.steps, a.threads)))
        return
    from clover.airspace.diffusion_recipe import Airspace2Recipe
    from clover.bench import print_table, set_threads, write_json

    set_threads(a.threads)  # this process measures nothing; its result file names the children's threads
    sizes = sorted(a.sizes)
    fig = {}
    for bs in sizes:
        cmd = [sys.executable, __file__, "--child", str(bs), "--steps", str(a.steps), "--threads", str(a.threads)]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(f"block size {bs}: {out.stderr.strip()[-2000:]}")
        fig[bs] = json.loads(out.stdout.strip().splitlines()[-1])
    cfg = Airspace2Recipe().train
    drawn = [cfg.block_size_at(s) for s in range(10_000)]
    stands_for = Counter(max((m for m in sizes if m <= d), default=None) for d in drawn)  # the largest size ≤ d
    share = {b: stands_for[b] / len(drawn) for b in sizes}
    covered = sum(share.values())
    mixed = {
        "s_per_step": sum(share[b] * fig[b]["s_per_step"] for b in sizes) / covered,
        "peak_rss_gb": max(fig[b]["peak_rss_gb"] for b in sizes if share[b]),  # a run's peak is its worst step's
    }
    lo, hi = cfg.block_size_range
    print_table(
        rec,
        f"a training step at each block size: airspace2 recipe, 16 sequences, {a.threads} thread(s), "
        f"{a.steps} steps each",
        ["block size", *map(str, sizes), f"drawn {lo}-{hi} (estimate)"],
        [
            ["seconds per step", *(f"{fig[b]['s_per_step']:.1f}" for b in sizes), f"{mixed['s_per_step']:.1f}"],
            [
                "peak resident memory",
                *(f"{fig[b]['peak_rss_gb']:.1f} GB" for b in sizes),
                f"{mixed['peak_rss_gb']:.1f} GB",
            ],
            ["share of the recipe's steps", *(f"{share[b] * 100:.0f} %" for b in sizes), f"{covered * 100:.0f} %"],
        ],
    )
    write_json(
        rec, a.json, {"steps": a.steps, "threads": a.threads, "by_block_size": fig, "share": share, "drawn": mixed}
    )


if __name__ == "__main__":
    main()
