"""The engine's answers in OpenAI's shapes: chat and text completion responses (choices, finish
reasons, usage, Clover's own stats), tool calls parsed out of the assistant's text, logprobs, the
assistant stream's ``delta`` dicts and the playground's step records. What the request asked for
comes from its ``Prepared`` (``clover.api.prepare``); the parsing itself is ``clover.data.chat``.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Collection

from clover.api.prepare import Prepared
from clover.data.chat import TOOL_CLOSE, TOOL_OPEN, openai_tool_calls, parse_assistant
from clover.engine import RequestOutput, StepEvent, TokenLogprob


def new_id(prefix: str, sep: str = "-") -> str:
    """``chatcmpl-…`` (chat and completions); the Responses API writes ``resp_…`` (``sep="_"``)."""
    return f"{prefix}{sep}{secrets.token_hex(12)}"


def usage(outs: RequestOutput | list[RequestOutput], n: int = 1) -> dict:
    """Token counts; with several choices each prompt counts once (every ``n`` outputs share one)."""
    outs = outs if isinstance(outs, list) else [outs]
    p = sum(len(o.prompt_ids) for o in outs[::n])
    c = sum(len(o.token_ids) for o in outs)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def clover_stats(out: RequestOutput, block_size: int) -> dict:
    keys = ("forward_passes", "tokens", "tpf", "tokens_per_s", "ttft_s", "time_per_block_s", "wall_s")
    return {"type": "stats", "block_size": block_size, **{k: out.stats[k] for k in keys if k in out.stats}}


# what a reply's words never hold when tools are on offer: tool-call markup (the tags, the call
# envelope's keys, an offered function's name closed by a quote), which a model may write without a
# well-formed call around it ('You'recall_drone", "arguments": {welcome.')
MARKUP = (TOOL_OPEN, TOOL_CLOSE, '{"name"', '"arguments"')


def reply_words(text: str, names: Collection[str] | None, partial: bool = False) -> str:
    """The words of a reply with tools on offer: ``text`` up to its first piece of tool-call markup
    (what follows is a call that did not parse, never content). ``partial`` (streaming): a trailing
    start of a markup piece, which more text may complete, is held back too."""
    marks = MARKUP + tuple(f'{n}"' for n in names or ())
    text = text[: min((i for m in marks if (i := text.find(m)) >= 0), default=len(text))]
    if partial:
        hold = max((k for m in marks for k in range(1, min(len(m), len(text) + 1)) if text.endswith(m[:k])), default=0)
        text = text[: len(text) - hold]
    return text


def assistant_message(
    text: str, parse_tools: bool, max_calls: int | None = None, names: frozenset[str] | None = None
) -> tuple[str | None, list[dict]]:
    """Full assistant text (prefill included) → (content, OpenAI tool_calls). With tools on offer
    the content is the reply's words only (``reply_words``): a call that does not parse, or names
    a function not in ``names``, is neither a tool call nor content."""
    if not parse_tools:
        return text.strip(), []
    content, calls = parse_assistant(text, names)
    content = reply_words(content, names).strip()
    calls = calls[:max_calls]
    tool_calls = openai_tool_calls(calls, [new_id("call") for _ in calls])
    return (content or None) if tool_calls else content, tool_calls


def finish_reason(out: RequestOutput, tool_calls: list, legacy: bool = False) -> str:
    """OpenAI's: ``length`` whenever max_tokens cut the answer (complete calls before the cut are
    still returned, a truncated one is not: a client must not take a cut answer as finished)."""
    if out.finish_reason == "length":
        return "length"
    if tool_calls:
        return "function_call" if legacy else "tool_calls"
    return "stop"


def chat_response(rid: str, model: str, prep: Prepared, outs: list[RequestOutput], tokenizer) -> dict:
    """One choice per output (``n`` samples of the same prompt)."""
    choices = []
    for i, out in enumerate(outs):
        content, calls = assistant_message(
            prep.prefill + (out.text or ""), prep.parse_tools, prep.max_calls, prep.tool_names
        )
        message: dict = {"role": "assistant", "content": content}
        if calls and prep.legacy:
            message["function_call"] = calls[0]["function"]
        elif calls:
            message["tool_calls"] = calls
        choices.append(
            {
                "index": i,
                "message": message,
                "finish_reason": finish_reason(out, calls, prep.legacy),
                "logprobs": chat_logprobs(out.logprobs, tokenizer),
            }
        )
    return _response(
        "chat.completion", rid, model, choices, usage(outs, len(outs)), clover_stats(outs[0], prep.block_size)
    )


def completion_response(
    rid: str, model: str, preps: list[Prepared], outs: list[RequestOutput], tokenizer, n: int = 1, echo: bool = False
) -> dict:
    """Choice ``k * n + i``: sample i of prompt k (OpenAI's order). ``echo``: each text starts with
    its prompt, and its logprobs with the prompt's (the first token's null)."""
    choices = []
    for i, out in enumerate(outs):
        head, lp = echoed(out, tokenizer) if echo else ("", None)
        entries = out.logprobs
        if echo and entries is not None and out.stop_logprob is not None:  # scoring tools count the EOS too
            entries = [*entries, out.stop_logprob]
        gen = completion_logprobs(entries, tokenizer, len(head))
        if lp is not None and gen is not None:
            lp = {k: lp[k] + gen[k] for k in lp}
        choices.append(
            {
                "index": i,
                "text": head + (out.text or ""),
                "finish_reason": finish_reason(out, []),
                "logprobs": gen if lp is None else lp,
            }
        )
    return _response("text_completion", rid, model, choices, usage(outs, n), clover_stats(outs[0], preps[0].block_size))


def _response(kind: str, rid: str, model: str, choices: list[dict], used: dict, stats: dict) -> dict:
    """A whole (not streamed) chat or text completion: its choices, its usage and Clover's stats."""
    return {
        "id": rid,
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": used,
        "clover": stats,
    }


