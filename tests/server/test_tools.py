"""Tool calls: parsed into OpenAI tool_calls (plain and streamed), tool results, tool_choice."""

import json
import re

import openai
import pytest

from clover.airspace.tools import AIRSPACE_TOOLS
from clover.data.chat import IM_END
from tests.server.conftest import ForcedEngine

CALL = '<tool_call>{"name": "recall_drone", "arguments": {"drone_id": "D-17"}}</tool_call>'
MSG = [{"role": "user", "content": "Recall drone 17"}]


@pytest.fixture(scope="module")
def forced(live, tiny_model, tokenizer):
    engine = ForcedEngine(tiny_model, tokenizer)
    with live(engine) as srv:
        yield engine, openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=60)
    engine.force(None)


def test_tool_call_is_parsed(forced):
    engine, client = forced
    engine.force(CALL)
    r = client.chat.completions.create(model="clover", messages=MSG, tools=AIRSPACE_TOOLS)
    (choice,) = r.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call")
    assert call.function.name == "recall_drone" and json.loads(call.function.arguments) == {"drone_id": "D-17"}


def test_streamed_tool_calls(forced):
    engine, client = forced
    second = '<tool_call>{"name": "get_drone_status", "arguments": {"drone_id": "D-4"}}</tool_call>'
    engine.force("Recalling it now.\n" + CALL + "\n" + second)
    full = client.chat.completions.create(model="clover", messages=MSG, tools=AIRSPACE_TOOLS)
    chunks = list(client.chat.completions.create(model="clover", messages=MSG, tools=AIRSPACE_TOOLS, stream=True))
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == full.choices[0].message.content == "Recalling it now."
    deltas = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    assert [d.index for d in deltas] == [0, 1]
    assert [d.function.name for d in deltas] == ["recall_drone", "get_drone_status"]
    assert json.loads(deltas[1].function.arguments) == {"drone_id": "D-4"}
    assert all(d.id and d.type == "function" for d in deltas)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_parallel_tool_calls_false_gives_one_call_and_stops_after_it(forced):
    engine, client = forced
    second = '<tool_call>{"name": "get_drone_status", "arguments": {"drone_id": "D-4"}}</tool_call>'
    engine.force(CALL + "\n" + second)
    kw = dict(model="clover", messages=MSG, tools=AIRSPACE_TOOLS, parallel_tool_calls=False)
    r = client.chat.completions.create(**kw)
    assert [c.function.name for c in r.choices[0].message.tool_calls] == ["recall_drone"]
    assert r.choices[0].finish_reason == "tool_calls"
    assert r.usage.completion_tokens < len(engine.tokenizer.encode(CALL + "\n" + second))  # stopped after the first
    chunks = list(client.chat.completions.create(**kw, stream=True))
    deltas = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    assert [d.function.name for d in deltas] == ["recall_drone"]
    both = client.chat.completions.create(**{**kw, "parallel_tool_calls": True})
    assert len(both.choices[0].message.tool_calls) == 2


SCHEMA = {
    "type": "object",
    "properties": {"drone_id": {"enum": ["D-1", "D-2"]}, "urgent": {"type": "boolean"}, "eta": {"type": "integer"}},
    "required": ["drone_id", "urgent"],
}


