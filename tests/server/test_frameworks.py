"""Requests as agent frameworks send them (LangChain's ``ChatOpenAI``, LlamaIndex's ``OpenAILike``):
each body here is the exact JSON the library put on the wire (captured with an httpx event hook),
posted raw, so the test needs neither library."""

import json

import httpx
import pytest

from tests.server.conftest import ForcedEngine

# LangChain: ChatOpenAI(...).bind_tools([now], tool_choice="now").invoke("what time"), where
# @tool def now() -> str: """Current time.""" (a function without parameters)
LANGCHAIN_NO_ARGS_TOOL = {
    "messages": [{"content": "what time", "role": "user"}],
    "model": "clover",
    "max_completion_tokens": 40,
    "stream": False,
    "tool_choice": {"type": "function", "function": {"name": "now"}},
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "now",
                "description": "Current time.",
                "parameters": {"properties": {}, "type": "object"},
            },
        }
    ],
}
# LlamaIndex: OpenAILike(...).chat_with_tools([FunctionTool.from_defaults(fn=now)], tool_required=True)
LLAMAINDEX_NO_ARGS_TOOL = {
    "messages": [{"role": "user", "content": "what time"}],
    "model": "clover",
    "max_tokens": 40,
    "parallel_tool_calls": False,
    "stream": False,
    "temperature": 0.1,
    "tool_choice": "required",
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "now",
                "description": "now() -> str\nCurrent time.",
                "parameters": {"properties": {}, "type": "object", "additionalProperties": False},
                "strict": False,
            },
        }
    ],
}
EMPTY_CALL = '", "arguments": {}}</tool_call>'  # what follows the prefill <tool_call>{"name": "now


@pytest.fixture(scope="module")
def forced(live, tiny_model, tokenizer):
    engine = ForcedEngine(tiny_model, tokenizer)
    with live(engine) as srv:
        yield engine, httpx.Client(base_url=srv.url, timeout=60)
    engine.force(None)


@pytest.mark.parametrize("body", [LANGCHAIN_NO_ARGS_TOOL, LLAMAINDEX_NO_ARGS_TOOL], ids=["langchain", "llamaindex"])
def test_a_function_without_parameters_is_called_with_no_arguments(forced, body):
    """LangChain declares a function without parameters as ``{"properties": {}, "type": "object"}``
    (no ``additionalProperties``): the prompt shows it as ``now()``, so its call takes ``{}`` only.
    The grammar used to admit any keys there, and the bundled model, named ``now``, wrote
    ``{ "}}' check check ...`` until max_tokens: no tool call for LangChain to parse."""
    engine, http = forced
    engine.force(EMPTY_CALL)
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "now", "arguments": "{}"}
    g = engine.grammars[-1]
    assert g.accepts(EMPTY_CALL) and g.accepts('", "arguments": { }}</tool_call>')
    assert not g.accepts('", "arguments": {"x": 1}}</tool_call>')
    assert not g.accepts('", "arguments": {"}}\' check": "D"}}</tool_call>')


def test_a_function_with_parameters_omitted_takes_no_arguments(forced):
    """OpenAI: "omitting parameters defines a function with an empty parameter list"."""
    engine, http = forced
    engine.force(EMPTY_CALL)
    body = {**LANGCHAIN_NO_ARGS_TOOL, "tools": [{"type": "function", "function": {"name": "now"}}]}
    r = http.post("/v1/chat/completions", json=body)
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert not engine.grammars[-1].accepts('", "arguments": {"x": 1}}</tool_call>')


def test_an_open_object_schema_still_takes_any_arguments(forced):
    """Only an empty ``properties`` map means "no arguments": a bare ``{"type": "object"}`` or
    one that says ``additionalProperties`` stays open, as before."""
    engine, http = forced
    engine.force(EMPTY_CALL)
    for params in ({"type": "object"}, {"type": "object", "properties": {}, "additionalProperties": True}):
        body = {
            **LANGCHAIN_NO_ARGS_TOOL,
            "tools": [{"type": "function", "function": {"name": "now", "parameters": params}}],
        }
        assert http.post("/v1/chat/completions", json=body).status_code == 200
        assert engine.grammars[-1].accepts('", "arguments": {"x": 1}}</tool_call>')


def test_the_bundled_random_model_gives_a_parsable_call_for_a_no_argument_function(server):
    """End to end on the random model, the exact LangChain body: with no keys to write, the call
    closes at once (``{}``), whatever the weights."""
    from tests.server.conftest import API_KEY

    r = httpx.post(
        server.url + "/v1/chat/completions",
        json=LANGCHAIN_NO_ARGS_TOOL,
        timeout=60,
        headers={"Authorization": f"Bearer {API_KEY}"},
    )
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    if choice["finish_reason"] != "length":  # whitespace inside {} could in principle run to max_tokens
        assert choice["finish_reason"] == "tool_calls"
        assert json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"]) == {}
