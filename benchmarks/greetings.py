"""Greetings and thanks with operations words in them, answered in words: no call and no decline.

python benchmarks/greetings.py [--model [NAME=]DIR ...] [--n 40] [--json out.json]

The validation split's fixed greetings and thanks (``clover.airspace.v2.corpus.greeting_set``:
"hi there", "morning, quiet shift so far, how are you doing?", "thanks, that zone is exactly
what I needed" after a tool exchange), offered the model's own tools and decoded as the server
decodes them. An answer is right when it has words, no tool call and no decline ("Sorry", "can't",
"cannot", "unable"). The same turns that do not follow a tool exchange are asked again in a chat
that offers no tools, as a plain OpenAI client sends them ("without tools").
"""

from __future__ import annotations

import argparse
import re

from clover.airspace.v2.corpus import greeting_set
from clover.bench import print_table, write_json

DECLINE = re.compile(r"\b(sorry|can't|cannot|unable)\b", re.IGNORECASE)


def answered_in_words(llm, convs: list[list[dict]], tools: list[dict] | None) -> tuple[int, list[dict]]:
    """How many of ``convs`` get words with no call and no decline, and the ones that do not."""
    outs = llm.chat(convs, tools=tools, max_tokens=64, temperature=0)
    right, wrong = 0, []
    for conv, out in zip(convs, outs):
        msg = out["choices"][0]["message"]
        text = msg.get("content") or ""
        ok = bool(text.strip()) and not msg.get("tool_calls") and not DECLINE.search(text)
        right += ok
        if not ok:
            wrong.append({"message": conv[-1]["content"], "answer": text, "calls": msg.get("tool_calls")})
    return right, wrong


def score(model: str | None, n: int) -> dict:
    from clover.api.llm import LLM  # deferred: torch

    llm = LLM(model, threads=1)
    chats = greeting_set("validation", n)
    convs = [[{k: v for k, v in m.items() if k != "weight"} for m in ex["messages"][:-1]] for ex in chats]
    right, wrong = answered_in_words(llm, convs, chats[0]["tools"])
    alone = [c for c in convs if len(c) == 1]  # not after a tool exchange
    right_plain, wrong_plain = answered_in_words(llm, alone, None)
    return {
        "n": len(chats),
        "right": right / len(chats),
        "wrong": wrong,
        "n_without_tools": len(alone),
        "right_without_tools": right_plain / len(alone),
        "wrong_without_tools": wrong_plain,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model", action="append", help="a model folder, or NAME=FOLDER (repeat; NAME= or none: the bundled model)"
    )
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--json")
    args = ap.parse_args()
    named = [m.split("=", 1) if m and "=" in m else [m or "bundled", m] for m in args.model or [None]]
    figures = {name: score(path or None, args.n) for name, path in named}
    rows = [
        [name, f"{100 * f['right']:.0f} %", f["n"], f"{100 * f['right_without_tools']:.0f} %", f["n_without_tools"]]
        for name, f in figures.items()
    ]
    cols = ["model", "right", "turns", "right without tools", "turns without tools"]
    print_table("greetings and thanks answered in words (validation)", cols, rows)
    for name, f in figures.items():
        for w in f["wrong"][:5] + f["wrong_without_tools"][:5]:
            print(f"  {name}: {w['message']!r} -> {w['answer']!r} {w['calls'] or ''}")
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