def test_response_format_json_object_and_json_schema_constrain_the_answer(forced):
    engine, client = forced
    engine.force(None)  # the random model itself, under the grammar
    fmt = {"type": "json_schema", "json_schema": {"name": "status", "schema": SCHEMA, "strict": True}}
    for seed in range(3):
        r = client.chat.completions.create(
            model="clover", messages=MSG, response_format=fmt, max_tokens=40, temperature=1.0, seed=seed
        )
        c = r.choices[0]
        if c.finish_reason == "stop":  # else cut by max_tokens inside an integer: still a valid prefix
            ans = json.loads(c.message.content)
            assert ans["drone_id"] in ("D-1", "D-2") and isinstance(ans["urgent"], bool)
            assert set(ans) <= {"drone_id", "urgent", "eta"} and isinstance(ans.get("eta", 0), int)
    assert engine.grammars[-1].accepts('{"urgent": false, "drone_id": "D-2"}')
    assert not engine.grammars[-1].accepts('{"drone_id": "D-3", "urgent": true}')
    r = client.chat.completions.create(
        model="clover", messages=MSG, response_format={"type": "json_object"}, max_tokens=12
    )
    assert engine.grammars[-1].accepts('{"any": [1, {"thing": null}]}') and not engine.grammars[-1].accepts("[1]")
    assert r.choices[0].message.content.startswith("{")
    r = client.chat.completions.create(model="clover", messages=MSG, response_format={"type": "text"}, max_tokens=4)
    assert r.choices[0].finish_reason in ("stop", "length") and engine.grammars[-1] is None
    bad = [
        {"type": "xml"},
        {"type": "json_schema"},
        {"type": "json_schema", "json_schema": {"schema": {"type": "weird"}}},
        {"type": "json_schema", "json_schema": {"schema": {"$ref": "https://example.com/s.json"}}},
    ]
    for fmt in bad:
        with pytest.raises(openai.BadRequestError, match="response_format") as e:
            client.chat.completions.create(model="clover", messages=MSG, response_format=fmt)
        assert e.value.body["param"] == "response_format"


def test_tool_result_turn(forced, tokenizer):
    engine, client = forced
    engine.force("Drone D-17 is returning to base.")
    msgs = MSG + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "recall_drone", "arguments": json.dumps({"drone_id": "D-17"})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"status": "returning"})},
    ]
    r = client.chat.completions.create(model="clover", messages=msgs, tools=AIRSPACE_TOOLS)
    assert r.choices[0].message.content == "Drone D-17 is returning to base."
    assert r.choices[0].finish_reason == "stop" and not r.choices[0].message.tool_calls
    prompt = tokenizer.decode(engine.prompts[-1])
    assert CALL in prompt and '<tool_response>{"status": "returning"}</tool_response>' in prompt


def test_tool_choice_none_required_named(forced, tokenizer):
    engine, client = forced
    engine.force(CALL)
    r = client.chat.completions.create(model="clover", messages=MSG, tools=AIRSPACE_TOOLS, tool_choice="none")
    assert "<tools>" not in tokenizer.decode(engine.prompts[-1])
    assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason == "stop"

    engine.force(CALL[len('<tool_call>{"name": "') :])
    r = client.chat.completions.create(model="clover", messages=MSG, tools=AIRSPACE_TOOLS, tool_choice="required")
    assert tokenizer.decode(engine.prompts[-1]).endswith('<|im_start|>assistant\n<tool_call>{"name": "')
    assert r.choices[0].message.tool_calls[0].function.name == "recall_drone"
    # decoded under a grammar: offered names only, arguments valid for that function's schema
    g, rest = engine.grammars[-1], CALL[len('<tool_call>{"name": "') :]
    assert g.accepts(rest) and g.accepts(rest + "\n" + CALL)  # parallel calls allowed by default
    assert not g.accepts(rest.replace("recall_drone", "launch_drone"))
    assert not g.accepts(rest.replace('"drone_id"', '"drone"'))  # not a parameter of recall_drone
    assert not g.accepts('get_drone_status", "arguments": {}}</tool_call>')  # drone_id is required
    client.chat.completions.create(
        model="clover", messages=MSG, tools=AIRSPACE_TOOLS, tool_choice="required", parallel_tool_calls=False
    )
    assert engine.grammars[-1].accepts(rest) and not engine.grammars[-1].accepts(rest + "\n" + CALL)

    # required with a single tool is that tool named
    engine.force('", "arguments": {"drone_id": "D-2"}}</tool_call>')
    r = client.chat.completions.create(model="clover", messages=MSG, tools=AIRSPACE_TOOLS[1:2], tool_choice="required")
    name = AIRSPACE_TOOLS[1]["function"]["name"]
    assert tokenizer.decode(engine.prompts[-1]).endswith(f'<tool_call>{{"name": "{name}')
    assert r.choices[0].message.tool_calls[0].function.name == name

    engine.force('", "arguments": {"drone_id": "D-9"}}</tool_call>')
    choice = {"type": "function", "function": {"name": "get_drone_status"}}
    r = client.chat.completions.create(model="clover", messages=MSG, tools=AIRSPACE_TOOLS, tool_choice=choice)
    assert tokenizer.decode(engine.prompts[-1]).endswith('assistant\n<tool_call>{"name": "get_drone_status')
    (call,) = r.choices[0].message.tool_calls
    assert call.function.name == "get_drone_status" and json.loads(call.function.arguments) == {"drone_id": "D-9"}
    assert engine.grammars[-1].accepts('", "arguments": {"drone_id": "D-9"}}</tool_call>')
    assert not engine.grammars[-1].accepts('", "arguments": {"zone_name": "x"}}</tool_call>')
    assert IM_END not in (r.choices[0].message.content or "")


