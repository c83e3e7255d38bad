"""One decoding pass eager against compiled (``CloverForBlockDiffusion.compile_passes``), side by
side in one process: median ms of the denoise and fused passes at batch 1 after 96 tokens, and
the wall time of the first calls, which compile (a second run reads torch's on-disk cache).

python benchmarks/bench_compile.py [--model DIR | --preset medium] [--threads 1] [--stock] [--json out.json]

--stock adds stock llama.cpp's 32-token pass (logits at every position) after 64 tokens on the
same-shape autoregressive model at f32 (``clover bench llama.cpp``'s twin; libllama is built on
first use, about 25 minutes here), timed between the eager and compiled runs.
"""

from __future__ import annotations

import argparse

import torch

from clover.api.loading import load_model_dir
from clover.bench import print_table, write_json
from clover.bench.passes import pass_ms, warm_compiled
from clover.bench.results import Recorder
from clover.model import CloverForBlockDiffusion, preset


def stock_pass_ms(model, threads: int) -> float:
    """Stock llama.cpp's 32-token pass after 64 tokens on the same-shape AR twin at f32, median ms."""
    import tempfile
    from pathlib import Path

    from clover.bench.llamacpp import stock_passes, stock_tool, twin_gguf
    from clover.data import default_model_dir

    with tempfile.TemporaryDirectory() as work:
        tool = stock_tool()
        twin = twin_gguf(model.config, Path(default_model_dir()), Path(work), ["f32"], tool)
        return stock_passes(tool, twin["f32"], 20, 16, threads)["pass_ms"][32]


def main() -> None:
    rec = Recorder()  # the result file: this command line, its start, the tables printed
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="checkpoint directory (default: the bundled model)")
    p.add_argument("--preset", help="a preset with random weights instead of a checkpoint")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--stock", action="store_true", help="stock llama.cpp's pass beside them (same-shape AR twin)")
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
    stock = stock_pass_ms(model, args.threads) if args.stock else None
    model.compile_passes()
    compile_s = warm_compiled(model)  # the first calls compile: denoise and fused at two lengths
    compiled = pass_ms(model, reps=20)
    figures = {
        "model": args.preset or args.model or "bundled",
        "threads": args.threads,
        "pass_ms_eager": eager,
        "pass_ms_compiled": compiled,
        "compile_s": compile_s,
        "speedup": {k: eager[k] / compiled[k] for k in eager},
        "stock_pass_ms": stock,
    }
    rows = [
        [figures["model"], k, f"{eager[k]:.2f}", f"{compiled[k]:.2f}", f"{eager[k] / compiled[k]:.2f}x", ""]
        for k in eager
    ]
    rows[0][-1] = f"{compile_s:.0f} s"  # the first calls of every pass kind, once per model
    notes = [f"compiling (the first calls of each pass kind): {compile_s:.0f} s"]
    if stock is not None:
        notes.append(
            f"stock llama.cpp, 32-token pass of the same-shape AR model: {stock:.2f} ms "
            f"(compiled denoise / stock: {compiled['denoise'] / stock:.2f})"
        )
    print_table(
        rec,
        f"decoding passes, eager vs torch.compile ({figures['model']}, {args.threads} thread(s))",
        ["model", "pass", "eager ms", "compiled ms", "speed-up", "first compile"],
        rows,
        notes,
    )
    write_json(rec, args.json, figures)  # a result file (clover.bench.results)


if __name__ == "__main__":
    main()
