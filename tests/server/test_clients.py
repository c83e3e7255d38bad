"""Requests as real OpenAI-API clients send them: explicit nulls, long stop strings, refusal parts,
best_of, and tool / response_format schemas in the shapes found in the wild (null or mistyped
keywords, deep nesting) get an OpenAI-shaped answer or a clear 400, never a 500."""

import json

import httpx
import openai
import pytest

from clover.api.prepare import Limits, chat_prompt
from clover.api.schemas import ChatRequest
from clover.server.app import Guard
from tests.server.conftest import API_KEY

MSG = [{"role": "user", "content": "hello"}]
AUTH = {"Authorization": f"Bearer {API_KEY}"}
LIM = Limits(max_prompt_tokens=1000, context=2048, max_block_size=64, block_size=8)


def _post(server, body: dict, path: str = "/v1/chat/completions") -> httpx.Response:
    return httpx.post(server.url + path, json={"model": "clover", "max_tokens": 4, **body}, headers=AUTH, timeout=60)


def _error(r: httpx.Response, param: str) -> str:
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["param"] == param, err
    return err["message"]


def _tool(parameters) -> list[dict]:
    return [{"type": "function", "function": {"name": "book", "description": "Réserver ✈", "parameters": parameters}}]


def test_nullable_fields_sent_as_null(server):
    """Clients that serialise every field send null for what they leave unset (OpenAI's spec allows it)."""
    assert _post(server, {"messages": MSG, "stream": None}).json()["object"] == "chat.completion"
    assert _post(server, {"prompt": "hi", "stream": None, "echo": None}, "/v1/completions").status_code == 200
    r = _post(server, {"messages": MSG, "stream": True, "stream_options": {"include_usage": None}})
    assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]")


def test_a_stop_string_longer_than_16_characters(server, client):
    stop = "###END_OF_ANSWER###"
    r = client.chat.completions.create(model="clover", messages=MSG, stop=stop, max_tokens=4)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert client.completions.create(model="clover", prompt="hi", stop=stop, max_tokens=4).choices
    assert "17 sequences" in _error(_post(server, {"messages": MSG, "stop": [str(i) for i in range(17)]}), "stop")


def test_best_of_is_refused_unless_it_equals_n(server):
    assert "best_of" in _error(_post(server, {"prompt": "hi", "best_of": 2}, "/v1/completions"), "best_of")
    r = _post(server, {"prompt": "hi", "best_of": 2, "n": 2, "max_tokens": 2}, "/v1/completions")
    assert r.status_code == 200 and len(r.json()["choices"]) == 2


def test_content_parts_refusal_and_text_without_text(server, tokenizer):
    turns = [
        *MSG,
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I cannot do that."}]},
        {"role": "user", "content": [{"type": "text", "text": "why?"}]},
    ]
    assert _post(server, {"messages": turns}).status_code == 200
    text = chat_prompt(ChatRequest.model_validate({"model": "clover", "messages": turns}), tokenizer, LIM)[0]
    assert "<|im_start|>assistant\nI cannot do that.<|im_end|>" in text
    user_refusal = [{"role": "user", "content": [{"type": "refusal", "refusal": "x"}]}]
    assert "'refusal'" in _error(_post(server, {"messages": user_refusal}), "messages.0.content")
    for part in ({"type": "text", "text": None}, {"type": "text"}):  # used to render the text "None" / ""
        _error(_post(server, {"messages": [{"role": "user", "content": [part]}]}), "messages.0.content")


def test_tool_schema_keywords_set_to_null_are_dropped(server, tokenizer):
    params = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "enum": None},
            "legs": {"type": "array", "items": {"type": "string"}, "minItems": None, "maxItems": None},
        },
        "required": None,
        "additionalProperties": None,
    }
    r = _post(server, {"messages": MSG, "tools": _tool(params), "tool_choice": "required", "max_tokens": 8})
    assert r.status_code == 200, r.text
    req = ChatRequest.model_validate(
        {"model": "clover", "messages": MSG, "tools": _tool(params), "tool_choice": "auto"}
    )
    g = chat_prompt(req, tokenizer, LIM)[3]  # compiled, not dropped: calls are still held to the schema
    assert g.accepts('<tool_call>{"name": "book", "arguments": {"city": "Oslo", "legs": ["a"]}}</tool_call>')
    assert not g.accepts('<tool_call>{"name": "book", "arguments": {"city": 5}}</tool_call>')


