"""Where an engine step's time goes, stage by stage, through both back ends (llama.cpp with the
engine's pass-by-pass loop and with the library's block loop): the model's pass, the back end's
glue, the block loop's own time and each host stage of the engine (scheduling, the pass's inputs, penalties, the
grammar's slot, the sampler, the policy, the grammar's commit, applying it, finished blocks), in
ms of CPU time per engine step (the back ends run on the caller's thread), at batch 1 (the
prompts one after another) and batch 16, under the default policy and ``ar``; the checkpoint
exported to an f32 GGUF file in a temporary folder for llama.cpp.

    python benchmarks/profile_stages.py [--model DIR] [--n 16] [--max-tokens 64] [--batches 1 16]
        [--policies default ar] [--block-size N] [--threads 1] [--json PATH]

One process, the configurations side by side; a timer costs about a microsecond a stage.
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
    p.add_argument("--model", help="Clover checkpoint directory (default: the bundled model)")
    p.add_argument("--n", type=int, default=16, help="test prompts (tool-call turns)")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    p.add_argument("--policies", nargs="+", default=["default", "ar"])
    p.add_argument("--block-size", type=int, help="block size (default: the model's)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()

    from clover.backends.llamacpp import LlamaCppClover, available
    from clover.bench import print_table, set_threads, write_json
    from clover.bench.decode import airspace_cases
    from clover.bench.stages import BLOCK_LOOP, GLUE, PASS, measure_stages
    from clover.commands.common import load_model_and_tokenizer
    from clover.data import default_model_dir
    from clover.engine import SamplingParams
    from clover.engine.stages import ENGINE_STAGES
    from clover.export.gguf import export_gguf

    set_threads(args.threads)
    if (why := available()) is not None:
        raise SystemExit(why)
    model, tok = load_model_and_tokenizer(args.model, args.threads)
    cases = airspace_cases(tok, args.n, model.config)
    figures: dict = {"n": len(cases), "max_tokens": args.max_tokens, "threads": args.threads, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="clover-stages-") as d:
        gguf = export_gguf(args.model or default_model_dir(), Path(d) / "model.gguf", "f32").out
        backends = {
            "PyTorch": model,
            "llama.cpp": LlamaCppClover(gguf, threads=args.threads, native_loop=False),
            "llama.cpp block loop": LlamaCppClover(gguf, threads=args.threads),
        }
        for pol in args.policies:
            params = SamplingParams(
                max_tokens=args.max_tokens,
                block_size=args.block_size,
                **({} if pol == "default" else {"policy": pol}),
            )
            runs = {
                f"{name} b{b}": measure_stages(m, tok, cases, params, b)
                for name, m in backends.items()
                for b in args.batches
            }
            figures["runs"][pol] = {k: {x: y for x, y in r.items() if x != "ids"} for k, r in runs.items()}
            same = all(r["ids"] == next(iter(runs.values()))["ids"] for r in runs.values())
            figures["runs"][pol]["same_tokens"] = same
            rows = [
                [s] + [f"{r['stages_ms'][s]:.3g}" for r in runs.values()]
                for s in (PASS, GLUE, BLOCK_LOOP, *ENGINE_STAGES)
            ]
            rest = [r["step_ms"] - sum(r["stages_ms"].values()) for r in runs.values()]
            rows.append(["outside engine.step (adding requests, the caller's loop)"] + [f"{x:.3g}" for x in rest])
            rows.append(["step, all of it"] + [f"{r['step_ms']:.3g}" for r in runs.values()])
            rows.append(["host time outside the pass"] + [f"{r['outside_pass_ms']:.3g}" for r in runs.values()])
            per_pass = [f"{r['outside_pass_ms_per_row_pass']:.3g}" for r in runs.values()]
            rows.append(["host time outside the pass, per pass of a request"] + per_pass)
            rows.append(["tokens per CPU second"] + [f"{r['tokens_per_cpu_s']:.0f}" for r in runs.values()])
            rows.append(["tokens/s (wall)"] + [f"{r['tokens_per_s']:.0f}" for r in runs.values()])
            rows.append(["tokens per pass"] + [f"{r['tpf']:.2f}" for r in runs.values()])
            bs = args.block_size or model.config.block_size
            print_table(
                rec,
                f"CPU ms per engine step, {pol} policy, block {bs}, {len(cases)} prompts, {args.max_tokens} tokens at "
                f"most, {args.threads} thread(s)",
                ["stage"] + list(runs),
                rows,
                [f"same tokens in every column: {'yes' if same else 'no'}"],
            )
    write_json(rec, args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