def test_random_model_with_tools_gives_a_valid_shape(client):
    r = client.chat.completions.create(model="clover", messages=MSG, tools=AIRSPACE_TOOLS, max_tokens=24)
    c = r.choices[0]
    assert c.finish_reason in ("stop", "length", "tool_calls")
    for call in c.message.tool_calls or []:
        json.loads(call.function.arguments)


SWITCH = [
    {
        "type": "function",
        "function": {
            "name": "set_mode",
            "parameters": {
                "type": "object",
                "properties": {"mode": {"enum": ["on", "off"]}, "level": {"type": "integer"}},
                "required": ["mode"],
            },
        },
    },
    {"type": "function", "function": {"name": "get_mode", "parameters": {"type": "object", "properties": {}}}},
]


@pytest.mark.parametrize("stream", [False, True])
def test_required_tool_choice_on_a_random_model_returns_valid_calls(client, stream):
    """A model that knows nothing of these tools, under the grammar: a call of an offered
    function with arguments its schema admits (plain and streamed), whatever the weights."""
    for choice in ("required", {"type": "function", "function": {"name": "set_mode"}}):
        kw = dict(
            model="clover",
            messages=[{"role": "user", "content": "lights on"}],
            tools=SWITCH,
            tool_choice=choice,
            parallel_tool_calls=False,
            max_tokens=60,
        )
        finish, got = _calls(client, "chat", stream, **kw)
        if finish == "length":  # a long integer can run to max_tokens; the shape up to there is still right
            continue
        assert finish == "tool_calls" and len(got) == 1, got
        args = json.loads(got[0]["arguments"])
        if got[0]["name"] == "set_mode":
            assert args["mode"] in ("on", "off") and set(args) <= {"mode", "level"}
        else:
            assert choice == "required" and got[0]["name"] == "get_mode" and args == {}


def test_a_call_to_a_function_not_on_offer_is_neither_a_call_nor_words(forced):
    """The model may name a function the client did not declare (the bundled model knows only
    the airspace tools): that is no tool call, and its markup is no content either (the reply's
    words are those before it: none here), streamed alike."""
    engine, client = forced
    offered = [t for t in AIRSPACE_TOOLS if t["function"]["name"] != "recall_drone"]
    engine.force(CALL)
    r = client.chat.completions.create(model="clover", messages=MSG, tools=offered)
    (choice,) = r.choices
    assert choice.message.tool_calls is None and choice.finish_reason == "stop"
    assert choice.message.content == ""
    chunks = list(client.chat.completions.create(model="clover", messages=MSG, tools=offered, stream=True))
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == choice.message.content
    # offered, the same text is a call
    r = client.chat.completions.create(model="clover", messages=MSG, tools=AIRSPACE_TOOLS)
    assert r.choices[0].message.tool_calls[0].function.name == "recall_drone"


