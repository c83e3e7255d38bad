"""``clover bench replies``: the agent loop's final replies, judged for faithfulness
(``clover.bench.replies``: every number and id from the user turns or tool results, every word
well formed), with ``grounded_reply`` off, on with words free, and on, on the same chats. This
module keeps the flags and the tables."""

from __future__ import annotations

import argparse

from clover.bench import BENCHMARKS, print_table, set_threads, write_json
from clover.commands.common import add_threads_arg, recorder
from clover.commands.threads import apply_threads


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=50, help="operator tasks of the split (default 50)")
    p.add_argument("--split", default="validation", choices=("validation", "test"), help="default: validation")
    p.add_argument(
        "--demo", type=int, default=20, help="messages that each ask for a no-fly zone (default 20; 0: none)"
    )
    p.add_argument("--model", help="Clover checkpoint directory (default: the bundled model)")
    p.add_argument("--max-steps", type=int, default=4, help="model calls per task at most (default 4)")
    add_threads_arg(p)
    p.add_argument("--json", metavar="PATH", help="write the figures here")


LABELS = {"off": "grounded_reply off", "words_free": "grounded_reply on, words free", "on": "grounded_reply on"}


def run(args: argparse.Namespace) -> int:
    from clover.api.llm import LLM  # deferred: loads torch, not for clover --help
    from clover.bench.replies import SETTINGS, measure_replies  # deferred: the task and the engine

    rec = recorder(args)
    if args.n < 1:
        raise SystemExit("clover bench replies: --n must be >= 1")
    set_threads(args.threads)
    llm = LLM(args.model, threads=args.threads)
    args.threads = apply_threads(llm.engine.model, args.threads)
    out = measure_replies(llm, args.n, args.split, args.demo, args.max_steps)
    out.update(threads=args.threads, model=args.model or "bundled")
    for what, title in (("tasks", "operator tasks"), ("demo", "messages that each ask for a no-fly zone")):
        if what not in out:
            continue
        d = out[what]
        rows = [
            [
                LABELS[name],
                d[name]["replies"],
                f"{100 * d[name]['ids_grounded']:.1f} %",
                f"{100 * d[name]['well_formed']:.1f} %",
                f"{100 * d[name]['faithful']:.1f} %",
                d[name]["broken_replies"],
                f"{100 * d[name]['success']:.1f} %",
                f"{d[name]['s_per_task']:.3f}",
            ]
            for name, _ in SETTINGS
        ]
        print_table(
            rec,
            f"replies: {d['n']} {title} of the {args.split} split through the agent loop (default policy)",
            [
                "setting",
                "final replies",
                "ids grounded",
                "words well formed",
                "faithful",
                "replies with a broken word",
                "task success",
                "s / task",
            ],
            rows,
            [
                "ids grounded: every number and id of the reply is one of the user turns or tool results, as written",
                f"well formed: every word is one of the {out['vocabulary_words']} words of the task's reply "
                "vocabulary (its training chats), or of the conversation",
                "words free: grounded_reply with reply_words false (numbers, ids and names held, words not)",
            ],
        )
    write_json(rec, args.json, out)
    return 0


BENCHMARKS["replies"] = (
    "the agent loop's final replies: numbers and ids grounded, words well formed, grounded_reply off and on",
    add_args,
    run,
)
