"""Grounded arguments: the allowed-token set's cost per position, with and without x-grounded.

python benchmarks/bench_grounding.py [--json out.json]

For two token tables (the bundled tokenizer's 2,048 tokens, and a 150,000-token table of the
size of Qwen's) and two sources (100 and 10,000 characters), the allowed set is computed from
scratch (no cache) at every position of a copied name: once with the name's property marked
``x-grounded`` (the tokens that continue a span of the source), once without (any string).
Also the one-off cost per request: the span index built over the source.

No Qwen tokenizer can be downloaded here, so the 150k table is made of the bundled tokenizer's
tokens plus words, word pieces and punctuation runs taken from Python's standard library sources
(with and without a leading space, as byte-level BPE vocabularies hold them): what matters for
this cost is how many tokens there are and how they spread over first bytes.
"""

from __future__ import annotations

import argparse
import random
import sysconfig
import time
from pathlib import Path

import regex

from clover.bench import print_table, write_json
from clover.bench.results import Recorder
from clover.commands.common import load_model_and_tokenizer
from clover.engine.grammar import TokenGrammar, TokenTable, json_grammar
from clover.engine.grounding import SpanIndex

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "x-grounded": True}}, "required": ["name"]}
PLAIN = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
NAME = "Old Harbour Pier"


class WideTable(TokenTable):
    """A TokenTable of ``size`` tokens: the bundled ones, then pieces of Python's standard library."""

    def __init__(self, base: TokenTable, size: int):
        self.bytes, self.atomic, self.by_first = list(base.bytes), set(base.atomic), {}
        seen = {b for b in self.bytes if b}
        words: list[bytes] = []
        lib = Path(sysconfig.get_paths()["stdlib"])
        for f in sorted(lib.glob("*.py")):
            for w in regex.findall(r"\p{L}+|\d{1,3}|[^\s\p{L}\d]{1,3}", f.read_text(errors="ignore")):
                for piece in {w, w[:4], w[: len(w) // 2], w[len(w) // 2 :]}:
                    for b in (piece.encode(), b" " + piece.encode(), piece.lower().encode()):
                        if b and b not in seen:
                            seen.add(b)
                            words.append(b)
            if len(self.bytes) + len(words) >= size:
                break
        self.bytes += words[: size - len(self.bytes)]
        for i, b in enumerate(self.bytes):
            if b:
                self.by_first.setdefault(b[0], []).append(i)


def source(n: int, rng: random.Random) -> str:
    """About ``n`` characters of operator-style text with the name in the middle."""
    words = [
        "recall",
        "drone",
        "zone",
        "radius",
        "metres",
        "north",
        "at",
        "Harbour",
        "Pier",
        "Old",
        "wp",
        "Gate",
        "survey",
        "the",
        "and",
        "of",
        "lift",
        "12.5",
        "N",
        "3.25",
        "W",
        "UAV-17",
        "#901",
        "please",
    ]
    out: list[str] = []
    while sum(len(w) + 1 for w in out) < n // 2:
        out.append(rng.choice(words))
    text = " ".join(out) + f' create "{NAME}" now '
    while len(text) < n:
        text += rng.choice(words) + rng.choice([" ", " ", ", ", ".\n"])
    return text[:n]


def per_position(tg: TokenGrammar, states: list) -> float:
    """Seconds per allowed set, computed from scratch at each state."""
    t0 = time.perf_counter()
    for st in states:
        tg._compute(st)
    return (time.perf_counter() - t0) / len(states)


def main() -> None:
    rec = Recorder()  # the result file: this command line, its start, the tables printed
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--json")
    args = ap.parse_args()
    _, tok = load_model_and_tokenizer(args.model)
    bundled = TokenTable(tok)
    tables = {"bundled (2,048)": bundled, "150k": WideTable(bundled, 150_000)}
    rng = random.Random(0)
    rows, figures = [], {}
    for tname, table in tables.items():
        for n in (100, 10_000):
            text = source(n, rng)
            t0 = time.perf_counter()
            SpanIndex(text)
            build = time.perf_counter() - t0
            timing = {}
            for label, schema in (("grounded", SCHEMA), ("plain", PLAIN)):
                g = json_grammar(schema).with_sources({"user": text})
                tg = TokenGrammar(g, table, tok.eos_token_ids)
                head = g.advance(g.start_state, b'{"name": "')
                states = [g.advance(head, NAME[:k].encode()) for k in range(len(NAME) + 1)]
                timing[label] = per_position(tg, states)
            ratio = timing["grounded"] / timing["plain"]
            key = f"{tname.split()[0]}_{n}"
            figures[key] = {
                "grounded_ms": 1e3 * timing["grounded"],
                "plain_ms": 1e3 * timing["plain"],
                "ratio": ratio,
                "index_build_ms": 1e3 * build,
                "tokens": len(table.bytes),
            }
            rows.append(
                [
                    tname,
                    f"{n:,}",
                    f"{1e3 * timing['grounded']:.2f}",
                    f"{1e3 * timing['plain']:.2f}",
                    f"{ratio:.2f}x",
                    f"{1e3 * build:.1f}",
                ]
            )
    cols = ["token table", "source chars", "grounded ms", "plain string ms", "ratio", "index build ms"]
    print_table(rec, "allowed-token set per position of a copied name, computed uncached (one thread)", cols, rows)
    write_json(rec, args.json, figures)


if __name__ == "__main__":
    main()
