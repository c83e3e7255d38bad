"""Structured output: tool calls decoded free, under the tool-call grammar, and under it with
grounded arguments, on the model's own task's test prompts.

python benchmarks/bench_grammar.py [--model DIR] [--n 32] [--threads 1] [--json out.json]

The prompts are the first ``--n`` test chats of the model's task (``model_task``: the bundled
model's, airspace) whose answer is tool calls, each offered the tools its chat offers. Modes:
free (no grammar), grammar (the server's ``tool_choice: auto`` grammar with ``grounded: false``:
free text, calls held to the offered names and their schemas) and grammar + grounded (the
server's default: x-grounded values copied from the conversation). For each mode and decoding
policy (``ar`` and the default): exact match (names and arguments), answers that are calls only,
each of an offered function with arguments its JSON schema admits, TPF and tokens/s.
"""

from __future__ import annotations

import argparse
import time

import jsonschema
import torch

from clover.airspace.calls import gold_calls, score_tool_calls
from clover.airspace.evaluate import prompt_of
from clover.api.structured import tools_grammar
from clover.bench import print_table, set_threads, write_json
from clover.bench.results import Recorder
from clover.commands.common import load_model_and_tokenizer
from clover.data.chat import parse_assistant, render_chat
from clover.data.task import model_task
from clover.engine import Engine, SamplingParams
from clover.engine.grammar.grounding import source_texts
from clover.engine.policies import DEFAULT_POLICY

MODES = ("free", "grammar", "grammar + grounded")


def schema_valid(text: str, tools: list[dict]) -> bool:
    """The answer is tool calls only, each of an offered function with arguments its schema admits."""
    content, calls = parse_assistant(text)
    if content.strip() or not calls:
        return False
    schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools}
    for c in calls:
        if c["name"] not in schemas or not isinstance(c["arguments"], dict):
            return False
        try:
            jsonschema.validate(c["arguments"], schemas[c["name"]])
        except jsonschema.ValidationError:
            return False
    return True


def cases(task, tok, n: int) -> list[dict]:
    """The first ``n`` test chats answered with calls: prompt ids, offered tools, gold calls and
    the grammars of each mode."""
    template = getattr(tok, "chat_template", None)
    out = []
    for ex in task.eval_split("test", 8 * n):
        gold = gold_calls(ex)
        if not gold:
            continue
        g, msgs = tools_grammar(ex["tools"]), prompt_of(ex)  # compiled once per tool set (cached)
        ids = tok.encode(render_chat(msgs, ex["tools"], True, template))
        modes = {"free": None, "grammar": g, "grammar + grounded": g and g.with_sources(source_texts(msgs))}
        out.append({"ids": ids, "tools": ex["tools"], "gold": gold, "grammar": modes})
        if len(out) == n:
            break
    return out


def main() -> None:
    rec = Recorder()  # the result file: this command line, its start, the tables printed
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args()
    set_threads(args.threads)
    model, tok = load_model_and_tokenizer(args.model)
    task = model_task(model.config, default=True)
    if task.eval_split is None:
        raise SystemExit(f"task {task.name!r} has no evaluation split to take prompts from")
    engine = Engine(model, tok, max_batch_size=1)
    data = cases(task, tok, args.n)
    for c in {id(c["grammar"]["grammar"]): c for c in data}.values():  # builds each token table outside the figures
        engine.generate(c["ids"], SamplingParams(max_tokens=8, grammar=c["grammar"]["grammar"]))
    figures, rows = {"n": len(data), "task": task.name}, []
    for policy in ("ar", DEFAULT_POLICY):
        for mode in MODES:
            t0, toks, passes, exact, valid = time.perf_counter(), 0, 0, 0, 0
            for c in data:
                params = SamplingParams(max_tokens=200, policy=policy, grammar=c["grammar"][mode])
                with torch.inference_mode():
                    out = engine.generate(c["ids"], params)
                toks += len(out.token_ids)
                passes += out.stats["forward_passes"]
                exact += bool(score_tool_calls(parse_assistant(out.text)[1], c["gold"]))
                valid += schema_valid(out.text, c["tools"])
            wall = time.perf_counter() - t0
            name = policy if mode == "free" else f"{policy} + {mode}"
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
        rec,
        f"tool calls free, under the grammar and grounded ({task.name}, {len(data)} test prompts, batch 1, "
        f"{args.threads} thread(s))",
        ["mode", "exact match", "calls only, schema-valid", "TPF", "tokens/s"],
        rows,
    )
    write_json(rec, args.json, figures)


if __name__ == "__main__":
    main()
