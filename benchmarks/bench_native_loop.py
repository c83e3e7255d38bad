"""Decode speed of the bundled model through Clover's engine on PyTorch and on llama.cpp, with the
engine's pass-by-pass Python loop and with the library's block loop (``clover_denoise_block``:
a block's passes, the greedy choice, the policy and the commit in C++, ``clover.engine.native_loop``),
side by side in one process, against stock llama.cpp decoding the same-shape autoregressive model
one token at a time (``clover bench llama.cpp``'s twin); the checkpoint exported to an f32 GGUF file
in a temporary folder.

    python benchmarks/bench_native_loop.py [--n 16] [--max-tokens 64] [--batches 1 16]
        [--policies default ar] [--threads 1] [--twin-tokens 64] [--no-stock] [--json PATH]

Per policy and batch size (batch 1: the prompts one after another): tokens/s (wall clock),
tokens per CPU second (this thread's: on a busy machine, what other processes take is left out)
and the host time outside the pass per pass of a request (a batch's pass of R rows is R of
them: ``clover.bench.stages``), and whether
every configuration decoded the same tokens.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # clover from this tree when run as a script

COLUMNS = ("PyTorch", "llama.cpp, Python loop", "llama.cpp, block loop")


def main() -> int:
    from clover.bench.results import Recorder

    rec = Recorder()  # the result file: this command line, its start, the tables printed
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=16, help="test prompts (tool-call turns)")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    p.add_argument("--policies", nargs="+", default=["default", "ar"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--twin-tokens", type=int, default=64, help="one-token steps timed in stock llama.cpp")
    p.add_argument("--no-stock", action="store_true", help="skip stock llama.cpp")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()

    from clover.backends.llamacpp import LlamaCppClover, available
    from clover.bench import print_table, set_threads, write_json
    from clover.bench.decode import airspace_cases
    from clover.bench.llamacpp import stock_passes, stock_tool, twin_gguf
    from clover.bench.stages import measure_stages
    from clover.commands.common import load_model_and_tokenizer
    from clover.data import default_model_dir
    from clover.engine import SamplingParams
    from clover.export.gguf import export_gguf

    set_threads(args.threads)
    if (why := available()) is not None:
        raise SystemExit(why)
    model, tok = load_model_and_tokenizer(None, args.threads)
    cases = airspace_cases(tok, args.n, model.config)
    figures: dict = {"n": len(cases), "max_tokens": args.max_tokens, "threads": args.threads, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="clover-native-loop-") as d:
        gguf = export_gguf(default_model_dir(), Path(d) / "model.gguf", "f32").out
        backends = dict(
            zip(
                COLUMNS,
                (
                    model,
                    LlamaCppClover(gguf, threads=args.threads, native_loop=False),
                    LlamaCppClover(gguf, threads=args.threads),
                ),
            )
        )
        stock = None
        if not args.no_stock:
            tool = stock_tool()
            twin = twin_gguf(model.config, default_model_dir(), Path(d), ("f32",), tool)["f32"]
            stock = stock_passes(tool, twin, 10, args.twin_tokens, args.threads)["tokens_per_s"]
            figures["stock_one_token_tokens_per_s"] = stock
        rows = {"tokens_per_s": [], "tokens_per_cpu_s": [], "outside_pass_ms_per_row_pass": []}
        same_all = True
        for pol in args.policies:
            params = SamplingParams(max_tokens=args.max_tokens, **({} if pol == "default" else {"policy": pol}))
            for b in args.batches:
                runs = {name: measure_stages(m, tok, cases, params, b) for name, m in backends.items()}
                same = all(r["ids"] == runs[COLUMNS[0]]["ids"] for r in runs.values())
                same_all = same_all and same
                figures["runs"][f"{pol} b{b}"] = {
                    "same_tokens": same,
                    **{k: {x: y for x, y in r.items() if x != "ids"} for k, r in runs.items()},
                }
                for key in rows:
                    v = [runs[c][key] for c in COLUMNS]
                    row = [pol, b, *v]
                    if key != "outside_pass_ms_per_row_pass":
                        row += [v[2] / v[1], v[2] / v[0]]
                        if key == "tokens_per_s":
                            row.append(stock if stock is not None and b == 1 else "-")
                    rows[key].append(row)
    ratios = ["block loop / Python loop", "block loop / PyTorch"]
    same_note = f"same tokens in every column: {'yes' if same_all else 'no'}"
    what = f"{len(cases)} prompts, {args.max_tokens} tokens at most, {args.threads} thread(s), bundled model, f32"
    print_table(
        rec,
        f"decode tokens/s (wall clock), {what}",
        ["policy", "batch", *COLUMNS, *ratios, "stock llama.cpp one-token"],
        rows["tokens_per_s"],
        [same_note, "stock: the same-shape autoregressive model, one token per step, batch 1"],
    )
    print_table(
        rec, f"decode tokens per CPU second, {what}", ["policy", "batch", *COLUMNS, *ratios], rows["tokens_per_cpu_s"]
    )
    print_table(
        rec,
        f"host CPU ms outside the pass, per pass of a request, {what}",
        ["policy", "batch", *COLUMNS],
        rows["outside_pass_ms_per_row_pass"],
    )
    write_json(rec, args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