# -- logprobs (each generated token's log-probability when the engine chose it) --------------------
def _finite(lp: float) -> float:
    return max(lp, -9999.0)  # JSON has no -inf


def _token_entry(tokenizer, token_id: int, logprob: float) -> dict:
    return {
        "token": tokenizer.decode([token_id]),
        "logprob": _finite(logprob),
        "bytes": list(tokenizer.token_bytes(token_id)),
    }


def chat_logprobs(entries: list[TokenLogprob] | None, tokenizer) -> dict | None:
    """OpenAI chat shape: ``{"content": [{token, logprob, bytes, top_logprobs}], "refusal": None}``."""
    if entries is None:
        return None
    content = [
        {
            **_token_entry(tokenizer, e.token_id, e.logprob),
            "top_logprobs": [_token_entry(tokenizer, t, q) for t, q in e.top],
        }
        for e in entries
    ]
    return {"content": content, "refusal": None}


def completion_logprobs(
    entries: list[TokenLogprob | None] | None, tokenizer, offset: int = 0, token_ids: list[int] | None = None
) -> dict | None:
    """Legacy completions shape: parallel lists, ``text_offset`` counted from ``offset`` (characters).
    A None entry (an echoed prompt's first token: nothing before it) has null logprobs;
    ``token_ids`` names the tokens when entries may be None."""
    if entries is None:
        return None
    ids = token_ids if token_ids is not None else [e.token_id for e in entries]
    tokens = [tokenizer.decode([t]) for t in ids]
    offsets = []
    for t in tokens:
        offsets.append(offset)
        offset += len(t)
    return {
        "tokens": tokens,
        "token_logprobs": [None if e is None else _finite(e.logprob) for e in entries],
        "top_logprobs": [None if e is None else {tokenizer.decode([t]): _finite(q) for t, q in e.top} for e in entries],
        "text_offset": offsets,
    }


def echoed(out: RequestOutput, tokenizer) -> tuple[str, dict | None]:
    """``echo``: the prompt's text, and its logprobs (when the request asked for logprobs)."""
    text = tokenizer.decode(out.prompt_ids)
    return text, completion_logprobs(out.prompt_logprobs, tokenizer, 0, out.prompt_ids)


def step_record(ev: StepEvent, tokenizer) -> dict:
    """A denoise pass for the playground: positions committed in it and their token texts."""
    return {
        "type": "step",
        "block_start": ev.block_start,
        "step": ev.step,
        "positions": ev.positions,
        "tokens": ev.tokens,
        "pieces": [tokenizer.decode([t]) for t in ev.tokens],
    }


def start_record(prep: Prepared, tokenizer) -> dict:
    """The first block holds the prompt's tail: the playground draws it before any step."""
    P, bs = len(prep.prompt_ids), prep.block_size
    start = P // bs * bs
    tail = prep.prompt_ids[start:]
    return {
        "type": "start",
        "prompt_tokens": P,
        "block_size": bs,
        "block_start": start,
        "prompt_tail": [tokenizer.decode([t]) for t in tail],
    }


class AssistantStream:
    """Committed assistant text in, OpenAI chat ``delta`` dicts out.

    Content is streamed up to the first piece of tool-call markup (``reply_words``; whitespace at
    either end held back, so the streamed content equals the non-streamed one); each call is sent as one tool-call delta
    once its ``</tool_call>`` is final; ``finish`` flushes what only the end decides.
    """

    def __init__(
        self, prefill: str, parse_tools: bool, max_calls: int | None = None, names: frozenset[str] | None = None
    ):
        self.text = prefill
        self.parse_tools = parse_tools
        self.max_calls = max_calls
        self.names = names
        self.content = ""  # content sent so far
        self.calls: list[dict] = []  # tool calls sent so far (OpenAI shape)

    def feed(self, delta: str) -> list[dict]:
        self.text += delta
        visible = reply_words(self.text, self.names, partial=True) if self.parse_tools else self.text
        out = self._content(visible.strip())
        if self.parse_tools and TOOL_CLOSE in self.text:
            end = self.text.rfind(TOOL_CLOSE) + len(TOOL_CLOSE)
            out += self._calls(parse_assistant(self.text[:end], self.names)[1])
        return out

    def finish(self) -> list[dict]:
        if not self.parse_tools:
            return self._content(self.text.strip())
        content, calls = parse_assistant(self.text, self.names)
        return self._content(reply_words(content, self.names).strip()) + self._calls(calls)

    def _content(self, target: str) -> list[dict]:
        if len(target) > len(self.content) and target.startswith(self.content):
            piece, self.content = target[len(self.content) :], target
            return [{"content": piece}]
        return []

    def _calls(self, calls: list[dict]) -> list[dict]:
        out = []
        calls = calls[: self.max_calls]
        for call in openai_tool_calls(calls[len(self.calls) :], [new_id("call") for _ in calls[len(self.calls) :]]):
            out.append({"tool_calls": [{"index": len(self.calls), **call}]})
            self.calls.append(call)
        return out
