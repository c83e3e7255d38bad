"""Greetings and thanks with operations words in them, answered with the corpus's own reply.

python benchmarks/greetings.py [--model [NAME=]DIR ...] [--n 40] [--split validation --split test] [--json out.json]

Each split's fixed greetings and thanks (``clover.airspace.chats.greeting_set``: "hi there",
"morning, quiet shift so far, how are you doing?", "thanks, that zone is exactly what I needed"
after a tool exchange), offered the model's own tools and decoded as the server decodes them. An
answer is right when it calls no tool and says the corpus's answer to that turn
(``clover.airspace.textscore.words_match``, the measure of ``clover eval airspace``'s replies
in words: a greeting's, a question's and a thanks' answers are fixed, so word for word). The same
turns that do not follow a tool exchange are asked again in a chat that offers no tools, as a plain
OpenAI client sends them ("without tools"). The test split is the figure; validation is where
the bundled model's greetings training was judged (docs/training.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # clover from this tree when run as a script

from clover.airspace.chats import greeting_set
from clover.airspace.textscore import words_match
from clover.bench import print_table, write_json
from clover.bench.results import Recorder


def answered(outs: list[dict], golds: list[str]) -> list[bool]:
    """Each chat completion right: no call, and its words the gold answer's."""
    return [
        not out["choices"][0]["message"].get("tool_calls")
        and words_match(out["choices"][0]["message"].get("content"), gold)
        for out, gold in zip(outs, golds)
    ]


def _asked(llm, chats: list[dict], tools: list[dict] | None) -> tuple[int, list[dict]]:
    """How many of ``chats`` get their gold answer, and the ones that do not."""
    convs = [[{k: v for k, v in m.items() if k != "weight"} for m in ex["messages"][:-1]] for ex in chats]
    golds = [ex["messages"][-1]["content"] for ex in chats]
    outs = llm.chat(convs, tools=tools, max_tokens=64, temperature=0)
    wrong = [
        {"message": c[-1]["content"], "answer": o["choices"][0]["message"].get("content") or "", "gold": g}
        | {"calls": o["choices"][0]["message"].get("tool_calls")}
        for c, o, g, ok in zip(convs, outs, golds, answered(outs, golds))
        if not ok
    ]
    return len(chats) - len(wrong), wrong


def score(llm, split: str, n: int) -> dict:
    """One model's figures on ``split``'s ``n`` greetings, with tools and (those not after a tool
    exchange) without."""
    chats = greeting_set(split, n)
    right, wrong = _asked(llm, chats, chats[0]["tools"])
    alone = [ex for ex in chats if len(ex["messages"]) == 2]  # not after a tool exchange
    right_plain, wrong_plain = _asked(llm, alone, None)
    return {
        "n": len(chats),
        "right": right / len(chats),
        "wrong": wrong,
        "n_without_tools": len(alone),
        "right_without_tools": right_plain / len(alone),
        "wrong_without_tools": wrong_plain,
    }


def main() -> None:
    rec = Recorder()  # the result file: this command line, its start, the tables printed
    from clover.api.llm import LLM  # deferred: torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model", action="append", help="a model folder, or NAME=FOLDER (repeat; NAME= or none: the bundled model)"
    )
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--split", action="append", choices=["train", "validation", "test"], help="repeat (default: test)")
    ap.add_argument("--json")
    args = ap.parse_args()
    named = [m.split("=", 1) if m and "=" in m else [m or "bundled", m] for m in args.model or [None]]
    splits = args.split or ["test"]
    figures = {}
    for name, path in named:
        llm = LLM(path or None, threads=1)
        figures[name] = {split: score(llm, split, args.n) for split in splits}
    rows = [
        [
            name,
            split,
            f"{100 * f['right']:.0f} %",
            f["n"],
            f"{100 * f['right_without_tools']:.0f} %",
            f["n_without_tools"],
        ]
        for name, by_split in figures.items()
        for split, f in by_split.items()
    ]
    cols = ["model", "split", "right", "turns", "right without tools", "turns without tools"]
    print_table(rec, "greetings and thanks answered with the corpus's reply", cols, rows)
    for name, by_split in figures.items():
        for split, f in by_split.items():
            for w in f["wrong"][:5] + f["wrong_without_tools"][:5]:
                print(f"  {name} {split}: {w['message']!r} -> {w['answer']!r} {w['calls'] or ''}")
    write_json(rec, args.json, figures)


if __name__ == "__main__":
    main()
