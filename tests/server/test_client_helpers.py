"""Structured output and stored Responses through the real client libraries: the openai SDK's
``chat.completions.parse`` / ``responses.parse``, LangChain's ``with_structured_output`` and
``use_previous_response_id``, the OpenAI Agents SDK's ``output_type`` (chat and Responses models)
and ``auto_previous_response_id``.

The server runs a tiny random model: it has no idea what to write, so every answer here is valid
only because the grammar holds it to the schema and ends it within ``max_tokens``
(``clover.engine.grammar.closing``); the tool conversations are scripted (``ScriptedEngine``) so what the
model was shown each turn can be checked."""

import asyncio
import json
from typing import Literal

import jsonschema
import openai
import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, ConfigDict, Field

from tests.server.conftest import API_KEY
from tests.server.test_stored_responses import ScriptedEngine

set_tracing_disabled(True)  # no trace upload to anywhere


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Flat(Strict):  # flat, with an enum
    drone_id: str
    task: Literal["survey", "mapping", "patrol"]
    priority: int


class Leg(Strict):
    at: str
    altitude_m: float


class Nested(Strict):  # nested, with an array of objects
    legs: list[Leg]
    note: str


class Patterned(Strict):  # a string under a pattern
    drone_id: str = Field(pattern=r"^D-[0-9]+$")
    zone: str


SCHEMAS = [Flat, Nested, Patterned]
MAX_TOKENS = 40
PROMPT = "Plan the next flight of drone 17 as JSON."


def _valid(obj: BaseModel, cls: type[BaseModel]) -> None:
    assert isinstance(obj, cls)
    jsonschema.validate(json.loads(obj.model_dump_json()), cls.model_json_schema())


@pytest.fixture()
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


@pytest.fixture()
def aclient(server):
    return openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


@pytest.mark.parametrize("cls", SCHEMAS, ids=lambda c: c.__name__)
def test_chat_completions_parse(client, cls):
    for seed in range(2):
        msgs = [{"role": "user", "content": PROMPT}]
        r = client.chat.completions.parse(
            model="clover", messages=msgs, response_format=cls, max_tokens=MAX_TOKENS, temperature=1.0, seed=seed
        )
        assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens <= MAX_TOKENS
        _valid(r.choices[0].message.parsed, cls)


@pytest.mark.parametrize("cls", SCHEMAS, ids=lambda c: c.__name__)
def test_responses_parse(client, cls):
    r = client.responses.parse(model="clover", input=PROMPT, text_format=cls, max_output_tokens=MAX_TOKENS)
    assert r.status == "completed"
    _valid(r.output_parsed, cls)


@pytest.mark.parametrize("responses_api", [False, True], ids=["chat", "responses"])
@pytest.mark.parametrize("cls", SCHEMAS, ids=lambda c: c.__name__)
def test_langchain_with_structured_output(server, cls, responses_api):
    llm = ChatOpenAI(
        model="clover",
        base_url=server.url + "/v1",
        api_key=API_KEY,
        max_tokens=MAX_TOKENS,
        max_retries=0,
        timeout=120,
        use_responses_api=responses_api,
    )
    _valid(llm.with_structured_output(cls, method="json_schema", strict=True).invoke(PROMPT), cls)


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("cls", SCHEMAS, ids=lambda c: c.__name__)
def test_agents_sdk_output_type(aclient, cls, api):
    model_cls = OpenAIChatCompletionsModel if api == "chat" else OpenAIResponsesModel
    agent = Agent(
        name="planner",
        instructions="Answer in JSON.",
        output_type=cls,
        model=model_cls(model="clover", openai_client=aclient),
        model_settings=ModelSettings(max_tokens=MAX_TOKENS),
    )
    result = asyncio.run(Runner.run(agent, PROMPT))
    _valid(result.final_output, cls)


# -- five tool turns, each continuing the stored response before it ---------------------------------
TURNS = 5


