"""One decoding pass eager against compiled (``CloverForBlockDiffusion.compile_passes``), side by
side in one process: median ms of the denoise and fused passes at batch 1 after 96 tokens, and
the wall time of the first calls, which compile (a second run reads torch's on-disk cache).

python benchmarks/bench_compile.py [--model DIR | --preset medium] [--threads 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from clover.api.loading import load_model_dir
from clover.bench.passes import pass_ms
from clover.model import CloverForBlockDiffusion, preset


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="checkpoint directory (default: the bundled model)")
    p.add_argument("--preset", help="a preset with random weights instead of a checkpoint")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    if args.preset:
        torch.manual_seed(0)
        model = CloverForBlockDiffusion(preset(args.preset)).eval()
    else:
        model = load_model_dir(args.model, args.threads)[0]
    eager = pass_ms(model, reps=20)
    model.compile_passes()
    t0 = time.perf_counter()
    compiled = pass_ms(model, history=64, reps=1)  # the first calls compile: denoise and fused at two lengths
    compiled = pass_ms(model, reps=20)
    compile_s = time.perf_counter() - t0
    figures = {"model": args.preset or args.model or "bundled", "threads": args.threads,
               "pass_ms_eager": eager, "pass_ms_compiled": compiled, "compile_s": compile_s,
               "speedup": {k: eager[k] / compiled[k] for k in eager}}  # fmt: skip
    for k in eager:
        print(f"{k:8s} eager {eager[k]:8.2f} ms   compiled {compiled[k]:8.2f} ms   {eager[k] / compiled[k]:.2f}x")
    print(f"compiling and the compiled runs: {compile_s:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
