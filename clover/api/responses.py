"""OpenAI's Responses API (``POST /v1/responses``) as a thin translation over the chat path.

A request's ``input`` items, ``instructions``, flat function ``tools``, ``tool_choice`` and
``text.format`` become a ``ChatRequest`` (so ``prepare_chat`` does every check and renders the
same prompt a chat request would); the answer is phrased as a ``response`` object, or streamed as
the ``response.*`` events the openai client parses. A response is stored (``store``, the default;
``clover.api.store``) with the input items it read, so ``previous_response_id`` continues from it:
its input and output come before the new input, tool calls and their outputs included (its
``instructions`` do not carry over, as OpenAI's). ``conversation`` and a stored ``prompt`` are
refused; only function tools and text input are supported. ``include``
``message.output_text.logprobs`` (with ``top_logprobs``) gives the text's token logprobs.
"""

from __future__ import annotations

import json
import time

from pydantic import Field, ValidationError

from clover.api.errors import APIError, bad_request, from_validation
from clover.api.prepare import Prepared
from clover.api.replies import AssistantStream, assistant_message, chat_logprobs, clover_stats, new_id, usage
from clover.api.schemas import ChatRequest, Decoding
from clover.api.settings import decoding_values
from clover.data.chat import TOOL_OPEN
from clover.engine import Event, Finished, RequestOutput, TextDelta, TokenLogprob

ROLES = ("user", "system", "developer", "assistant")
TEXT_PARTS = ("input_text", "output_text", "text")
# chat parameter names (as prepare_chat reports them) → their Responses names
PARAMS = {
    "max_tokens": "max_output_tokens",
    "max_completion_tokens": "max_output_tokens",
    "response_format": "text.format",
    "messages": "input",
}
LOGPROBS = "message.output_text.logprobs"  # the ``include`` entry that asks for the text's logprobs
# fields Clover cannot honour and must not silently drop (the answer would differ from what was asked)
STATEFUL = ("conversation", "prompt")


class ResponsesRequest(Decoding):
    """The fields Clover reads (the decoding settings among them); the rest (``user``,
    ``reasoning``, ``truncation``, ``service_tier``, other ``include`` entries …) are accepted and
    ignored."""

    model: str | None = None
    input: str | list[dict]
    instructions: str | None = None
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    text: dict | None = None
    stream: bool | None = False
    store: bool | None = None  # None: stored, as OpenAI's default
    previous_response_id: str | None = None
    conversation: str | dict | None = None
    prompt: str | dict | None = None  # a stored prompt template (OpenAI-side state): refused
    include: list[str] | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    metadata: dict | None = None
    grounded: bool | None = None  # Clover's: false decodes x-grounded properties as plain ones


def _id(prefix: str) -> str:
    return new_id(prefix, "_")


# -- request → ChatRequest ------------------------------------------------------------------------
def _text(content, param: str) -> str | list[dict]:
    """A message's content: a string, or text parts (``input_text`` / ``output_text``)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"{param}: content must be a string or a list of text parts", param)
    parts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "refusal" and isinstance(part.get("refusal"), str):
            parts.append({"type": "text", "text": part["refusal"]})
            continue
        if kind not in TEXT_PARTS or not isinstance(part.get("text"), str):
            raise bad_request(
                f"{param}.{j}: content part type {kind!r} is not supported: this model reads text "
                "only (input_text / output_text)",
                f"{param}.{j}.type",
            )
        parts.append({"type": "text", "text": part["text"]})
    return parts


_ITEM_IDS = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


def input_items(req: ResponsesRequest) -> list[dict]:
    """The request's ``input`` as items, each with an id (what ``/input_items`` lists)."""
    if isinstance(req.input, str):
        items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": req.input}]}]
    else:
        items = [dict(it) if isinstance(it, dict) else it for it in req.input]
    for it in items:
        if isinstance(it, dict):
            it.setdefault("type", "message")
            it.setdefault("id", _id(_ITEM_IDS.get(it["type"], "item")))
    return items