def test_legacy_functions_and_function_call(forced, tokenizer):
    """OpenAI's deprecated function calling, as older clients send it: answered in its own shape."""
    engine, client = forced
    functions = [t["function"] for t in AIRSPACE_TOOLS]
    engine.force(CALL)
    r = client.chat.completions.create(model="clover", messages=MSG, functions=functions)
    c = r.choices[0]
    assert c.finish_reason == "function_call" and not c.message.tool_calls
    assert c.message.function_call.name == "recall_drone"
    assert json.loads(c.message.function_call.arguments) == {"drone_id": "D-17"}
    assert "<tools>" in tokenizer.decode(engine.prompts[-1])
    chunks = list(client.chat.completions.create(model="clover", messages=MSG, functions=functions, stream=True))
    fc = [ch.choices[0].delta.function_call for ch in chunks if ch.choices and ch.choices[0].delta.function_call]
    assert [f.name for f in fc] == ["recall_drone"] and chunks[-1].choices[0].finish_reason == "function_call"
    # function_call named / none; a function result turn in the legacy shape
    engine.force('", "arguments": {"drone_id": "D-3"}}</tool_call>')
    r = client.chat.completions.create(
        model="clover", messages=MSG, functions=functions, function_call={"name": "get_drone_status"}
    )
    assert r.choices[0].message.function_call.name == "get_drone_status"
    assert tokenizer.decode(engine.prompts[-1]).endswith('<tool_call>{"name": "get_drone_status')
    engine.force("It is returning.")
    msgs = MSG + [
        {
            "role": "assistant",
            "content": None,
            "function_call": {"name": "recall_drone", "arguments": '{"drone_id": "D-17"}'},
        },
        {"role": "function", "name": "recall_drone", "content": '{"status": "returning"}'},
    ]
    r = client.chat.completions.create(model="clover", messages=msgs, functions=functions, function_call="none")
    prompt = tokenizer.decode(engine.prompts[-1])
    assert CALL in prompt and '<tool_response>{"status": "returning"}</tool_response>' in prompt
    assert "<tools>" not in prompt and r.choices[0].message.content == "It is returning."
    with pytest.raises(openai.BadRequestError, match="cannot be combined"):
        client.chat.completions.create(model="clover", messages=MSG, functions=functions, tools=AIRSPACE_TOOLS)


def test_vllm_and_sglang_structured_output_extras(forced):
    """What vLLM clients send in ``extra_body`` (``guided_choice`` / ``guided_regex`` /
    ``guided_json``, ``structured_outputs``) and SGLang's (``regex``, ``json_schema`` as text)
    constrain chat and text completions alike."""
    engine, client = forced
    engine.force(None)  # the random model itself, under the grammar
    options = ["positive", "negative", "neutral"]
    for seed in range(3):
        r = client.chat.completions.create(
            model="clover",
            messages=MSG,
            max_tokens=12,
            temperature=1.0,
            seed=seed,
            extra_body={"guided_choice": options},
        )
        assert r.choices[0].message.content in options and r.choices[0].finish_reason == "stop"
        r = client.completions.create(
            model="clover",
            prompt="Sentiment:",
            max_tokens=12,
            temperature=1.0,
            seed=seed,
            extra_body={"structured_outputs": {"choice": options}},
        )
        assert r.choices[0].text in options
    for body in [
        {"guided_regex": r"D-\d{1,3}"},
        {"regex": r"D-\d{1,3}"},
        {"structured_outputs": {"regex": r"D-\d{1,3}"}},
    ]:
        r = client.chat.completions.create(
            model="clover", messages=MSG, max_tokens=12, temperature=1.0, seed=1, extra_body=body
        )
        assert re.fullmatch(r"D-\d{1,3}", r.choices[0].message.content), (body, r.choices[0].message.content)
    schema = {"type": "object", "properties": {"drone_id": {"enum": ["D-1", "D-2"]}}, "required": ["drone_id"]}
    for body in [
        {"guided_json": schema},
        {"guided_json": json.dumps(schema)},
        {"json_schema": json.dumps(schema)},
        {"structured_outputs": {"json": schema}},
        {"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}},
    ]:
        r = client.completions.create(model="clover", prompt="Status:", max_tokens=20, extra_body=body)
        g = engine.grammars[-1]
        assert g.accepts('{"drone_id": "D-2"}') and not g.accepts('{"drone_id": "D-3"}'), body
        if r.choices[0].finish_reason == "stop":
            assert json.loads(r.choices[0].text)["drone_id"] in ("D-1", "D-2")
    client.chat.completions.create(
        model="clover", messages=MSG, max_tokens=4, extra_body={"structured_outputs": {"json_object": True}}
    )
    assert engine.grammars[-1].accepts('{"a": 1}') and not engine.grammars[-1].accepts("[1]")
    client.chat.completions.create(
        model="clover", messages=MSG, max_tokens=4, extra_body={"guided_decoding_backend": "xgrammar"}
    )
    assert engine.grammars[-1] is None  # backend choice and other knobs alone ask for nothing


@pytest.mark.parametrize(
    "body, param",
    [
        ({"guided_choice": ["a"], "guided_regex": "b"}, "guided_regex"),
        ({"guided_json": {}, "response_format": {"type": "json_object"}}, "guided_json"),
        ({"guided_grammar": "root ::= 'a'"}, "guided_grammar"),
        ({"ebnf": "root ::= 'a'"}, "ebnf"),
        ({"structured_outputs": {"grammar": "root ::= 'a'"}}, "structured_outputs.grammar"),
        ({"guided_regex": "("}, "guided_regex"),
        ({"guided_choice": []}, "guided_choice"),
        ({"guided_choice": ["a", ""]}, "guided_choice"),
        ({"guided_json": "{not json"}, "guided_json"),
        ({"guided_json": {"type": "weird"}}, "guided_json"),
        ({"guided_json": [1]}, "guided_json"),
        ({"guided_json": {}, "tool_choice": "required", "tools": AIRSPACE_TOOLS}, "guided_json"),
    ],
)
def test_structured_output_extras_refused_by_name(forced, body, param):
    _, client = forced
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="clover", messages=MSG, max_tokens=4, extra_body=body)
    assert e.value.body["param"] == param, e.value.body
    if not body.get("tools"):
        with pytest.raises(openai.BadRequestError):
            client.completions.create(model="clover", prompt="x", max_tokens=4, extra_body=body)


