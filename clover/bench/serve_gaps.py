"""Streams' gaps between tokens while a long prompt arrives (``clover bench serve --long-prompt N``).

A live server (in this process, on loopback) decodes ``streams`` streaming completions; once
each has sent a few blocks, one request with an ``N``-token prompt arrives. A stream's gap is
the time between two of its consecutive chunks as the client reads them (a chunk is a block's
text, so the gap is a block's time). Reported: the streams' worst gap before the long prompt
arrives (``max_gap_ms_alone``), and their worst gap while it is prefilled, from its arrival to
its first chunk (``max_gap_ms_long_prompt``). With the prompt prefilled whole inside one
engine step, every stream waits for that step; chunked prefill (``Engine(prefill_chunk=...)``)
spreads it over several steps between the streams' passes.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field

ALONE_CHUNKS = 8  # chunks each stream sends before the long prompt arrives (the first two not timed)
STREAM_PROMPT = 16  # tokens in each stream's prompt


@dataclass
class Stream:
    """One streaming request's chunk arrival times (``time.perf_counter``)."""

    times: list[float] = field(default_factory=list)
    error: str | None = None

    def gaps_within(self, lo: float, hi: float) -> list[float]:
        """Gaps (s) between consecutive chunks both sent inside ``[lo, hi]``."""
        return [b - a for a, b in zip(self.times, self.times[1:]) if a >= lo and b <= hi]

    def gaps_over(self, lo: float, hi: float) -> list[float]:
        """Gaps (s) between consecutive chunks that overlap ``(lo, hi)`` (a stream waiting then)."""
        return [b - a for a, b in zip(self.times, self.times[1:]) if b > lo and a < hi]


def model_for(model, long_prompt: int, max_tokens: int):
    """``model`` when its context holds the long prompt and its answer, else a model of the same
    shape with random weights and a context long enough (what a step costs depends on the
    shape, not the weights) → (model, a note saying which)."""
    import torch

    from clover.model import CloverForBlockDiffusion

    need = long_prompt + max_tokens
    if model.config.max_position_embeddings >= need:
        return model, f"the model's own weights (context {model.config.max_position_embeddings})"
    cfg = model.config.replace(max_position_embeddings=need)
    torch.manual_seed(0)
    w = model.lm_head.weight
    other = CloverForBlockDiffusion(cfg).to(device=w.device, dtype=w.dtype).eval()
    note = (f"random weights of the model's shape with context {need} (its own context, "
            f"{model.config.max_position_embeddings}, is shorter than the prompt)")  # fmt: skip
    return other, note


async def _stream(client, body: dict, out: Stream, first: asyncio.Event | None = None) -> None:
    """POST a streaming completion; note the arrival time of every chunk that carries text."""
    try:
        async with client.stream("POST", "/v1/completions", json=body) as r:
            if r.status_code != 200:
                out.error = f"HTTP {r.status_code}: {(await r.aread())[:200]!r}"
                return
            async for line in r.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                if any(c.get("text") for c in chunk.get("choices") or ()):
                    out.times.append(time.perf_counter())
                    if first is not None:
                        first.set()
    except asyncio.CancelledError:
        raise
    except Exception as e:  # noqa: BLE001 - reported in the figures
        out.error = f"{type(e).__name__}: {e}"


async def _until(cond, streams: list[Stream], timeout: float = 600.0) -> None:
    t0 = time.perf_counter()
    while not cond():
        bad = [s.error for s in streams if s.error]
        if bad:
            raise RuntimeError(f"a stream failed: {bad[0]}")
        if time.perf_counter() - t0 > timeout:
            raise RuntimeError("the streams stopped sending")
        await asyncio.sleep(0.005)


async def _measure(url: str, vocab: int, streams: int, long_prompt: int, long_tokens: int, stream_tokens: int) -> dict:
    import httpx

    rnd = random.Random(0)
    ids = lambda n: [rnd.randrange(4, vocab) for _ in range(n)]  # noqa: E731 - past the special ids
    body = {"model": "clover", "stream": True, "ignore_eos": True, "temperature": 0}
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        warm = Stream()  # the first request pays one-off costs (allocations), outside the figures
        await _stream(client, {**body, "prompt": ids(STREAM_PROMPT), "max_tokens": 64}, warm)
        runs = [Stream() for _ in range(streams)]
        tasks = [asyncio.create_task(_stream(client, {**body, "prompt": ids(STREAM_PROMPT),
                                                      "max_tokens": stream_tokens}, s)) for s in runs]  # fmt: skip
        await _until(lambda: all(len(s.times) >= ALONE_CHUNKS for s in runs), runs)
        alone_from = max(s.times[2] for s in runs)  # every stream in the batch, the first blocks behind
        long_run, first = Stream(), asyncio.Event()
        t_long = time.perf_counter()
        long_task = asyncio.create_task(
            _stream(client, {**body, "prompt": ids(long_prompt), "max_tokens": long_tokens}, long_run, first)
        )
        await _until(first.is_set, runs + [long_run])
        t_first = long_run.times[0]
        await _until(lambda: all(s.times[-1] > t_first for s in runs), runs)  # each stream's gap over it closes
        for t in tasks + [long_task]:
            t.cancel()
        await asyncio.gather(*tasks, long_task, return_exceptions=True)
    if any(len(s.times) < 2 for s in runs):
        raise RuntimeError("a stream finished before the long prompt was prefilled")
    alone = [g for s in runs for g in s.gaps_within(alone_from, t_long)]
    during = [g for s in runs for g in s.gaps_over(t_long, t_first)]
    return {"max_gap_ms_alone": 1e3 * max(alone), "median_gap_ms_alone": 1e3 * sorted(alone)[len(alone) // 2],
            "max_gap_ms_long_prompt": 1e3 * max(during), "long_prompt_ttft_s": t_first - t_long,
            "gaps_alone": len(alone), "gaps_long_prompt": len(during)}  # fmt: skip


def measure(model, tokenizer, prefill_chunk: int | None, streams: int = 8, long_prompt: int = 4000,
            long_tokens: int = 32) -> dict:  # fmt: skip
    """One server over ``model`` with this ``prefill_chunk`` (0: whole prompts): the streams'
    gaps alone and while the long prompt is prefilled (see the module's docstring)."""
    from clover.engine import Engine
    from clover.server.app import create_app
    from clover.server.live import LiveServer

    cfg = model.config
    engine = Engine(model, tokenizer, max_batch_size=streams + 1, prefill_chunk=prefill_chunk)
    # the streams decode well past the long prompt's prefill, within the context
    stream_tokens = cfg.max_position_embeddings - STREAM_PROMPT - 1
    app = create_app(engine, max_queue=streams + 2)
    with LiveServer(app) as srv:
        figures = asyncio.run(_measure(srv.url, cfg.vocab_size, streams, long_prompt, long_tokens, stream_tokens))
    figures["prefill_chunk"] = engine.scheduler.prefill_chunk or 0
    figures["gap_ratio"] = figures["max_gap_ms_long_prompt"] / figures["max_gap_ms_alone"]
    return figures
