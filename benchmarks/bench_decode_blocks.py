"""Decoding by block size on a CPU: the default policy's tokens/s at batch 1 (the prompts one after
another), tokens per pass and, on the bundled model, exact match of the test split's tool calls,
at each block size (tokens per second of CPU time, the back ends running on the caller's
thread, so that a busy machine's other processes are left out; wall-clock beside), through
PyTorch (f32) and llama.cpp (f32, q8_0, q4_k); the bundled model and the random-weight
``medium`` preset (exact match is the bundled model's only: medium's weights are random); with
``--stock``, stock llama.cpp's one-token decoding of a same-shape Qwen3.5-MoE (``clover bench
llama.cpp``'s twin, built by ``make llama-cpp-stock``) beside them.

    python benchmarks/bench_decode_blocks.py [--sizes 4 8 16 32] [--speed-prompts 4] [--n 100]
        [--max-tokens 64] [--no-medium] [--medium-speed-prompts 2] [--stock] [--threads 1] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # clover from this tree when run as a script


def main() -> int:
    from clover.bench.results import Recorder

    rec = Recorder()  # the result file: this command line, its start, the tables printed
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 16, 32])
    p.add_argument("--speed-prompts", type=int, default=4, help="prompts timed at batch 1, bundled model")
    p.add_argument("--medium-speed-prompts", type=int, default=2, help="prompts timed at batch 1, medium")
    p.add_argument("--n", type=int, default=100, help="test turns for exact match (bundled model)")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--no-medium", action="store_true")
    p.add_argument("--stock", action="store_true", help="stock llama.cpp one-token decoding beside")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()

    from clover.backends.llamacpp import available
    from clover.bench import print_table, set_threads, write_json
    from clover.bench.blocks import TYPES, backends, measure_blocks
    from clover.bench.decode import airspace_cases
    from clover.bench.llamacpp import medium_checkpoint, stock_passes, stock_tool, twin_gguf
    from clover.data import default_model_dir
    from clover.data.tokenizer import CloverTokenizer

    set_threads(args.threads)
    if (why := available()) is not None:
        raise SystemExit(why)
    tok = CloverTokenizer.load(default_model_dir())
    quality_cases = airspace_cases(tok, args.n)
    tool = stock_tool() if args.stock else None
    figures: dict = {"sizes": args.sizes, "max_tokens": args.max_tokens, "n": len(quality_cases), "models": {}}
    with tempfile.TemporaryDirectory(prefix="clover-blocks-") as d:
        work = Path(d)
        srcs = {"bundled": Path(default_model_dir())}
        if not args.no_medium:
            srcs["medium"] = medium_checkpoint(work / "medium-ckpt", tok)
        for which, src in srcs.items():
            (work / which).mkdir()
            k = args.speed_prompts if which == "bundled" else args.medium_speed_prompts
            models = backends(src, work / which, TYPES, args.threads)
            res = measure_blocks(
                models,
                tok,
                quality_cases[:k],
                quality_cases if which == "bundled" else None,
                args.sizes,
                args.max_tokens,
            )
            stock = {}
            if tool is not None:
                twin = twin_gguf(models["PyTorch f32"].config, src, work / which / "twin", TYPES, tool)
                stock = {t: stock_passes(tool, twin[t], 5, 64, args.threads)["tokens_per_s"] for t in TYPES}
            figures["models"][which] = {"runs": res, "stock_one_token_tokens_per_s": stock}
            big = max(args.sizes)
            rows = []
            for name, by in res.items():
                t = name.split()[-1]
                for bs, r in by.items():
                    em = r.get("exact_match")
                    row = [
                        name,
                        str(bs),
                        f"{r['tokens_per_cpu_s']:.3g}",
                        f"{r['tokens_per_cpu_s'] / by[big]['tokens_per_cpu_s']:.2f}",
                        f"{r['tokens_per_s']:.3g}",
                        f"{r['tpf']:.2f}",
                        "-" if em is None else f"{100 * em:.1f} %",
                    ]
                    if tool is not None:
                        s = stock.get(t) if name.startswith("llama.cpp") else None
                        row.append("-" if s is None else f"{r['tokens_per_cpu_s'] / s:.2f}")
                    rows.append(row)
            cols = [
                "back end",
                "block",
                "tokens per CPU s",
                f"vs block {big}",
                "tokens/s (wall)",
                "tokens per pass",
                "exact match",
            ]
            notes = [f"stock one-token {t}: {x:.0f} tokens/s" for t, x in stock.items()]
            print_table(
                rec,
                f"{which}: the default policy by block size, batch 1 ({k} prompts), exact match over "
                f"{len(quality_cases)} test turns at batch 16, {args.threads} thread(s)",
                cols + (["vs stock one-token"] if tool is not None else []),
                rows,
                notes,
            )
    write_json(rec, args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