def _messages(req: ResponsesRequest, items: list[dict]) -> list[dict]:
    msgs: list[dict] = [{"role": "system", "content": req.instructions}] if req.instructions else []
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ROLES:
                raise bad_request(f"input[{i}]: role {role!r} is not one of {', '.join(ROLES)}", f"input.{i}.role")
            msgs.append({"role": role, "content": _text(item.get("content"), f"input.{i}.content")})
        elif kind == "function_call":
            if not all(isinstance(item.get(k), str) for k in ("call_id", "name", "arguments")):
                raise bad_request(
                    f"input[{i}]: a function_call item needs call_id, name and arguments as strings", f"input.{i}"
                )
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            if msgs and msgs[-1]["role"] == "assistant":  # calls that follow an assistant message join it
                msgs[-1].setdefault("tool_calls", []).append(call)
            else:
                msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out = item.get("output")
            if not isinstance(item.get("call_id"), str) or not isinstance(out, (str, list)):
                raise bad_request(f"input[{i}]: a function_call_output item needs call_id and output", f"input.{i}")
            msgs.append({"role": "tool", "tool_call_id": item["call_id"], "content": _text(out, f"input.{i}.output")})
        elif kind == "reasoning":  # never produced here; a client replaying another model's turn
            continue
        else:
            raise bad_request(
                f"input[{i}]: item type {kind!r} is not supported (message, function_call and "
                "function_call_output are)",
                f"input.{i}.type",
            )
    if not msgs:
        raise bad_request("input is empty", "input")
    return msgs


def _tools(tools: list[dict] | None) -> list[dict] | None:
    if tools is None:
        return None
    out = []
    for i, t in enumerate(tools):
        if t.get("type") != "function":
            raise bad_request(
                f"tools[{i}]: tool type {t.get('type')!r} is not supported: this server runs function tools only",
                f"tools.{i}.type",
            )
        src = t["function"] if isinstance(t.get("function"), dict) and "name" not in t else t  # chat's nested form too
        fn = {k: src[k] for k in ("name", "description", "parameters", "strict") if src.get(k) is not None}
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice):
    if choice is None or isinstance(choice, str):
        return choice
    if choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    if choice.get("type") == "function" and isinstance((choice.get("function") or {}).get("name"), str):
        return choice  # chat's nested form
    raise bad_request(
        f"tool_choice {json.dumps(choice)} is not supported: use auto, none, required or "
        '{"type": "function", "name": ...}',
        "tool_choice",
    )


def _response_format(text: dict | None) -> dict | None:
    fmt = (text or {}).get("format")
    kind = (fmt or {}).get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        spec = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": spec}
    raise bad_request(
        f"text.format type {kind!r} is not supported (text, json_object, json_schema are)", "text.format.type"
    )


def to_chat(req: ResponsesRequest, model: str, items: list[dict] | None = None) -> ChatRequest:
    """The equivalent chat request; every problem an APIError in the Responses' parameter names.
    ``items``: the conversation (default ``input_items(req)``); after ``previous_response_id``, that
    response's input and output, then this request's input."""
    if req.previous_response_id is not None and items is None:
        raise bad_request(
            "previous_response_id needs a server that stores responses", "previous_response_id", "unsupported_parameter"
        )
    for param in STATEFUL:
        if getattr(req, param) is None:
            continue
        if param == "prompt":
            why = "this server keeps no prompts, so send the instructions and input themselves"
            raise bad_request(
                f"prompt (a stored prompt template) is not supported: {why}", param, "unsupported_parameter"
            )
        why = "continue from a stored response with previous_response_id, or send the whole conversation as input"
        raise bad_request(f"{param} is not supported: {why}", param, "unsupported_parameter")
    want_lp = LOGPROBS in (req.include or [])
    body = {
        "model": req.model or model,
        "messages": _messages(req, input_items(req) if items is None else items),
        "tools": _tools(req.tools),
        "tool_choice": _tool_choice(req.tool_choice),
        "parallel_tool_calls": req.parallel_tool_calls,
        "max_completion_tokens": req.max_output_tokens,
        "response_format": _response_format(req.text),
        "logprobs": want_lp or None,
        "top_logprobs": req.top_logprobs if want_lp else None,
        **decoding_values(req),
        "grounded": req.grounded,
    }
    try:
        return ChatRequest.model_validate({k: v for k, v in body.items() if v is not None})
    except ValidationError as e:
        raise responses_error(from_validation(e.errors(include_url=False))) from None


def responses_error(e: APIError) -> APIError:
    """A chat-path error with its parameter named as the Responses API names it."""
    if e.param:
        head, _, rest = e.param.partition(".")
        if head in PARAMS:
            e.param = PARAMS[head]
        elif head == "tools" and ".function." in e.param:
            e.param = e.param.replace(".function.", ".")
        for old in ("max_completion_tokens", "max_tokens"):
            e.message = e.message.replace(old, "max_output_tokens")
    return e


# -- response shaping -----------------------------------------------------------------------------
def _status(out: RequestOutput) -> str:
    return "incomplete" if out.finish_reason == "length" else "completed"


def message_item(
    text: str, status: str = "completed", item_id: str | None = None, logprobs: list[dict] | None = None
) -> dict:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}
    return {"type": "message", "id": item_id or _id("msg"), "status": status, "role": "assistant", "content": [part]}


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
        "id": _id("fc"),
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
