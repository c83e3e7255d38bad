"""Prefix caching on an agent loop: each turn's prompt is the previous one plus the answer and a tool result.

python benchmarks/bench_prefix_cache.py [--model DIR] [--conversations 8] [--turns 4] [--system-words 600]
                                        [--threads 1] [--json out.json]

Airspace conversations (a system prompt of operating rules + tools, an operator message, then per turn the model's
answer, a tool result and the next message) are replayed turn by turn through two engines on
the same model, one with the prefix cache and one without, alternating, in one run: time to
first token (prefill + the first block), time per turn, prompt tokens not recomputed, and
whether every answer is the same token for token.
"""

from __future__ import annotations

import argparse
import json
import time

from clover.airspace.chats import load_split
from clover.airspace.extraction_tools import EXTRACTION_TOOLS
from clover.bench import print_table, set_threads, write_json
from clover.bench.results import Recorder
from clover.commands.common import load_model_and_tokenizer
from clover.data.chat import render
from clover.engine import Engine, SamplingParams

RULES = (
    "Zones are named as the operator writes them. Radii are whole metres. Times are 24-hour HH:MM. "
    "Drone ids are D-<number>. Confirm before lifting a zone near an airport. "
)
RESULTS = ['{"status": "ok"}', '{"status": "airborne", "battery": 71}', '{"status": "done"}']


def conversations(n: int) -> list[list[str]]:
    """Operator messages: each conversation's turns are test-split messages in a row."""
    msgs = [m["content"] for ex in load_split("test", 200) for m in ex.get("messages", ()) if m["role"] == "user"]
    return [msgs[i::n] for i in range(n)]


def main() -> None:
    rec = Recorder()  # the result file: this command line, its start, the tables printed
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--conversations", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--system-words", type=int, default=600, help="length of the system prompt's rules")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args()
    set_threads(args.threads)
    model, tok = load_model_and_tokenizer(args.model)
    engines = {"off": Engine(model, tok), "on": Engine(model, tok, prefix_cache_mb=1024)}
    params = SamplingParams(max_tokens=64)
    per = {k: {"ttft": [[] for _ in range(args.turns)], "wall": [[] for _ in range(args.turns)]} for k in engines}
    prompt_tokens, same = [0] * args.turns, True
    for convo in conversations(args.conversations):
        words = RULES.split()
        system = "You are an airspace operations assistant. " + " ".join(
            words[i % len(words)] for i in range(args.system_words)
        )
        history = {k: [{"role": "system", "content": system}] for k in engines}
        for turn in range(args.turns):
            answers = {}
            for name, engine in engines.items():
                history[name].append({"role": "user", "content": convo[turn]})
                ids = tok.encode(render(history[name], EXTRACTION_TOOLS, add_generation_prompt=True))
                t0 = time.perf_counter()
                out = engine.generate(ids, params)
                per[name]["wall"][turn].append(time.perf_counter() - t0)
                per[name]["ttft"][turn].append(out.stats["ttft_s"])
                answers[name] = out.token_ids
                history[name] += [
                    {"role": "assistant", "content": out.text},
                    {"role": "tool", "content": RESULTS[turn % len(RESULTS)]},
                ]
                if name == "off":
                    prompt_tokens[turn] += len(ids)
            same &= answers["on"] == answers["off"]
    mean = lambda xs: sum(xs) / len(xs)
    rows, figures = [], {"conversations": args.conversations, "turns": args.turns, "same_answers": same}
    for t in range(args.turns):
        off, on = mean(per["off"]["ttft"][t]), mean(per["on"]["ttft"][t])
        w_off, w_on = mean(per["off"]["wall"][t]), mean(per["on"]["wall"][t])
        rows.append(
            [
                str(t + 1),
                round(prompt_tokens[t] / args.conversations),
                off * 1e3,
                on * 1e3,
                off / on,
                w_off * 1e3,
                w_on * 1e3,
            ]
        )
        figures[f"turn{t + 1}"] = {
            "prompt_tokens": prompt_tokens[t] / args.conversations,
            "ttft_ms_off": off * 1e3,
            "ttft_ms_on": on * 1e3,
            "wall_ms_off": w_off * 1e3,
            "wall_ms_on": w_on * 1e3,
        }
    figures.update(engines["on"].prefix_cache.stats())
    print_table(
        rec,
        f"agent loop, prefix cache off vs on ({args.conversations} conversations, batch 1, {args.threads} thread(s))",
        ["turn", "prompt tokens", "TTFT off ms", "TTFT on ms", "TTFT speed-up", "turn off ms", "turn on ms"],
        rows,
        notes=[
            f"answers identical with and without the cache: {same}",
            f"prompt tokens not recomputed: {engines['on'].prefix_cache.hit_tokens} of {sum(prompt_tokens)}",
        ],
    )
    write_json(rec, args.json, figures)
    print(json.dumps({k: figures[k] for k in ("same_answers", "prefix_cache_hit_tokens")}))


if __name__ == "__main__":
    main()