def _call(i: int) -> str:
    args = json.dumps({"drone_id": f"D-{i}"})
    return f'<tool_call>{{"name": "get_drone_status", "arguments": {args}}}</tool_call>'


def _status(drone_id: str) -> str:
    return f"{drone_id} is holding at waypoint {drone_id[2:]}0"


@pytest.fixture()
def scripted(live, tiny_model, tokenizer):
    engine = ScriptedEngine(tiny_model, tokenizer)
    with live(engine, default_max_tokens=64) as srv:
        yield engine, srv
    engine.force(None)


def _check_every_turn_seen(engine, tokenizer) -> None:
    """Request k's prompt holds every call and every tool result before it."""
    prompts = [tokenizer.decode(p) for p in engine.prompts[-(TURNS + 1) :]]
    for k, prompt in enumerate(prompts):
        for i in range(k):
            assert f'"D-{i}"' in prompt and _status(f"D-{i}") in prompt, (k, i, prompt)
        assert _status(f"D-{k}") not in prompt


def test_agents_sdk_auto_previous_response_id_over_five_tool_turns(scripted, tokenizer):
    engine, srv = scripted
    client = openai.AsyncOpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=120)
    bodies = []

    @function_tool
    def get_drone_status(drone_id: str) -> str:
        """The status of one drone."""
        return _status(drone_id)

    engine.script = [_call(i) for i in range(TURNS)] + ["All five drones are holding."]
    agent = Agent(
        name="ops",
        instructions="Check each drone.",
        tools=[get_drone_status],
        model=OpenAIResponsesModel(model="clover", openai_client=client),
    )

    async def record(request):  # what the SDK put on the wire
        bodies.append(json.loads(request.read()))

    client._client.event_hooks["request"].append(record)
    result = asyncio.run(Runner.run(agent, "Check drones 0 to 4.", auto_previous_response_id=True))
    assert result.final_output == "All five drones are holding."
    assert len(bodies) == TURNS + 1
    assert [b.get("previous_response_id") is None for b in bodies] == [True] + [False] * TURNS
    for b in bodies[1:]:  # only the new tool output is sent: the rest is the stored response's
        assert [it["type"] for it in b["input"]] == ["function_call_output"]
    _check_every_turn_seen(engine, tokenizer)


def test_langchain_use_previous_response_id_over_five_tool_turns(scripted, tokenizer):
    engine, srv = scripted

    @tool
    def get_drone_status(drone_id: str) -> str:
        """The status of one drone."""
        return _status(drone_id)

    llm = ChatOpenAI(
        model="clover",
        base_url=srv.url + "/v1",
        api_key="none",
        max_retries=0,
        timeout=120,
        use_responses_api=True,
        use_previous_response_id=True,
    ).bind_tools([get_drone_status])
    engine.script = [_call(i) for i in range(TURNS)] + ["All five drones are holding."]
    messages = [HumanMessage("Check drones 0 to 4.")]
    for _ in range(TURNS + 1):
        ai = llm.invoke(messages)
        messages.append(ai)
        for call in ai.tool_calls:
            messages.append(ToolMessage(get_drone_status.invoke(call["args"]), tool_call_id=call["id"]))
    assert messages[-1].text == "All five drones are holding."
    assert sum(len(m.tool_calls) for m in messages if hasattr(m, "tool_calls")) == TURNS
    _check_every_turn_seen(engine, tokenizer)


def test_max_tokens_below_the_shortest_valid_answer_is_a_400_that_says_so(client):
    with pytest.raises(openai.BadRequestError, match=r"max_tokens 4 is too small .* takes \d+ tokens") as e:
        client.chat.completions.parse(
            model="clover", messages=[{"role": "user", "content": PROMPT}], response_format=Nested, max_tokens=4
        )
    assert e.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError, match=r"max_output_tokens 4 is too small") as e:
        client.responses.parse(model="clover", input=PROMPT, text_format=Nested, max_output_tokens=4)
    assert e.value.body["param"] == "max_output_tokens"
