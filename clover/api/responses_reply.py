"""The answer to a Responses API request (``clover.api.responses``) in that API's shapes: its
output items (the reply's text as a ``message``, each tool call as a ``function_call``), the
``response`` object around them, and ``EventStream``, the ``response.*`` events of a streamed
answer, in the order of the non-streamed output.
"""

from __future__ import annotations

import time

from clover.api.errors import APIError
from clover.api.prepare import Prepared
from clover.api.replies import AssistantStream, assistant_message, chat_logprobs, clover_stats, new_id, usage
from clover.api.responses import ResponsesRequest
from clover.data.chat import TOOL_OPEN
from clover.engine import Event, Finished, RequestOutput, TextDelta, TokenLogprob


def _status(out: RequestOutput) -> str:
    return "incomplete" if out.finish_reason == "length" else "completed"


def message_item(
    text: str, status: str = "completed", item_id: str | None = None, logprobs: list[dict] | None = None
) -> dict:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}
    return {
        "type": "message",
        "id": item_id or new_id("msg", "_"),
        "status": status,
        "role": "assistant",
        "content": [part],
    }


def text_logprobs(entries: list[TokenLogprob] | None, tokenizer, room: int | None = None) -> list[dict]:
    """The Responses' ``output_text.logprobs`` (chat's entries); with ``room``, only the first
    tokens whose text fits in that many characters (the message's, not a tool call's markup)."""
    if not entries or tokenizer is None:
        return []
    content = chat_logprobs(entries, tokenizer)["content"]
    if room is None:
        return content
    kept = []
    for e in content:
        room -= len(e["token"])
        if room < 0:
            break
        kept.append(e)
    return kept


def _before_calls(text: str) -> int | None:
    """How long the answer's text before its first tool call is (``None``: it has no call)."""
    return len(text[: text.index(TOOL_OPEN)].rstrip()) if TOOL_OPEN in text else None


def call_item(call: dict, status: str = "completed") -> dict:
    """An OpenAI chat tool call → a ``function_call`` output item."""
    fn = call["function"]
    return {
        "type": "function_call",
        "id": new_id("fc", "_"),
        "call_id": call["id"].replace("call-", "call_", 1),
        "name": fn["name"],
        "arguments": fn["arguments"],
        "status": status,
    }


def output_items(prep: Prepared, out: RequestOutput, tokenizer=None) -> list[dict]:
    """The answer's items: its text as a message (none when it is only calls), then each call."""
    content, calls = assistant_message(
        prep.prefill + (out.text or ""), prep.parse_tools, prep.max_calls, prep.tool_names
    )
    status = _status(out)
    lps = text_logprobs(out.logprobs, tokenizer, _before_calls(out.text or "") if calls else None)
    items = [message_item(content or "", status, logprobs=lps)] if content or not calls else []
    return items + [call_item(c) for c in calls]


def response_body(
    rid: str,
    model: str,
    req: ResponsesRequest,
    prep: Prepared,
    created: int,
    output: list[dict],
    out: RequestOutput | None = None,
) -> dict:
    """The ``response`` object; without ``out`` it is still in progress."""
    status = "in_progress" if out is None else _status(out)
    body = {
        "id": rid,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "model": model,
        "output": output,
        "parallel_tool_calls": req.parallel_tool_calls is not False,
        "temperature": prep.params.temperature,
        "top_p": prep.params.top_p,
        "tool_choice": req.tool_choice or "auto",
        "tools": req.tools or [],
        "text": req.text or {"format": {"type": "text"}},
        "metadata": req.metadata or {},
        "store": req.store is not False,
        "previous_response_id": req.previous_response_id,
        "usage": None,
    }
    if out is not None:
        u = usage(out)
        body["completed_at"] = int(time.time())
        body["usage"] = {
            "input_tokens": u["prompt_tokens"],
            "output_tokens": u["completion_tokens"],
            "total_tokens": u["total_tokens"],
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        }
        body["clover"] = clover_stats(out, prep.block_size)
    return body


