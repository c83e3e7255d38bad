"""``clover bench decisions`` and ``clover bench serve``.

decisions: on the decision test groups, the same model answers each group ``joint`` (one
request, all answer slots in one block) and ``independent`` (one request per question): group
all-correct rate, per-question accuracy, wall time per group. This module keeps its flags and
table; ``clover.bench.joint_vs_independent`` measures.

serve: a live ``clover serve`` on 127.0.0.1 (a subprocess on a free port) and N concurrent
streaming clients (official ``openai`` client) on the airspace test prompts: requests/s,
tokens/s, p50/p95 latency and time to first token, errors. With ``--long-prompt N`` instead:
the engine stepped as the server's thread steps it, streams decoding while an N-token prompt
arrives, their worst gap between tokens with the prompt prefilled whole and in chunks
(``clover.bench.serve_gaps``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

from clover.airspace.chats import load_split
from clover.api.loading import load_engine, load_model_dir
from clover.bench import BENCHMARKS, print_table, set_threads, write_json
from clover.bench.joint_vs_independent import measure_decisions
from clover.bench.served import served
from clover.commands.common import (
    THREADS_HELP,
    add_device_args,
    add_threads_arg,
    device_setup,
    int_at_least,
    positive_int,
)
from clover.commands.threads import apply_threads
from clover.engine import PREFILL_CHUNK


# -- decisions -----------------------------------------------------------------------------------
def add_decisions_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="Clover checkpoint directory (default: the bundled model)")
    p.add_argument("--n", type=int, default=100, help="decision groups of the split")
    p.add_argument("--split", default="test", choices=["train", "validation", "test"])
    p.add_argument("--block-size", type=int, help="default: the model's, or the smallest that holds the answers")
    p.add_argument("--policy", help="answer slots' policy (default: /v1/decisions' own, DEFAULT_POLICY)")
    p.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="answer slots' commit threshold (default: /v1/decisions' own, "
        "clover.api.joint_decisions.DEFAULT_THRESHOLD)",
    )
    p.add_argument("--no-sequential", action="store_true", help="skip the one-call-per-question timing")
    add_threads_arg(p)
    add_device_args(p)
    p.add_argument("--json", metavar="PATH", help="write the figures here")


def run_decisions(args: argparse.Namespace) -> int:
    from clover.api.joint_decisions import DEFAULT_POLICY, DEFAULT_THRESHOLD  # deferred: loads torch

    device_setup(args, "clover bench decisions")
    set_threads(args.threads)
    args.threshold = DEFAULT_THRESHOLD if args.threshold is None else args.threshold
    args.policy = args.policy or DEFAULT_POLICY
    try:
        # no prefix cache: every mode replays the same groups, and each should pay its whole prefill
        engine = load_engine(
            args.model, max_batch_size=16, prefix_cache_mb=0, device=args.device, dtype=args.dtype, compile=args.compile
        )
    except FileNotFoundError as e:
        raise SystemExit(f"clover bench decisions: {e}") from None
    args.threads = apply_threads(engine.model, args.threads)
    try:
        figures, res = measure_decisions(
            engine, args.split, args.n, args.policy, args.threshold, args.block_size, not args.no_sequential
        )
    except ValueError as e:
        raise SystemExit(f"clover bench decisions: {e}") from None
    figures["model"] = str(args.model or "bundled default")
    j, n, asked = res["joint"], figures["n_groups"], figures["n_groups"] + figures["skipped_groups"]
    rows = [
        [m, r["group_acc"], r["question_acc"], 1e3 * r["s_per_group"], r["passes_per_group"]] for m, r in res.items()
    ]
    print_table(
        f"clover bench decisions ({n} {args.split} groups, {figures['n_questions']} questions, {args.policy} "
        f"{args.threshold}, {args.threads} thread(s))",
        ["mode", "group all-correct", "question acc", "ms / group", "request passes / group"],
        rows,
        [
            f"joint block size x blocks spanned: {j['blocks']}",
            f"{asked - n} of {asked} groups skipped: an option this layout cannot hold",
            "ms / group: wall time of the whole call, answer probabilities included (they are the decode's logprobs)",
            f"joint vs independent: {figures['group_acc_gain_points']:+.1f} points, "
            f"{figures['speedup_vs_independent']:.2f}x faster per group",
        ],
    )
    write_json(args.json, figures)
    return 0


# -- serve ---------------------------------------------------------------------------------------
def add_serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="Clover checkpoint directory (default: the bundled model)")
    p.add_argument("--concurrency", default="1,8,32", help="concurrent streaming clients, one run each")
    p.add_argument("--requests-per-client", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--max-batch-size", type=int, default=32)
    p.add_argument(
        "--prefill-chunk",
        type=int_at_least(0),
        default=PREFILL_CHUNK,
        metavar="TOKENS",
        help="the server's prompt tokens prefilled per engine step (0: each prompt whole)",
    )
    p.add_argument(
        "--long-prompt",
        type=positive_int,
        metavar="TOKENS",
        help="instead: --streams streams decoding while a prompt of this many tokens arrives; their worst "
        "gap between tokens, the prompt prefilled whole and in --prefill-chunk chunks",
    )
    p.add_argument("--streams", type=positive_int, default=8, help="with --long-prompt: the streams decoding")
    p.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="with --long-prompt: gaps in wall time, or in this process's CPU time (the work, whatever "
        "else runs on the machine; the same as wall time with one thread on an idle machine)",
    )
    add_threads_arg(p, THREADS_HELP + " (the server's)")
    add_device_args(p)
    p.add_argument("--json", metavar="PATH", help="write the figures here")


def _server_flags(args) -> list[str]:
    # the prompts repeat: no prefix cache, so that every request pays its own prefill
    flags = ["--log-level", "warning", "--max-batch-size", str(args.max_batch_size), "--max-queue", "512"]
    flags += ["--prefix-cache-mb", "0", "--prefill-chunk", str(args.prefill_chunk), "--device", args.device]
    flags += ["--dtype", args.dtype, "--compile" if args.compile else "--no-compile"]
    return flags + (["--model", args.model] if args.model else [])


def _prompts(n: int) -> list[dict]:
    out = []
    for ex in load_split("test", 4 * n):
        if ex["kind"] == "plain":  # plain text, no chat: the completions route's
            continue
        msgs = []
        for m in ex["messages"]:
            if m["role"] == "assistant":
                break
            msgs.append(m)
        out.append({"messages": msgs, "tools": ex.get("tools")})
        if len(out) == n:
            break
    return out


async def _level(url: str, c: int, per_client: int, max_tokens: int, prompts: list[dict]) -> dict:
    import openai  # optional: openai (a test dependency)

    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)
    lat, ttft, tokens, errors = [], [], 0, 0

    async def one(k: int) -> None:
        nonlocal tokens, errors
        p = prompts[k % len(prompts)]
        t0 = time.perf_counter()
        first = None
        try:
            kw = {"tools": p["tools"]} if p["tools"] else {}
            stream = await client.chat.completions.create(
                model="clover",
                messages=p["messages"],
                max_tokens=max_tokens,
                stream=True,
                stream_options={"include_usage": True},
                **kw,
            )
            n = None
            async for ch in stream:
                if first is None and ch.choices and (ch.choices[0].delta.content or ch.choices[0].delta.tool_calls):
                    first = time.perf_counter() - t0
                if ch.usage is not None:
                    n = ch.usage.completion_tokens
            if n is None:
                raise RuntimeError("no usage chunk")
            tokens += n
            lat.append(time.perf_counter() - t0)
            ttft.append(first if first is not None else lat[-1])
        except Exception as e:
            errors += 1
            print(f"  request failed: {type(e).__name__}: {e}", file=sys.stderr)

    async def worker(w: int) -> None:
        for r in range(per_client):
            await one(w * per_client + r)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(c)))
    wall = time.perf_counter() - t0
    await client.close()
    q = lambda xs, f: statistics.quantiles(xs, n=100)[int(f * 100) - 1] if len(xs) > 1 else (xs[0] if xs else 0.0)
    return {
        "clients": c,
        "requests": c * per_client,
        "errors": errors,
        "wall_s": wall,
        "requests_per_s": len(lat) / wall,
        "tokens_per_s": tokens / wall,
        "p50_latency_s": q(lat, 0.5),
        "p95_latency_s": q(lat, 0.95),
        "p50_ttft_s": q(ttft, 0.5),
    }


def run_serve(args: argparse.Namespace) -> int:
    levels = [int(x) for x in args.concurrency.split(",") if x]
    device_setup(args, "clover bench serve")  # before a server starts
    if args.long_prompt:
        return run_long_prompt(args)
    with served(_server_flags(args), args.threads, "clover bench serve") as url:
        prompts = _prompts(64)
        asyncio.run(_level(url, 2, 1, args.max_tokens, prompts))  # warm-up
        results = [asyncio.run(_level(url, c, args.requests_per_client, args.max_tokens, prompts)) for c in levels]
    rows = [
        [
            r["clients"],
            r["requests"],
            r["requests_per_s"],
            r["tokens_per_s"],
            r["p50_latency_s"],
            r["p95_latency_s"],
            r["p50_ttft_s"],
            r["errors"],
        ]
        for r in results
    ]
    print_table(
        f"clover bench serve ({args.model or 'bundled model'}, max_tokens {args.max_tokens}, batch "
        f"{args.max_batch_size}, --device {args.device} --dtype {args.dtype}, "
        f"{args.threads or 'default'} server thread(s))",
        ["clients", "requests", "req/s", "tok/s", "p50 s", "p95 s", "p50 TTFT s", "errors"],
        rows,
        [
            "streaming chat completions with the airspace tools, official openai client, server in a subprocess "
            "(prefix cache off: the bench's prompts repeat)"
        ],
    )
    figures = {
        "max_tokens": args.max_tokens,
        "max_batch_size": args.max_batch_size,
        "levels": results,
        "errors": sum(r["errors"] for r in results),
    }
    for r in results:
        for k in ("requests_per_s", "tokens_per_s", "p50_latency_s", "p95_latency_s", "errors"):
            figures[f"c{r['clients']}_{k}"] = r[k]
    write_json(args.json, figures)
    return 1 if figures["errors"] else 0


def run_long_prompt(args: argparse.Namespace) -> int:
    from clover.bench.serve_gaps import measure, model_for  # deferred: loads torch, not for clover --help

    set_threads(args.threads)
    if not args.prefill_chunk:
        raise SystemExit("clover bench serve: --long-prompt compares whole prompts with chunks: --prefill-chunk > 0")
    model, tokenizer = load_model_dir(args.model, args.threads, args.device, args.dtype, args.compile)
    args.threads = apply_threads(model, args.threads)
    long_tokens = 32
    model, weights = model_for(model, args.long_prompt, long_tokens)
    runs = [
        measure(model, tokenizer, chunk, args.streams, args.long_prompt, long_tokens, args.clock)
        for chunk in (0, args.prefill_chunk)
    ]
    w = model.lm_head.weight
    figures = {
        "long_prompt": args.long_prompt,
        "streams": args.streams,
        "weights": weights,
        "block_size": model.config.block_size,
        "device": str(w.device),
        "dtype": str(w.dtype)[6:],
        "threads": args.threads,
        **runs[1],
        "whole_prompt": runs[0],
    }
    rows = [
        [
            "whole prompt" if r["prefill_chunk"] == 0 else f"chunks of {r['prefill_chunk']}",
            r["max_gap_ms_alone"],
            r["max_gap_ms_long_prompt"],
            r["gap_ratio"],
            r["max_gap_ms_long_first_block"],
            r["long_prompt_prefill_s"],
            r["long_prompt_ttft_s"],
        ]
        for r in runs
    ]
    print_table(
        f"clover bench serve --long-prompt {args.long_prompt} ({args.streams} streams, "
        f"{args.model or 'bundled model'}, block {figures['block_size']}, {figures['device']} {figures['dtype']}, "
        f"{args.threads} thread(s), {args.clock} clock)",
        [
            "prefill",
            "worst gap alone ms",
            "worst gap, its prefill ms",
            "ratio",
            "worst gap, its 1st block ms",
            "its prefill s",
            "its TTFT s",
        ],
        rows,
        [
            f"weights: {weights}",
            "gap: between a stream's consecutive text deltas (a block each); alone: before the long prompt "
            "arrives; its prefill: from its arrival to the step it joins the batch in; its 1st block: then "
            "until its first text",
        ],
    )
    write_json(args.json, figures)
    return 0


BENCHMARKS["decisions"] = (
    "joint vs independent decisions on the decision test groups: accuracy and time per group",
    add_decisions_args,
    run_decisions,
)
BENCHMARKS["serve"] = (
    "N concurrent streaming clients against a live server: req/s, tok/s, p50/p95 latency, errors",
    add_serve_args,
    run_serve,
)