def test_vllm_sampling_extras(forced, tokenizer):
    """``ignore_eos`` runs to max_tokens, ``min_tokens`` holds stop tokens back, ``stop_token_ids``
    stops, ``repetition_penalty`` / ``min_p`` are taken; bad values are 400s naming the field."""
    engine, client = forced
    engine.force(None)
    r = client.chat.completions.create(model="clover", messages=MSG, max_tokens=12, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 12 and r.choices[0].finish_reason == "length"
    r = client.completions.create(
        model="clover",
        prompt="Recall",
        max_tokens=12,
        temperature=1.0,
        seed=3,
        extra_body={"min_tokens": 10, "repetition_penalty": 1.3, "min_p": 0.05},
    )
    assert r.usage.completion_tokens >= 10
    ids = tokenizer.encode("Recalling drone 17 now")
    engine.force("Recalling drone 17 now", eos=False)
    r = client.completions.create(
        model="clover", prompt="Recall", max_tokens=12, extra_body={"stop_token_ids": [ids[2]]}
    )
    assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens == 2
    engine.force(None)
    for body, param in [
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"min_p": 2}, "min_p"),
        ({"min_tokens": 30}, "min_tokens"),
        ({"stop_token_ids": [10**6]}, "stop_token_ids"),
        ({"ignore_eos": True, "response_format": {"type": "json_object"}}, "ignore_eos"),
    ]:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="clover", messages=MSG, max_tokens=12, extra_body=body)
        assert e.value.body["param"] == param, e.value.body


def test_continue_final_message_prefills_the_answer(forced, tokenizer):
    """vLLM's ``continue_final_message``: the last assistant message stays open and the answer is
    its continuation; the wrong shapes are 400s."""
    engine, client = forced
    engine.force('D-17", "urgent": true}')
    msgs = MSG + [{"role": "assistant", "content": '{"drone_id": "'}]
    r = client.chat.completions.create(
        model="clover", messages=msgs, extra_body={"continue_final_message": True, "add_generation_prompt": False}
    )
    assert r.choices[0].message.content == 'D-17", "urgent": true}'
    prompt = tokenizer.decode(engine.prompts[-1])
    assert prompt.endswith('<|im_start|>assistant\n{"drone_id": "') and prompt.count("<|im_start|>assistant") == 1
    r = client.chat.completions.create(model="clover", messages=msgs)  # by default a new turn starts after it
    assert tokenizer.decode(engine.prompts[-1]).count("<|im_start|>assistant") == 2
    for body, m in [
        ({"continue_final_message": True, "add_generation_prompt": True}, msgs),
        ({"continue_final_message": True}, MSG),
        ({"continue_final_message": True, "tool_choice": "required", "tools": AIRSPACE_TOOLS}, msgs),
    ]:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="clover", messages=m, extra_body=body)
        assert e.value.body["param"] == "continue_final_message"
    engine.force(None)


