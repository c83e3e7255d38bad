"""OpenAI's Responses API (``POST /v1/responses``) as a thin translation over the chat path.

A request's ``input`` items, ``instructions``, flat function ``tools``, ``tool_choice`` and
``text.format`` become a ``ChatRequest`` (so ``prepare_chat`` does every check and renders the
same prompt a chat request would); the answer is phrased as a ``response`` object, or streamed as
the ``response.*`` events the openai client parses (``clover.api.responses_reply``). A response
is stored (``store``, the default; ``clover.api.store``) with the input items it read, so
``previous_response_id`` continues from it: its input and output come before the new input, tool
calls and their outputs included (its ``instructions`` do not carry over, as OpenAI's).
``conversation`` and a stored ``prompt`` are refused; only function tools and text input are
supported. ``include`` ``message.output_text.logprobs`` (with ``top_logprobs``) gives the text's
token logprobs.
"""

from __future__ import annotations

import json

from pydantic import Field, ValidationError

from clover.api.errors import APIError, bad_request, from_validation
from clover.api.replies import new_id
from clover.api.schemas import ChatRequest, Decoding
from clover.api.settings import decoding_values

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
            it.setdefault("id", new_id(_ITEM_IDS.get(it["type"], "item"), "_"))
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