class EventStream:
    """Chat deltas (``AssistantStream``'s) → Responses stream events, each with its sequence number.
    The message item stays open until the end, so the output's order is that of the non-streamed
    answer: the message (if any text), then the calls."""

    def __init__(self, rid: str, model: str, req: ResponsesRequest, prep: Prepared, tokenizer=None):
        self.rid, self.model, self.req, self.prep, self.tokenizer = rid, model, req, prep, tokenizer
        self.pending: list[TokenLogprob] = []  # logprobs of tokens not yet sent with a text delta
        self.logprobs: list[dict] = []  # those sent: the message's
        self.created = int(time.time())
        self.seq = 0
        self.output: list[dict] = []
        self.msg: dict | None = None  # the open message item
        self.text = ""
        self.chat = AssistantStream(prep.prefill, prep.parse_tools, prep.max_calls, prep.tool_names)
        self.body: dict | None = None  # the final response object, once finished

    def on(self, ev: Event) -> list[dict]:
        """The Responses events for one engine event of the request (its text, its end)."""
        if isinstance(ev, TextDelta):
            self.pending += ev.logprobs or []  # sent with the next text delta
            return [e for d in self.chat.feed(ev.text) for e in self.feed(d)]
        if isinstance(ev, Finished):
            return [*(e for d in self.chat.finish() for e in self.feed(d)), *self.finish(ev.output)]
        return []

    def event(self, kind: str, **fields) -> dict:
        self.seq += 1
        return {"type": kind, "sequence_number": self.seq - 1, **fields}

    def start(self) -> list[dict]:
        body = response_body(self.rid, self.model, self.req, self.prep, self.created, [])
        return [self.event("response.created", response=body), self.event("response.in_progress", response=body)]

    def _open_message(self) -> list[dict]:
        self.msg = message_item("", "in_progress")
        self.msg["content"] = []
        self.output.append(self.msg)
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        at = {"item_id": self.msg["id"], "output_index": len(self.output) - 1}
        return [
            self.event("response.output_item.added", output_index=at["output_index"], item=dict(self.msg)),
            self.event("response.content_part.added", **at, content_index=0, part=part),
        ]

    def feed(self, delta: dict) -> list[dict]:
        """One chat delta; a text delta carries the logprobs ``pending`` (of the tokens committed since)."""
        evs = []
        if delta.get("content"):
            if self.msg is None:
                evs += self._open_message()
            self.text += delta["content"]
            # the tokens behind this text; with tools, those that fit in it (the rest may be a call's markup)
            room = len(self.text) - sum(len(e["token"]) for e in self.logprobs) if self.prep.parse_tools else None
            lps = text_logprobs(self.pending, self.tokenizer, room)
            self.pending, self.logprobs = self.pending[len(lps) :], self.logprobs + lps
            evs.append(
                self.event(
                    "response.output_text.delta",
                    item_id=self.msg["id"],
                    delta=delta["content"],
                    output_index=self.output.index(self.msg),
                    content_index=0,
                    logprobs=lps,
                )
            )
        if delta.get("tool_calls"):
            self.pending = []  # a call's tokens: not the message's
        for call in delta.get("tool_calls") or []:
            item = call_item(call)
            args, i = item["arguments"], len(self.output)
            self.output.append(item)
            at = {"item_id": item["id"], "output_index": i}
            evs += [
                self.event(
                    "response.output_item.added",
                    output_index=i,
                    item={**item, "arguments": "", "status": "in_progress"},
                ),
                self.event("response.function_call_arguments.delta", **at, delta=args),
                self.event("response.function_call_arguments.done", **at, arguments=args, name=item["name"]),
                self.event("response.output_item.done", output_index=i, item=item),
            ]
        return evs

    def finish(self, out: RequestOutput) -> list[dict]:
        evs = []
        if self.msg is None and not self.output:  # no text and no calls: an empty message, as non-streamed
            evs += self._open_message()
        if self.msg is not None:
            if len(self.output) == 1:  # no calls: every token is the message's
                self.logprobs += text_logprobs(self.pending, self.tokenizer)
            status = _status(out)
            part = {"type": "output_text", "text": self.text, "annotations": [], "logprobs": self.logprobs}
            at = {"item_id": self.msg["id"], "output_index": self.output.index(self.msg)}
            self.msg.update(status=status, content=[part])
            evs += [
                self.event("response.output_text.done", **at, content_index=0, text=self.text, logprobs=self.logprobs),
                self.event("response.content_part.done", **at, content_index=0, part=part),
                self.event("response.output_item.done", output_index=at["output_index"], item=self.msg),
            ]
        body = self.body = response_body(self.rid, self.model, self.req, self.prep, self.created, self.output, out)
        kind = "response.incomplete" if body["status"] == "incomplete" else "response.completed"
        return evs + [self.event(kind, response=body)]

    def error(self, e: APIError) -> dict:
        return self.event("error", code=e.code, message=e.message, param=e.param)
