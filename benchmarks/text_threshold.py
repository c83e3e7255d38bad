"""The chrF threshold of answers in words (``clover.airspace.textscore.CHRF_THRESHOLD``), chosen
on the validation split.

python benchmarks/text_threshold.py [--text 100] [--multiturn 100] [--plain 20] [--json out.json]

The validation split's gold texts that are judged by chrF (replies in words that are not one of
the corpus's fixed answers, the last turns of conversations answered in words, the rest of a
plain-text line with its numbers masked), from the same draws as ``clover eval airspace``, and
wrong variants of each: every word in turn garbled three ways (a letter added, its last letter
dropped, its first letter changed), every word in turn said twice, and every other gold text
of its set (wrong content). A variant the repeated-word rule already fails (``stutters``) is left
to it. The threshold is the lowest whole chrF above every other wrong variant: no one-word
error of a validation gold passes. No model runs: the threshold is the texts'.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # clover from this tree when run as a script

from clover.bench import print_table, write_json
from clover.bench.results import Recorder


def gold_texts(text: int, multiturn: int, plain: int) -> dict[str, list[str]]:
    """The validation gold texts judged by chrF: {"replies": [...], "plain lines": [...]}."""
    from clover.airspace.calls import answers, gold_calls
    from clover.airspace.scoring import eval_chats2, plain_prompts
    from clover.airspace.textscore import first_line, fixed_replies, numbers_masked

    _, texts, convs = eval_chats2("validation", 0, text, multiturn)
    replies = [answers(e)[0].get("content") or "" for e in texts + convs if not gold_calls(e)]
    lines = [numbers_masked(first_line(p["text"][len(p["prompt"]) :])) for p in plain_prompts("validation", plain)]
    unique = lambda xs: list(dict.fromkeys(x.strip() for x in xs if x.strip()))
    return {"replies": unique(r for r in replies if r not in fixed_replies()), "plain lines": unique(lines)}


def _garbled(word: str) -> list[str]:
    """``word`` with its letters garbled three ways (a letter added after its last letter or
    digit, that one dropped, its first one changed); its punctuation kept."""
    at = [i for i, c in enumerate(word) if c.isalnum()]
    first, last = at[0], at[-1]
    out = [word[: last + 1] + "a" + word[last + 1 :]]
    if len(at) > 1:
        out.append(word[:last] + word[last + 1 :])
    out.append(word[:first] + ("x" if word[first] != "x" else "y") + word[first + 1 :])
    return out


def variants(gold: str, others: list[str]) -> dict[str, list[str]]:
    """The wrong variants of ``gold``: one word garbled, one word said twice, another text."""
    words = gold.split(" ")
    at = [i for i, w in enumerate(words) if any(c.isalnum() for c in w)]
    with_word = lambda i, w: " ".join([*words[:i], w, *words[i + 1 :]])
    return {
        "one word garbled": [with_word(i, g) for i in at for g in _garbled(words[i])],
        "one word said twice": [with_word(i, f"{words[i]} {words[i]}") for i in at],
        "another turn's text": [o for o in others if o != gold],
    }


def measure(golds: dict[str, list[str]]) -> dict:
    """Per set and kind of variant: how many, how many the repeated-word rule fails, the highest
    chrF of the others, how many ``words_match`` (at the threshold the code holds) fails; and the
    threshold above all of them."""
    from clover.airspace.evaluate import repeated_words
    from clover.airspace.textscore import chrf, words_match

    out, top = {}, 0.0
    for name, texts in golds.items():
        for g in texts:
            for kind, vs in variants(g, texts).items():
                row = out.setdefault(f"{name}: {kind}", {"variants": 0, "stutter": 0, "max_chrf": 0.0, "failed": 0})
                for v in vs:
                    row["variants"] += 1
                    row["failed"] += not words_match(v, g, fixed=False)
                    if repeated_words(v) - repeated_words(g):
                        row["stutter"] += 1
                        continue
                    row["max_chrf"] = max(row["max_chrf"], chrf(v, g))
        top = max([top] + [r["max_chrf"] for r in out.values()])
    return {"golds": {k: len(v) for k, v in golds.items()}, "variants": out, "threshold": math.floor(top) + 1}


def main() -> None:
    rec = Recorder()  # the result file: this command line, its start, the tables printed
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--text", type=int, default=100, help="replies in words drawn (as clover eval airspace)")
    ap.add_argument("--multiturn", type=int, default=100, help="conversations drawn")
    ap.add_argument("--plain", type=int, default=20, help="plain-text lines drawn")
    ap.add_argument("--json")
    args = ap.parse_args()
    from clover.airspace.textscore import CHRF_THRESHOLD

    figures = measure(gold_texts(args.text, args.multiturn, args.plain))
    t = figures["threshold"]
    rows = [
        [k, r["variants"], r["stutter"], f"{r['max_chrf']:.1f}", f"{r['failed']} of {r['variants']}"]
        for k, r in figures["variants"].items()
    ]
    cols = [
        "validation gold texts: variant",
        "variants",
        "failed as repeated words",
        "highest chrF of the rest",
        f"failed at the code's threshold (chrF {CHRF_THRESHOLD})",
    ]
    print_table(rec, f"wrong variants of the validation gold texts: the threshold is chrF {t}", cols, rows)
    write_json(rec, args.json, figures)


if __name__ == "__main__":
    main()
