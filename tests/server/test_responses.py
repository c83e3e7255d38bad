"""The Responses API (``POST /v1/responses``) through the official ``openai`` client: a translation
over the chat path, so prompts, tool calls and errors match ``/v1/chat/completions``."""

import json

import httpx
import openai
import pytest

from clover.airspace.tools import AIRSPACE_TOOLS
from tests.server.conftest import ForcedEngine

CALL = '<tool_call>{"name": "recall_drone", "arguments": {"drone_id": "D-17"}}</tool_call>'
TOOLS = [{"type": "function", **t["function"]} for t in AIRSPACE_TOOLS]  # the Responses' flat form
SCHEMA = {
    "type": "object",
    "properties": {"drone_id": {"enum": ["D-1", "D-2"]}, "urgent": {"type": "boolean"}},
    "required": ["drone_id", "urgent"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def forced(live, tiny_model, tokenizer):
    engine = ForcedEngine(tiny_model, tokenizer)
    with live(engine, default_max_tokens=24) as srv:
        yield engine, openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=60)
    engine.force(None)


def test_plain_text_input(forced):
    engine, client = forced
    engine.force("Drone D-17 is on its way home.")
    r = client.responses.create(
        model="clover",
        input="Where is drone 17?",
        store=False,
        metadata={"k": "v"},
        user="u1",
        reasoning={"effort": "low"},
        truncation="disabled",
    )
    assert r.object == "response" and r.id.startswith("resp_") and r.status == "completed"
    assert r.incomplete_details is None and r.error is None
    (item,) = r.output
    assert item.type == "message" and item.role == "assistant" and item.id.startswith("msg_")
    assert r.output_text == "Drone D-17 is on its way home."
    assert r.usage.input_tokens == len(engine.prompts[-1]) and r.usage.output_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.usage.input_tokens_details.cached_tokens == 0 and r.usage.output_tokens_details.reasoning_tokens == 0
    assert r.parallel_tool_calls is True and r.tool_choice == "auto" and r.tools == []


def test_input_list_with_instructions_renders_like_chat(forced, tokenizer):
    engine, client = forced
    engine.force("Ok.")
    r = client.responses.create(
        model="clover",
        instructions="You are a drone controller.",
        input=[
            {"role": "user", "content": "hello"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hi."}]},
            {"role": "user", "content": [{"type": "input_text", "text": "status?"}]},
        ],
    )
    assert r.output_text == "Ok." and r.instructions == "You are a drone controller."
    resp_prompt = engine.prompts[-1]
    client.chat.completions.create(
        model="clover",
        messages=[
            {"role": "system", "content": "You are a drone controller."},
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "Hi."},
            {"role": "user", "content": "status?"},
        ],
    )
    assert resp_prompt == engine.prompts[-1]


def test_function_call_output_item(forced):
    engine, client = forced
    engine.force("Recalling it.\n" + CALL)
    r = client.responses.create(model="clover", input="Recall drone 17", tools=TOOLS)
    assert r.status == "completed"
    msg, call = r.output
    assert msg.type == "message" and r.output_text == "Recalling it."
    assert call.type == "function_call" and call.id.startswith("fc_") and call.call_id.startswith("call_")
    assert call.name == "recall_drone" and json.loads(call.arguments) == {"drone_id": "D-17"}
    assert call.status == "completed" and r.tools[0].name == TOOLS[0]["name"]
    engine.force(CALL[len('<tool_call>{"name": "recall_drone') :])  # prefilled up to the name: only a call
    r = client.responses.create(
        model="clover", input="Recall drone 17", tools=TOOLS, tool_choice={"type": "function", "name": "recall_drone"}
    )
    assert [o.type for o in r.output] == ["function_call"] and r.output_text == ""


def test_function_call_round_trip_renders_like_a_chat_tool_result(forced):
    engine, client = forced
    engine.force("Drone D-17 is returning to base.")
    args, result = json.dumps({"drone_id": "D-17"}), json.dumps({"status": "returning"})
    r = client.responses.create(
        model="clover",
        tools=TOOLS,
        input=[
            {"role": "user", "content": "Recall drone 17"},
            {"type": "function_call", "call_id": "call_1", "name": "recall_drone", "arguments": args},
            {"type": "function_call_output", "call_id": "call_1", "output": result},
        ],
    )
    assert r.output_text == "Drone D-17 is returning to base."
    resp_prompt = engine.prompts[-1]
    client.chat.completions.create(
        model="clover",
        tools=AIRSPACE_TOOLS,
        messages=[
            {"role": "user", "content": "Recall drone 17"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "recall_drone", "arguments": args}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": result},
        ],
    )
    assert resp_prompt == engine.prompts[-1]
    # a call that follows an assistant message joins it
    client.responses.create(
        model="clover",
        tools=TOOLS,
        input=[
            {"role": "user", "content": "Recall drone 17"},
            {"role": "assistant", "content": "On it."},
            {"type": "function_call", "call_id": "call_1", "name": "recall_drone", "arguments": args},
            {"type": "function_call_output", "call_id": "call_1", "output": result},
        ],
    )
    resp_prompt = engine.prompts[-1]
    client.chat.completions.create(
        model="clover",
        tools=AIRSPACE_TOOLS,
        messages=[
            {"role": "user", "content": "Recall drone 17"},
            {
                "role": "assistant",
                "content": "On it.",
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "recall_drone", "arguments": args}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": result},
        ],
    )
    assert resp_prompt == engine.prompts[-1]


def test_json_schema_text_format(forced):
    engine, client = forced
    engine.force('{"drone_id": "D-2", "urgent": true}')
    fmt = {"format": {"type": "json_schema", "name": "status", "schema": SCHEMA, "strict": True}}
    r = client.responses.create(model="clover", input="status", text=fmt)
    assert json.loads(r.output_text) == {"drone_id": "D-2", "urgent": True}
    g = engine.grammars[-1]
    assert g.accepts('{"urgent": false, "drone_id": "D-1"}') and not g.accepts('{"drone_id": "D-3", "urgent": true}')
    client.responses.create(model="clover", input="status", text={"format": {"type": "json_object"}})
    assert engine.grammars[-1].accepts('{"a": 1}') and not engine.grammars[-1].accepts("[1]")


def test_max_output_tokens_gives_incomplete(forced):
    engine, client = forced
    engine.force(None)  # the random model, cut after 3 tokens
    r = client.responses.create(model="clover", input="tell me a story", max_output_tokens=3, temperature=0.0)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3 and r.max_output_tokens == 3 and r.output[0].status == "incomplete"
    events = list(client.responses.create(model="clover", input="tell me a story", max_output_tokens=3, stream=True))
    assert (
        events[-1].type == "response.incomplete"
        and events[-1].response.incomplete_details.reason == "max_output_tokens"
    )
    assert events[-1].response.output_text == r.output_text


def test_streaming_text(forced):
    engine, client = forced
    engine.force("Drone D-17 is on its way home, ETA four minutes.")
    events = list(client.responses.create(model="clover", input="Where is drone 17?", stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    for k in (
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ):
        assert kinds.count(k) == 1, k
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert text == final.output_text == "Drone D-17 is on its way home, ETA four minutes."
    assert next(e for e in events if e.type == "response.output_text.done").text == text
    assert final.usage.output_tokens > 0 and final.status == "completed"
    # the SDK's own accumulating helper agrees
    with client.responses.stream(model="clover", input="Where is drone 17?") as s:
        assert s.get_final_response().output_text == text


def test_streaming_a_call(forced):
    engine, client = forced
    second = '<tool_call>{"name": "get_drone_status", "arguments": {"drone_id": "D-4"}}</tool_call>'
    engine.force("Recalling it.\n" + CALL + "\n" + second)
    full = client.responses.create(model="clover", input="Recall 17, check 4", tools=TOOLS)
    events = list(client.responses.create(model="clover", input="Recall 17, check 4", tools=TOOLS, stream=True))
    final = events[-1].response
    assert events[-1].type == "response.completed"
    assert [o.type for o in final.output] == [o.type for o in full.output] == ["message", *["function_call"] * 2]
    args = {}
    for e in events:
        if e.type == "response.function_call_arguments.delta":
            args[e.output_index] = args.get(e.output_index, "") + e.delta
    done = {e.output_index: e.arguments for e in events if e.type == "response.function_call_arguments.done"}
    assert args == done == {i: final.output[i].arguments for i in (1, 2)}
    assert json.loads(args[2]) == {"drone_id": "D-4"} and final.output[2].name == "get_drone_status"
    added = [e.item for e in events if e.type == "response.output_item.added"]
    assert [i.id for i in added] == [o.id for o in final.output]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == final.output_text == full.output_text == "Recalling it."


def test_errors_in_the_openai_shape(forced):
    _, client = forced
    cases = [
        (dict(input="hi", conversation="conv_123"), "conversation"),
        (dict(input="hi", tools=[{"type": "web_search"}]), "tools.0.type"),
        (dict(input="hi", temperature=3.5), "temperature"),
        (dict(input="hi", max_output_tokens=10**6), "max_output_tokens"),
        (
            dict(input="hi", text={"format": {"type": "json_schema", "name": "x", "schema": {"type": "weird"}}}),
            "text.format",
        ),
        (
            dict(input=[{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]),
            "input.0.content.0.type",
        ),
        (dict(input="hi", tool_choice={"type": "function", "name": "nope"}, tools=TOOLS), "tool_choice"),
    ]
    for kw, param in cases:
        with pytest.raises(openai.BadRequestError) as e:
            client.responses.create(model="clover", **kw)
        assert e.value.status_code == 400 and e.value.body["param"] == param, (kw, e.value.body)
        assert e.value.body["type"] == "invalid_request_error" and e.value.body["message"]
        assert "max_tokens" not in e.value.body["message"]
    with pytest.raises(openai.NotFoundError, match="no response with id 'resp_123' is stored"):
        client.responses.create(model="clover", input="hi", previous_response_id="resp_123")
    with pytest.raises(openai.BadRequestError, match="function tools only"):
        client.responses.create(model="clover", input="hi", tools=[{"type": "web_search"}])
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="gpt-4o", input="hi")


# -- bodies the OpenAI Agents SDK (openai-agents 0.24, openai 3.60) sent, captured from its http client --
def _post(client, body: dict) -> httpx.Response:
    return httpx.post(f"{client.base_url}responses", json=body, timeout=60)


def _sse_events(r: httpx.Response) -> list[dict]:
    return [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]


# ``ModelSettings(top_logprobs=2, max_tokens=32)``: the SDK adds the include entry itself
LOGPROBS_BODY = {
    "model": "clover",
    "include": ["message.output_text.logprobs"],
    "input": [{"content": "Where is drone 17?", "role": "user"}],
    "instructions": "Airspace.",
    "max_output_tokens": 32,
    "tools": [],
    "top_logprobs": 2,
}


def test_agents_sdk_top_logprobs_are_returned(forced, tokenizer):
    engine, client = forced
    engine.force("Drone D-17 is home.")
    r = _post(client, LOGPROBS_BODY)
    assert r.status_code == 200, r.text
    (part,) = r.json()["output"][0]["content"]
    assert engine.prompts and part["text"] == "Drone D-17 is home."
    assert "".join(e["token"] for e in part["logprobs"]) == part["text"]
    for e in part["logprobs"]:
        assert e["logprob"] <= 0 and e["bytes"] == list(e["token"].encode()) and 1 <= len(e["top_logprobs"]) <= 2
    # asked for nothing: none
    plain = _post(client, {**LOGPROBS_BODY, "include": [], "top_logprobs": None}).json()
    assert plain["output"][0]["content"][0]["logprobs"] == []
    # text then a call: the message carries its own tokens' logprobs only
    engine.force("Ok.\n" + CALL)
    out = _post(client, {**LOGPROBS_BODY, "tools": TOOLS}).json()["output"]
    assert [o["type"] for o in out] == ["message", "function_call"]
    assert "".join(e["token"] for e in out[0]["content"][0]["logprobs"]) == "Ok."


def test_agents_sdk_top_logprobs_streamed(forced):
    engine, client = forced
    engine.force("Drone D-17 is home.")
    events = _sse_events(_post(client, {**LOGPROBS_BODY, "stream": True}))
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    streamed = [lp for e in deltas for lp in e["logprobs"]]
    assert "".join(lp["token"] for lp in streamed) == "".join(e["delta"] for e in deltas) == "Drone D-17 is home."
    done = next(e for e in events if e["type"] == "response.output_text.done")
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.completed"
    assert done["logprobs"] == streamed == final["output"][0]["content"][0]["logprobs"]
    # text then a call: the message's logprobs stop at its text, as non-streamed
    engine.force("Recalling it now.\n" + CALL)
    events = _sse_events(_post(client, {**LOGPROBS_BODY, "stream": True, "tools": TOOLS}))
    final = events[-1]["response"]
    assert [o["type"] for o in final["output"]] == ["message", "function_call"]
    lps = final["output"][0]["content"][0]["logprobs"]
    assert "".join(e["token"] for e in lps) == final["output"][0]["content"][0]["text"] == "Recalling it now."
    assert lps == [lp for e in events if e["type"] == "response.output_text.delta" for lp in e["logprobs"]]
    assert lps == _post(client, {**LOGPROBS_BODY, "tools": TOOLS}).json()["output"][0]["content"][0]["logprobs"]


def test_agents_sdk_stored_prompt_is_refused_not_ignored(forced):
    # ``Agent(prompt={"id": ..., "version": ..., "variables": ...})``: a template kept on OpenAI's side
    _, client = forced
    body = {
        "model": "clover",
        "include": [],
        "input": [{"content": "hi", "role": "user"}],
        "prompt": {"id": "pmpt_123", "version": "2", "variables": {"city": "Oslo"}},
    }
    r = _post(client, body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "prompt" and err["code"] == "unsupported_parameter" and "prompt" in err["message"]


def test_chat_style_nested_tools_are_read_too(live):
    """Clients moving from chat completions often keep chat's nested tool and tool_choice forms."""
    flat = {
        "type": "function",
        "name": "recall_drone",
        "parameters": {"type": "object", "properties": {"drone_id": {"type": "string"}}, "required": ["drone_id"]},
    }
    nested = {"type": "function", "function": {k: v for k, v in flat.items() if k != "type"}}
    with live() as srv:
        bodies = [
            {"model": "clover", "input": "recall drone 17", "max_output_tokens": 24, "tools": [t], "tool_choice": c}
            for t, c in (
                (flat, {"type": "function", "name": "recall_drone"}),
                (nested, {"type": "function", "function": {"name": "recall_drone"}}),
            )
        ]
        got = [httpx.post(srv.url + "/v1/responses", json=b, timeout=60).json() for b in bodies]
    assert got[0]["output"] and [o.get("name") for o in got[0]["output"]] == [o.get("name") for o in got[1]["output"]]
    assert [o.get("arguments") for o in got[0]["output"]] == [o.get("arguments") for o in got[1]["output"]]