def test_draft3_required_flags_join_the_parent_required_list(tokenizer):
    """Older tool definitions mark a property ``"required": true`` (JSON Schema draft 3)."""
    params = {
        "type": "object",
        "properties": {"city": {"type": "string", "required": True}, "note": {"type": "string", "required": False}},
    }
    req = ChatRequest.model_validate({"model": "clover", "messages": MSG, "tools": _tool(params)})
    g = chat_prompt(req, tokenizer, LIM)[3]
    assert g.accepts('<tool_call>{"name": "book", "arguments": {"city": "Oslo"}}</tool_call>')
    assert not g.accepts('<tool_call>{"name": "book", "arguments": {"note": "x"}}</tool_call>')  # city is required


@pytest.mark.parametrize(
    "bad",
    [
        {"required": 5},
        {"required": [["city"]]},
        {"properties": {"city": {"type": 5}}},
        {"properties": {"city": {"type": [{"x": 1}]}}},
        {"properties": {"legs": {"type": "array", "maxItems": "3"}}},  # crashed mid-decode, past the compiler
        {"properties": {"legs": {"type": "array", "minItems": -1}}},
        {"properties": {"city": {"anyOf": {"type": "string"}}}},
        {"properties": {"city": {"anyOf": [5, {"type": "string"}]}}},
        {"properties": {"city": {"allOf": ["x"]}}},
    ],
)
def test_mistyped_schema_keywords_are_a_400_not_a_500(server, bad):
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, **bad}
    for choice in ("auto", "required"):
        msg = _error(
            _post(server, {"messages": MSG, "tools": _tool(schema), "tool_choice": choice}),
            "tools.0.function.parameters",
        )
        assert "book" in msg and "invalid JSON Schema at #/" in msg
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    assert "invalid JSON Schema" in _error(_post(server, {"messages": MSG, "response_format": fmt}), "response_format")


def test_a_schema_nested_too_deep_is_a_400(server):
    """Was a RecursionError in the compiler: a 500 that also dropped the connection."""
    deep = '{"type": "object", "properties": {"a": ' * 450 + '{"type": "string"}' + "}}" * 450  # too deep to json.dumps
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": "DEEP"}}
    for extra, param in (
        ({"tools": _tool("DEEP"), "tool_choice": "required"}, "tools.0.function.parameters"),
        ({"response_format": fmt}, "response_format"),
    ):
        body = json.dumps({"model": "clover", "max_tokens": 4, "messages": MSG, **extra}).replace('"DEEP"', deep)
        r = httpx.post(
            server.url + "/v1/chat/completions",
            content=body.encode(),
            headers={**AUTH, "Content-Type": "application/json"},
            timeout=60,
        )
        assert "nests more than" in _error(r, param)


def test_error_messages_name_what_the_client_sent(server, client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="clover", messages=MSG, max_completion_tokens=100_000)
    assert e.value.body["param"] == "max_completion_tokens" and "max_completion_tokens" in e.value.body["message"]
    r = _post(server, {"messages": MSG, "functions": [{"name": "f"}], "tools": _tool(None)})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("functions and tools")


def test_a_non_ascii_api_key_matches_its_utf8_header():
    """Headers arrive as bytes (read as latin-1); the key is compared as the UTF-8 bytes a client sends."""
    guard = Guard(None, api_key="clé-✓", max_body_bytes=1000, metrics=None)

    def scope(key: str) -> dict:
        return {"path": "/v1/models", "headers": [(b"authorization", f"Bearer {key}".encode())]}

    assert guard._refuse(scope("clé-✓")) is None
    assert guard._refuse(scope("cle-v")) is not None


def test_an_answer_cut_by_max_tokens_finishes_with_length_even_after_a_complete_call():
    from types import SimpleNamespace

    from clover.api.replies import finish_reason

    call = [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    assert finish_reason(SimpleNamespace(finish_reason="length"), call) == "length"
    assert finish_reason(SimpleNamespace(finish_reason="stop"), call) == "tool_calls"
    assert finish_reason(SimpleNamespace(finish_reason="stop"), call, legacy=True) == "function_call"
    assert finish_reason(SimpleNamespace(finish_reason="stop"), []) == "stop"
