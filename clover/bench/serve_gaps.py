"""Streams' gaps between tokens while a long prompt arrives (``clover bench serve --long-prompt N``).

The engine is stepped as the server's engine thread steps it, in this process (no HTTP, whose
costs are the same either way and only add noise): ``streams`` requests decode; once each has
had a few blocks, one request with an ``N``-token prompt arrives. A stream's gap is the time
between two of its consecutive text deltas (a block's text each: what a streaming client gets,
less the transport), so a gap is a block's time. Reported: the streams' worst gap before the
long prompt arrives (``max_gap_ms_alone``); their worst gap while it is prefilled, from its
arrival to the end of the step in which it joins the batch (``max_gap_ms_long_prompt``); and,
apart, their worst gap while it then decodes its first block alongside them
(``max_gap_ms_long_first_block``: a pass costs more with a row of long history in the batch,
whatever the prefill). With the prompt prefilled whole inside one engine step, every stream
waits for that step; chunked prefill (``Engine(prefill_chunk=...)``) spreads it over several
steps between the streams' passes.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import torch

from clover.engine import Engine, Finished, SamplingParams, StepEvent, TextDelta
from clover.model import CloverForBlockDiffusion

ALONE_CHUNKS = 8  # text deltas each stream gets before the long prompt arrives (the first two not timed)
STREAM_PROMPT = 16  # tokens in each stream's prompt


@dataclass
class Stream:
    """When one stream's text deltas arrived (on the measure's clock)."""

    times: list[float] = field(default_factory=list)

    def gaps_within(self, lo: float, hi: float) -> list[float]:
        """Gaps (s) between consecutive deltas both inside ``[lo, hi]``."""
        return [b - a for a, b in zip(self.times, self.times[1:]) if a >= lo and b <= hi]

    def gaps_over(self, lo: float, hi: float) -> list[float]:
        """Gaps (s) between consecutive deltas that overlap ``(lo, hi)`` (the stream waiting then)."""
        return [b - a for a, b in zip(self.times, self.times[1:]) if b > lo and a < hi]


def model_for(model, long_prompt: int, max_tokens: int):
    """``model`` when its context holds the long prompt and its answer, else a model of the same
    shape with random weights and a context long enough (what a step costs depends on the
    shape, not the weights) → (model, a note saying which)."""
    need = long_prompt + max_tokens
    if model.config.max_position_embeddings >= need:
        return model, f"the model's own weights (context {model.config.max_position_embeddings})"
    cfg = model.config.replace(max_position_embeddings=need)
    torch.manual_seed(0)
    w = model.lm_head.weight
    other = CloverForBlockDiffusion(cfg).to(device=w.device, dtype=w.dtype).eval()
    note = (
        f"random weights of the model's shape with context {need} (its own context, "
        f"{model.config.max_position_embeddings}, is shorter than the prompt)"
    )
    return other, note


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def measure(
    model,
    tokenizer,
    prefill_chunk: int | None,
    streams: int = 8,
    long_prompt: int = 4000,
    long_tokens: int = 32,
    clock: str = "wall",
) -> dict:
    """One engine over ``model`` with this ``prefill_chunk`` (0: whole prompts): the streams' gaps
    alone, while the long prompt is prefilled, and while it decodes its first block (see the
    module's docstring). ``clock``: ``wall`` (what a client sees) or ``cpu``, this process's CPU
    time: the work between two deltas whatever else the machine runs (with one CPU thread and
    an idle machine the two agree)."""
    now = CLOCKS[clock]

    rnd = random.Random(0)
    ids = lambda n: [rnd.randrange(4, model.config.vocab_size) for _ in range(n)]
    engine = Engine(model, tokenizer, max_batch_size=streams + 1, prefill_chunk=prefill_chunk)
    engine.generate(ids(STREAM_PROMPT), SamplingParams(max_tokens=64, ignore_eos=True))  # one-off costs, untimed
    # the streams decode well past the long prompt's first block, within the context
    params = SamplingParams(max_tokens=model.config.max_position_embeddings - STREAM_PROMPT - 1, ignore_eos=True)
    runs = {engine.add_request(ids(STREAM_PROMPT), params): Stream() for _ in range(streams)}
    steps = _Stepper(engine, runs, now)
    steps.until(lambda: all(len(s.times) >= ALONE_CHUNKS for s in runs.values()))
    alone_from = max(s.times[2] for s in runs.values())  # every stream in the batch, the first blocks behind
    t_long = now()
    rid = engine.add_request(ids(long_prompt), SamplingParams(max_tokens=long_tokens, ignore_eos=True))
    t_joined = steps.until(lambda: rid in steps.passed)  # its prompt committed, its first pass done
    t_first = steps.until(lambda: rid in steps.delivered)  # its first block's text
    steps.until(lambda: all(s.times[-1] > t_first for s in runs.values()))  # each stream's gap over it closes
    for r in [*runs, rid]:
        engine.abort(r)
    gaps = lambda f, lo, hi: [g for s in runs.values() for g in f(s, lo, hi)]
    alone = gaps(Stream.gaps_within, alone_from, t_long)
    during = gaps(Stream.gaps_over, t_long, t_joined)
    first_block = gaps(Stream.gaps_over, t_joined, t_first)
    return {
        "prefill_chunk": engine.scheduler.prefill_chunk or 0,
        "clock": clock,
        "max_gap_ms_alone": 1e3 * max(alone),
        "median_gap_ms_alone": 1e3 * sorted(alone)[len(alone) // 2],
        "max_gap_ms_long_prompt": 1e3 * max(during),
        "gap_ratio": max(during) / max(alone),
        "max_gap_ms_long_first_block": 1e3 * max(first_block),
        "long_prompt_prefill_s": t_joined - t_long,
        "long_prompt_ttft_s": t_first - t_long,
        "gaps_alone": len(alone),
        "gaps_long_prompt": len(during),
    }


def measure_long_prompt(
    model, tokenizer, long_prompt: int, streams: int, prefill_chunk: int, clock: str, threads: int | None
) -> dict:
    """``clover bench serve --long-prompt``'s figures: ``measure`` with the prompt prefilled whole,
    then in chunks of ``prefill_chunk`` (on ``model_for``'s model); the chunked run's figures at
    the top level, the whole prompt's under ``whole_prompt``."""
    long_tokens = 32
    model, weights = model_for(model, long_prompt, long_tokens)
    whole, chunked = [
        measure(model, tokenizer, chunk, streams, long_prompt, long_tokens, clock) for chunk in (0, prefill_chunk)
    ]
    w = model.lm_head.weight
    return {
        "long_prompt": long_prompt,
        "streams": streams,
        "weights": weights,
        "block_size": model.config.block_size,
        "device": str(w.device),
        "dtype": str(w.dtype)[6:],
        "threads": threads,
        **chunked,
        "whole_prompt": whole,
    }


class _Stepper:
    """Steps ``engine`` as the server's engine thread does, noting when each stream's text
    arrives (a step's events go out when it returns), which requests had a pass, which got text."""

    def __init__(self, engine, runs: dict[str, Stream], now):
        self.engine, self.runs, self.now = engine, runs, now
        self.passed: set[str] = set()
        self.delivered: set[str] = set()

    def until(self, done, max_steps: int = 100_000) -> float:
        """Step until ``done()``; → the time the last step returned."""
        now = self.now()
        for _ in range(max_steps):
            if done():
                return now
            events = self.engine.step()
            now = self.now()
            for ev in events:
                if isinstance(ev, StepEvent):
                    self.passed.add(ev.request_id)
                elif isinstance(ev, TextDelta) and ev.token_ids:
                    self.delivered.add(ev.request_id)
                    if ev.request_id in self.runs:
                        self.runs[ev.request_id].times.append(now)
                elif isinstance(ev, Finished) and ev.request_id in self.runs:
                    raise RuntimeError(f"a stream finished ({ev.output.finish_reason}) before the measure was done")
        raise RuntimeError(f"nothing done after {max_steps} steps")
