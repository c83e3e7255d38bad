"""Streamed chat and text completions as OpenAI's chunk objects, without HTTP: the engine's events
in, ``chat.completion.chunk`` / ``text_completion`` dicts out (the role chunk, content and
tool-call deltas, each chunk's logprobs, the finish chunk with Clover's stats, the usage chunk).

The server frames each chunk as one SSE ``data:`` line; ``clover.LLM.chat(..., stream=True)`` and
``.complete(..., stream=True)`` yield them as they are. Both feed ``(choice index, event)`` pairs
from however they run the engine, so a stream is the same chunks in process and over HTTP.
"""

from __future__ import annotations

import time

from clover.api.errors import as_api_error
from clover.api.prepare import Prepared
from clover.api.replies import (
    AssistantStream,
    chat_logprobs,
    clover_stats,
    completion_logprobs,
    finish_reason,
    start_record,
    step_record,
    usage,
)
from clover.api.structured import legacy_delta
from clover.engine import Event, Finished, StepEvent, TextDelta


def error_chunk(e: Exception) -> dict:
    """What a stream sends when the request fails midway: OpenAI's error body."""
    return as_api_error(e).body()


class ChatStream:
    """The chunks of one chat request of ``n`` choices. ``start()`` first, ``event(i, ev)`` for
    each engine event of choice ``i``, ``end()`` last (the usage chunk when asked for).
    ``steps``: Clover's per-pass records (``clover`` chunks), what the playground draws."""

    def __init__(
        self, rid: str, model: str, prep: Prepared, n: int, tokenizer, include_usage: bool = False, steps: bool = False
    ):
        self.rid, self.model, self.prep, self.tokenizer = rid, model, prep, tokenizer
        self.created = int(time.time())
        self.include_usage, self.steps = include_usage, steps
        self.want_lp = prep.params.logprobs is not None
        self.pending: list[list] = [[] for _ in range(n)]  # per choice: logprobs not yet sent
        self.streams = [
            AssistantStream(prep.prefill, prep.parse_tools, prep.max_calls, prep.tool_names) for _ in range(n)
        ]
        self.outs: list = []

    def chunk(self, i: int = 0, delta: dict | None = None, reason: str | None = None, **extra) -> dict:
        choices = []
        if delta is not None:  # a chunk's logprobs: those of the tokens committed since the last chunk
            lp = chat_logprobs(self.pending[i], self.tokenizer) if self.want_lp and self.pending[i] else None
            self.pending[i] = []
            choices = [{"index": i, "delta": delta, "finish_reason": reason, "logprobs": lp}]
        d = {
            "id": self.rid,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            **extra,
        }
        if self.include_usage:
            d.setdefault("usage", None)
        return d

    def _delta(self, i: int, d: dict) -> dict:
        return self.chunk(i, legacy_delta(d) if self.prep.legacy else d)

    def start(self) -> list[dict]:
        out = [self.chunk(i, {"role": "assistant", "content": ""}) for i in range(len(self.streams))]
        if self.steps:
            out.append(self.chunk(clover=start_record(self.prep, self.tokenizer)))
        return out

    def event(self, i: int, ev: Event) -> list[dict]:
        if isinstance(ev, TextDelta):
            if self.want_lp:
                self.pending[i] += ev.logprobs or []
            return [self._delta(i, d) for d in self.streams[i].feed(ev.text)]
        if isinstance(ev, StepEvent):
            return [self.chunk(clover={**step_record(ev, self.tokenizer), "choice": i})] if self.steps else []
        if isinstance(ev, Finished):
            out = ev.output
            self.outs.append(out)
            chunks = [self._delta(i, d) for d in self.streams[i].finish()]
            reason = finish_reason(out, self.streams[i].calls, self.prep.legacy)
            return [*chunks, self.chunk(i, {}, reason, clover=clover_stats(out, self.prep.block_size))]
        return []

    def end(self) -> list[dict]:
        return [self.chunk(usage=usage(self.outs, len(self.outs)))] if self.include_usage else []


class TextStream:
    """The chunks of one text-completion request (choice ``k * n + i``: sample i of prompt k).
    ``heads``: with ``echo``, each choice's prompt text, sent as its first chunk."""

    def __init__(
        self,
        rid: str,
        model: str,
        prep: Prepared,
        n: int,
        tokenizer,
        choices: int,
        include_usage: bool = False,
        heads: list[str] | None = None,
    ):
        self.rid, self.model, self.prep, self.tokenizer, self.n = rid, model, prep, tokenizer, n
        self.created = int(time.time())
        self.include_usage, self.heads = include_usage, heads
        self.offset = [0] * choices  # per choice: characters of text sent so far (logprobs' text_offset)
        self.outs: list = [None] * choices

    def chunk(self, i: int, text: str | None, reason: str | None = None, logprobs=None, **extra) -> dict:
        choices = []
        if text is not None:
            lp = completion_logprobs(logprobs, self.tokenizer, self.offset[i]) if logprobs is not None else None
            choices = [{"index": i, "text": text, "finish_reason": reason, "logprobs": lp}]
            self.offset[i] += len(text)
        d = {
            "id": self.rid,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            **extra,
        }
        if self.include_usage:
            d.setdefault("usage", None)
        return d

    def start(self) -> list[dict]:
        return [self.chunk(i, head) for i, head in enumerate(self.heads or [])]

    def event(self, i: int, ev: Event) -> list[dict]:
        if isinstance(ev, TextDelta) and (ev.text or ev.logprobs):
            return [self.chunk(i, ev.text, logprobs=ev.logprobs)]
        if isinstance(ev, Finished):
            self.outs[i] = ev.output
            stats = clover_stats(ev.output, self.prep.block_size)
            return [self.chunk(i, "", finish_reason(ev.output, []), clover=stats)]
        return []

    def end(self) -> list[dict]:
        return [self.chunk(0, None, usage=usage(self.outs, self.n))] if self.include_usage else []
