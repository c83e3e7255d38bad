"""Whole-span ends: what choosing a grounded string's end whole costs per choice.

python benchmarks/bench_span_ends.py [--n 32] [--rounds 2] [--json out.json]

The first ``--n`` tool-call chats of the validation split, decoded in one batch as the server
decodes them (the tool-call grammar, grounded arguments, the default policy) with
``ends="token"`` and with ``ends="span"`` (``clover.engine.span_choice``), alternately, ``--rounds``
times each: the CPU seconds of each decode (this process's, so other programs on the machine do
not count), the choices made and the CPU time spent in them (per choice), and the tokens written.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # clover from this tree when run as a script

import clover.engine.engine as engine_module
from clover.bench import print_table, set_threads, write_json
from clover.bench.results import Recorder


def requests(tok, n: int, ends: str):
    """The first ``n`` tool-call chats' prompts and sampling parameters (the server's grammar)."""
    from clover.airspace.chats import load_split
    from clover.api.structured import tools_grammar
    from clover.data.chat import render_chat
    from clover.engine import SamplingParams
    from clover.engine.grammar.grounding import source_texts

    chats = [e for e in load_split("validation", 4 * n + 50) if e["kind"] in ("tool_call", "compound")][:n]
    prompts, plist = [], []
    for e in chats:
        msgs = [{k: v for k, v in m.items() if k != "weight"} for m in e["messages"][:-1]]
        prompts.append(tok.encode(render_chat(msgs, e["tools"], True)))
        plist.append(
            SamplingParams(
                max_tokens=320, grammar=tools_grammar(e["tools"]).with_sources(source_texts(msgs), ends=ends)
            )
        )
    return prompts, plist


def main(argv: list[str] | None = None) -> None:
    rec = Recorder()  # the result file: this command line, its start, the tables printed
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="checkpoint directory (default: the bundled model)")
    ap.add_argument("--n", type=int, default=32, help="tool-call chats, decoded in one batch")
    ap.add_argument("--rounds", type=int, default=2, help="decodes of each kind, alternately")
    ap.add_argument("--json", metavar="PATH", help="write the result file here")
    args = ap.parse_args(argv)
    if args.n < 1 or args.rounds < 1:
        raise SystemExit("bench_span_ends: --n and --rounds must be at least 1")
    from clover.commands.common import load_model_and_tokenizer  # deferred: torch
    from clover.engine import Engine

    set_threads(1)
    model, tok = load_model_and_tokenizer(args.model, 1)
    engine = Engine(model, tok, max_batch_size=args.n)
    spent = {"choices": 0, "cpu_s": 0.0}
    real = engine_module.choose_end

    def timed(*a):
        t = time.process_time()
        out = real(*a)
        spent["cpu_s"] += time.process_time() - t
        spent["choices"] += 1
        return out

    engine_module.choose_end = timed
    runs = {"token": [], "span": []}
    for _ in range(args.rounds):
        for ends in runs:
            prompts, plist = requests(tok, args.n, ends)
            spent.update(choices=0, cpu_s=0.0)
            t = time.process_time()
            outs = engine.generate_batch(prompts, plist)
            runs[ends].append(
                {
                    "cpu_s": time.process_time() - t,
                    "choices": spent["choices"],
                    "choice_cpu_s": spent["cpu_s"],
                    "tokens": sum(len(o.token_ids) for o in outs),
                }
            )
    engine_module.choose_end = real
    figures, rows = {}, []
    for ends, rs in runs.items():
        best = min(rs, key=lambda r: r["cpu_s"])
        per = 1e3 * best["choice_cpu_s"] / best["choices"] if best["choices"] else 0.0
        figures[ends] = {**best, "ms_per_choice": per, "rounds": rs}
        rows.append(
            [
                ends,
                f"{best['cpu_s']:.2f}",
                str(best["tokens"]),
                str(best["choices"]),
                f"{per:.0f}" if best["choices"] else "-",
            ]
        )
    extra = figures["span"]["cpu_s"] / figures["token"]["cpu_s"] - 1
    rows.append(["span over token", f"+{100 * extra:.0f} %", "", "", ""])
    title = f"{args.n} validation tool-call chats in one batch, one thread (least CPU of {args.rounds} rounds)"
    print_table(rec, title, ["ends", "CPU s", "tokens", "choices", "ms per choice"], rows)
    write_json(rec, args.json, figures)


if __name__ == "__main__":
    main()