FIND = [
    {
        "type": "function",
        "function": {
            "name": "find",
            "parameters": {
                "type": "object",
                "properties": {
                    "place": {"type": "string", "x-grounded": True},
                    "radius": {"type": "number", "x-grounded": "user"},
                    "note": {"type": "string"},
                },
                "required": ["place", "radius"],
            },
        },
    }
]
FIND_MSG = [
    {"role": "system", "content": "Zone Delta is closed."},
    {"role": "user", "content": 'Look around "Old Harbour Pier" within 2,500 m, near gate 7'},
]


def _calls(client, api: str, stream: bool, **kw) -> tuple[str | None, list[dict]]:
    """(finish, [{"name", "arguments"}]) through the Chat Completions or the Responses API."""
    if api == "responses":
        r = client.responses.create(
            model="clover",
            input=kw["messages"],
            tools=[
                {"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"]}
                for t in kw["tools"]
            ],
            tool_choice="required",
            max_output_tokens=kw["max_tokens"],
            extra_body=kw.get("extra_body"),
        )
        calls = [{"name": o.name, "arguments": o.arguments} for o in r.output if o.type == "function_call"]
        return ("length" if r.status == "incomplete" else "tool_calls"), calls
    if not stream:
        r = client.chat.completions.create(**kw)
        tcs = r.choices[0].message.tool_calls or []
        return r.choices[0].finish_reason, [{"name": c.function.name, "arguments": c.function.arguments} for c in tcs]
    calls: dict = {}
    finish = None
    for chunk in client.chat.completions.create(stream=True, **kw):
        for c in chunk.choices:
            finish = c.finish_reason or finish
            for d in c.delta.tool_calls or []:
                e = calls.setdefault(d.index, {"name": "", "arguments": ""})
                e["name"] += (d.function.name or "") if d.function else ""
                e["arguments"] += (d.function.arguments or "") if d.function else ""
    return finish, list(calls.values())


@pytest.mark.parametrize("api, stream", [("chat", False), ("chat", True), ("responses", False)])
def test_grounded_arguments_on_a_random_model_are_copied_from_the_user(client, api, stream):
    """A model that knows nothing, under the grammar: every x-grounded argument is a span of the
    user's message (a number one written there), whatever the weights; the others are free."""
    from clover.engine.grammar.grounding import SpanIndex, number_written

    user = FIND_MSG[1]["content"]
    finish, got = _calls(
        client,
        api,
        stream,
        model="clover",
        messages=FIND_MSG,
        tools=FIND,
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=80,
        seed=1,
        temperature=1.0,
    )
    if finish == "length":  # a long free "note" can run to max_tokens
        return
    assert len(got) == 1 and got[0]["name"] == "find", got
    args = json.loads(got[0]["arguments"])
    assert SpanIndex(user).contains(args["place"]) and number_written(args["radius"], user), args


def test_grounding_can_be_turned_off_and_a_bad_keyword_is_a_400(client):
    r = client.chat.completions.create(
        model="clover",
        messages=FIND_MSG,
        tools=FIND,
        tool_choice="required",
        max_tokens=40,
        extra_body={"grounded": False},
    )
    assert r.choices[0].finish_reason in ("tool_calls", "length")
    bad = json.loads(json.dumps(FIND))
    bad[0]["function"]["parameters"]["properties"]["place"]["x-grounded"] = "assistant"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="clover", messages=FIND_MSG, tools=bad, max_tokens=8)
    assert "properties/place/x-grounded" in e.value.body["message"] and e.value.body["param"].startswith("tools.0")


def test_a_grounded_tool_with_nothing_to_copy_leaves_words(client):
    """auto: a tool whose required grounded argument has no possible value (the message holds no
    number) cannot be called; the model answers in words."""
    for seed in range(3):
        r = client.chat.completions.create(
            model="clover",
            messages=[{"role": "user", "content": "hello there"}],
            tools=FIND,
            max_tokens=24,
            seed=seed,
            temperature=1.0,
        )
        assert not r.choices[0].message.tool_calls and r.choices[0].finish_reason in ("stop", "length")


def test_a_required_call_with_nothing_to_copy_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="clover",
            messages=[{"role": "user", "content": "hello there"}],
            tools=FIND,
            tool_choice="required",
            max_tokens=8,
        )
    assert e.value.body["param"] == "tool_choice" and "x-grounded" in e.value.body["message"]
