"""Structured output: tool calls decoded free vs under the tool-call grammar, on the airspace test prompts.

python benchmarks/bench_grammar.py [--model DIR] [--n 32] [--threads 1] [--json out.json]

For each mode: exact match (names and arguments), calls that parse and validate against the tool
schemas (names offered, required arguments present, no unknown ones, value types right), TPF and
tokens/s. The grammar masks only the leftmost open position of a block and lets the following
positions commit in the same pass while each is confident and grammatical, so `threshold` under
the grammar should keep most of its tokens per pass.
"""

from __future__ import annotations

import argparse
import time

import torch

from clover.airspace.corpus import gold_calls, load_split, score_tool_calls
from clover.airspace.tools import AIRSPACE_TOOLS
from clover.api.structured import tools_grammar
from clover.bench import print_table, set_threads, write_json
from clover.commands.common import load_model_and_tokenizer
from clover.data.chat import parse_assistant, render
from clover.engine import Engine, SamplingParams

SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in AIRSPACE_TOOLS}
TYPES = {"string": str, "integer": int, "number": (int, float)}


def schema_valid(text: str) -> bool:
    """The answer is tool calls only, each of an offered function with arguments its schema admits."""
    content, calls = parse_assistant(text)
    if content.strip() or not calls:
        return False
    for c in calls:
        s = SCHEMAS.get(c["name"])
        if s is None or not isinstance(c["arguments"], dict):
            return False
        props, args = s["properties"], c["arguments"]
        if set(args) - set(props) or set(s.get("required", [])) - set(args):
            return False
        for k, v in args.items():
            p = props[k]
            if "enum" in p and v not in p["enum"] or not isinstance(v, TYPES.get(p.get("type"), object)):
                return False
            if isinstance(v, bool):
                return False
    return True


def cases(tok, n: int):
    out = []
    for ex in load_split("test", 4 * n):
        gold = gold_calls(ex)
        if gold:
            i = next(i for i, m in enumerate(ex["messages"]) if m["role"] == "assistant")
            out.append((tok.encode(render(ex["messages"][:i], ex["tools"], add_generation_prompt=True)), gold))
        if len(out) == n:
            break
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args()
    set_threads(args.threads)
    model, tok = load_model_and_tokenizer(args.model)
    engine = Engine(model, tok, max_batch_size=1)
    grammar = tools_grammar(AIRSPACE_TOOLS)  # what the server applies under tool_choice auto
    data = cases(tok, args.n)
    engine.generate(data[0][0], SamplingParams(max_tokens=8, grammar=grammar))  # builds the token table
    figures, rows = {"n": len(data)}, []
    for policy in ("ar", "threshold"):
        for constrained in (False, True):
            params = SamplingParams(max_tokens=200, policy=policy, grammar=grammar if constrained else None)
            t0, toks, passes, exact, valid = time.perf_counter(), 0, 0, 0, 0
            for ids, gold in data:
                with torch.inference_mode():
                    out = engine.generate(ids, params)
                toks += len(out.token_ids)
                passes += out.stats["forward_passes"]
                exact += bool(score_tool_calls(parse_assistant(out.text)[1], gold))
                valid += schema_valid(out.text)
            wall = time.perf_counter() - t0
            name = f"{policy}{' + grammar' if constrained else ''}"
            r = {
                "exact_match": exact / len(data),
                "schema_valid": valid / len(data),
                "tpf": toks / passes,
                "tokens_per_s": toks / wall,
            }
            figures.update({f"{name.replace(' + ', '_')}_{k}": v for k, v in r.items()})
            rows.append(
                [
                    name,
                    f"{100 * r['exact_match']:.1f} %",
                    f"{100 * r['schema_valid']:.1f} %",
                    r["tpf"],
                    r["tokens_per_s"],
                ]
            )
    print_table(
        f"tool calls free vs under the grammar ({len(data)} test prompts, batch 1, {args.threads} thread(s))",
        ["mode", "exact match", "schema-valid calls", "TPF", "tokens/s"],
        rows,
    )
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
