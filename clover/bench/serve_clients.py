"""What ``clover bench serve`` measures (its flags and table are ``clover.commands.bench_serve``):
a live ``clover serve`` on loopback (``clover.bench.served``) and N concurrent streaming clients
(the official ``openai`` client) on the airspace test prompts, one run per level of N:
requests/s, tokens/s, p50/p95 latency and time to first token, errors."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

from clover.airspace.chats import load_split
from clover.bench.served import served

# the flat figures each level also gets, as ``c{clients}_{name}``
HEADLINE = ("requests_per_s", "tokens_per_s", "p50_latency_s", "p95_latency_s", "errors")


def server_flags(
    model: str | None, max_batch_size: int, prefill_chunk: int, device: str, dtype: str, compile: bool
) -> list[str]:
    """``clover serve``'s flags for the measure. The prompts repeat: no prefix cache, so that every
    request pays its own prefill."""
    flags = ["--log-level", "warning", "--max-batch-size", str(max_batch_size), "--max-queue", "512"]
    flags += ["--prefix-cache-mb", "0", "--prefill-chunk", str(prefill_chunk), "--device", device]
    flags += ["--dtype", dtype, "--compile" if compile else "--no-compile"]
    return flags + (["--model", model] if model else [])


def airspace_chats(n: int) -> list[dict]:
    """``n`` chats of the airspace test split, each up to its first assistant turn, with its tools."""
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


async def level(url: str, c: int, per_client: int, max_tokens: int, prompts: list[dict]) -> dict:
    """``c`` clients at once, each sending ``per_client`` streaming chat requests one after another."""
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


def measure_serve(
    flags: list[str], threads: int | None, levels: list[int], per_client: int, max_tokens: int, **settings
) -> dict:
    """The server started with ``flags`` (``server_flags``), warmed up, then each level of
    concurrent clients in turn → figures: ``settings`` as given, each level's, the errors in
    all, and each level's headline figures flat (``c8_tokens_per_s`` …)."""
    with served(flags, threads, "clover bench serve") as url:
        prompts = airspace_chats(64)
        asyncio.run(level(url, 2, 1, max_tokens, prompts))  # warm-up
        results = [asyncio.run(level(url, c, per_client, max_tokens, prompts)) for c in levels]
    figures = {"max_tokens": max_tokens, **settings, "levels": results, "errors": sum(r["errors"] for r in results)}
    for r in results:
        for k in HEADLINE:
            figures[f"c{r['clients']}_{k}"] = r[k]
    return figures
