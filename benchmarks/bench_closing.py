"""Budget-aware closing (``clover.engine.closing``): what it costs per token, and what it buys.

python benchmarks/bench_closing.py [--model DIR] [--n 2] [--max-tokens 40 256] [--threads 1] [--json out.json]

Each prompt asks for JSON under three strict schemas (flat with an enum, nested with an array,
a string with a pattern), decoded under the schema's grammar with closing on and off (off: the
grammar alone, as before). For each: answers that parse and validate, finish reasons, tokens,
wall time, and the time spent in the closing hooks (``restrict``, ``fits``, ``check``), per
token and as a share of the decode time. Each schema's grammar is built once (as the server
caches it) and warmed up by one request outside the figures.
"""

from __future__ import annotations

import argparse
import json
import time

import jsonschema

from clover.bench import print_table, set_threads, write_json
from clover.bench.results import Recorder
from clover.commands.common import load_model_and_tokenizer
from clover.data.chat import render
from clover.engine import Engine, SamplingParams, closing
from clover.engine.grammar import json_grammar

SCHEMAS = {
    "flat": {
        "type": "object",
        "properties": {
            "drone_id": {"type": "string"},
            "task": {"enum": ["survey", "mapping", "patrol"]},
            "priority": {"type": "integer"},
        },
        "required": ["drone_id", "task", "priority"],
        "additionalProperties": False,
    },
    "nested": {
        "type": "object",
        "properties": {
            "legs": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"at": {"type": "string"}, "altitude_m": {"type": "number"}},
                    "required": ["at", "altitude_m"],
                    "additionalProperties": False,
                },
            },
            "note": {"type": "string"},
        },
        "required": ["legs", "note"],
        "additionalProperties": False,
    },
    "pattern": {
        "type": "object",
        "properties": {"drone_id": {"type": "string", "pattern": "^D-[0-9]+$"}, "zone": {"type": "string"}},
        "required": ["drone_id", "zone"],
        "additionalProperties": False,
    },
}
PROMPTS = [
    "Plan the next flight of drone 17 as JSON.",
    "Send UAV 4 to survey the north pier; answer in JSON.",
    "Which drone covers Market Square? Reply as JSON.",
    "Give the status of drone 8 as JSON.",
]
HOOKS = ("restrict", "fits", "check")


class Timed:
    """The closing hooks, timed (the engine calls them through the module, so patching reaches it)."""

    def __init__(self, on: bool):
        self.on, self.seconds, self.saved = on, 0.0, {}

    def __enter__(self):
        for name in HOOKS:
            fn = self.saved[name] = getattr(closing, name)
            setattr(closing, name, self._wrap(fn, name))
        return self

    def _wrap(self, fn, name):
        off = {"restrict": lambda tg, st, left, ids: ids, "fits": lambda *a: True, "check": lambda *a: None}[name]

        def timed(*args):
            t0 = time.perf_counter()
            try:
                return fn(*args) if self.on else off(*args)
            finally:
                self.seconds += time.perf_counter() - t0

        return timed

    def __exit__(self, *exc):
        for name, fn in self.saved.items():
            setattr(closing, name, fn)


def _prompt(tok, msg: str) -> list[int]:
    return tok.encode(render([{"role": "user", "content": msg}], None, add_generation_prompt=True))


def run(engine: Engine, tok, n: int, max_tokens: int, on: bool) -> list[dict]:
    rows = []
    for name, schema in SCHEMAS.items():
        ok = stop = tokens = 0
        wall = hooks = 0.0
        # one grammar per schema, as the server caches it; its first request (compiling the token
        # sets and, with closing, the smallest values) is a warm-up outside the figures
        g = json_grammar(schema)
        with Timed(on):
            engine.generate(_prompt(tok, PROMPTS[-1]), SamplingParams(max_tokens=max_tokens, grammar=g))
        for msg in PROMPTS[:n]:
            ids = _prompt(tok, msg)
            params = SamplingParams(max_tokens=max_tokens, grammar=g)
            with Timed(on) as t:
                t0 = time.perf_counter()
                out = engine.generate(ids, params)
                wall += time.perf_counter() - t0
            hooks += t.seconds
            tokens += len(out.token_ids)
            stop += out.finish_reason == "stop"
            try:
                jsonschema.validate(json.loads(out.text), schema)
                ok += 1
            except (ValueError, jsonschema.ValidationError):
                pass
        rows.append(
            {
                "schema": name,
                "closing": "on" if on else "off",
                "max_tokens": max_tokens,
                "requests": n,
                "valid": ok,
                "stop": stop,
                "tokens": tokens,
                "wall_s": round(wall, 2),
                "s_per_token": round(wall / max(tokens, 1), 4),
                "closing_us_per_token": round(1e6 * hooks / max(tokens, 1), 1),
                "closing_share_pct": round(100 * hooks / wall, 2) if wall else 0.0,
            }
        )
    return rows


def table(rows: list[dict]) -> tuple[list[str], list[list]]:
    """The rows as docs/benchmarks.md's "Budget-aware closing" shows them (the JSON keeps every key)."""
    columns = ["schema", "closing", "max_tokens", "valid", "finish `stop`", "tokens", "s/token"]
    columns += ["closing µs/token", "closing share"]
    cells = [
        [r["schema"], r["closing"], r["max_tokens"], f"{r['valid']}/{r['requests']}", f"{r['stop']}/{r['requests']}"]
        + [
            r["tokens"],
            f"{r['s_per_token']:.3f}",
            f"{r['closing_us_per_token']:.3g}",
            f"{r['closing_share_pct']:.2f} %",
        ]
        for r in rows
    ]
    return columns, cells


def main() -> None:
    rec = Recorder()  # the result file: this command line, its start, the tables printed
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="checkpoint (default: the bundled model)")
    ap.add_argument("--n", type=int, default=2, help=f"prompts per schema (at most {len(PROMPTS) - 1})")
    ap.add_argument("--max-tokens", type=int, nargs="+", default=[40, 256])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    set_threads(args.threads)
    model, tok = load_model_and_tokenizer(args.model)
    engine = Engine(model, tok)
    engine.generate(tok.encode("warm up"), SamplingParams(max_tokens=8))
    rows = [r for mt in args.max_tokens for on in (False, True) for r in run(engine, tok, args.n, mt, on)]
    print_table(rec, "budget-aware closing: decoding under a schema, closing off and on", *table(rows))
    write_json(rec, args.json, {"rows": rows})


if __name__ == "__main__":
    main()
