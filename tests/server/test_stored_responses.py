"""Stored Responses (``store``, ``previous_response_id``, GET / DELETE, ``/input_items``) through the
official ``openai`` client, and the bounded store itself (``clover.api.store``)."""

import json

import httpx
import openai
import pytest

from clover.api.errors import APIError
from clover.api.store import ResponseStore
from tests.server.conftest import ForcedEngine
from tests.server.test_responses import CALL, TOOLS


class ScriptedEngine(ForcedEngine):
    """Each request generates the next text of ``script`` (then EOS)."""

    script: list[str] = []

    def add_request(self, prompt_ids, params=None, request_id=None):
        if self.script:
            self.force(self.script.pop(0))
        return super().add_request(prompt_ids, params, request_id)


@pytest.fixture(scope="module")
def scripted(live, tiny_model, tokenizer):
    engine = ScriptedEngine(tiny_model, tokenizer)
    with live(engine, default_max_tokens=24) as srv:
        yield engine, openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=60), srv
    engine.force(None)


def test_a_response_is_stored_by_default_and_read_back(scripted):
    engine, client, _ = scripted
    engine.script = ["Drone D-17 is home."]
    r = client.responses.create(model="clover", input="Where is drone 17?", metadata={"k": "v"})
    assert r.store is True and r.previous_response_id is None
    got = client.responses.retrieve(r.id)
    assert got.model_dump() == r.model_dump()
    items = client.responses.input_items.list(r.id)
    (item,) = items.data
    assert item.type == "message" and item.role == "user" and item.content[0].text == "Where is drone 17?"
    engine.script = ["Not kept."]
    r2 = client.responses.create(model="clover", input="hi", store=False)
    assert r2.store is False
    with pytest.raises(openai.NotFoundError, match="no response with id"):
        client.responses.retrieve(r2.id)


def test_previous_response_id_carries_the_conversation_with_tool_calls(scripted, tokenizer):
    """Turn 2 names turn 1: the model reads turn 1's input, its call and the call's output, exactly
    as a chat request with the whole conversation renders it."""
    engine, client, _ = scripted
    engine.script = ["Recalling it.\n" + CALL, "Drone D-17 is returning."]
    r1 = client.responses.create(model="clover", input="Recall drone 17", tools=TOOLS, instructions="Be brief.")
    call = next(o for o in r1.output if o.type == "function_call")
    out = json.dumps({"status": "returning"})
    result = {"type": "function_call_output", "call_id": call.call_id, "output": out}
    r2 = client.responses.create(
        model="clover", previous_response_id=r1.id, tools=TOOLS, instructions="Be brief.", input=[result]
    )
    assert r2.previous_response_id == r1.id and r2.output_text == "Drone D-17 is returning."
    seen = engine.prompts[-1]
    client.chat.completions.create(
        model="clover",
        tools=[{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}} for t in TOOLS],
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Recall drone 17"},
            {
                "role": "assistant",
                "content": "Recalling it.",
                "tool_calls": [
                    {
                        "id": call.call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call.call_id, "content": out},
        ],
    )
    assert seen == engine.prompts[-1]
    # the whole conversation is listed, newest first by default
    items = client.responses.input_items.list(r2.id).data
    assert [i.type for i in items] == ["function_call_output", "function_call", "message", "message"]
    asc = client.responses.input_items.list(r2.id, order="asc", limit=2)
    assert [i.type for i in asc.data] == ["message", "message"] and asc.has_more
    rest = client.responses.input_items.list(r2.id, order="asc", after=asc.data[-1].id)
    assert [i.type for i in rest.data] == ["function_call", "function_call_output"] and not rest.has_more


def test_a_streamed_response_is_stored_too(scripted):
    engine, client, _ = scripted
    engine.script = ["Streamed and kept."]
    with client.responses.stream(model="clover", input="hi") as stream:
        final = stream.get_final_response()
    assert client.responses.retrieve(final.id).output_text == "Streamed and kept."


def test_delete_then_a_clear_404(scripted):
    engine, client, srv = scripted
    engine.script = ["Short lived."]
    r = client.responses.create(model="clover", input="hi")
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError, match="no longer stored: it was deleted"):
        client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError, match="it was deleted"):
        client.responses.create(model="clover", input="again", previous_response_id=r.id)
    gone = httpx.delete(f"{srv.url}/v1/responses/{r.id}", timeout=30)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "response_not_found"


def test_an_evicted_response_is_a_404_that_says_so(live, tiny_model, tokenizer):
    engine = ScriptedEngine(tiny_model, tokenizer)
    with live(engine, responses_max=2) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=60)
        engine.script = ["one", "two", "three"]
        ids = [client.responses.create(model="clover", input=t).id for t in ("a", "b", "c")]
        with pytest.raises(openai.NotFoundError, match="evicted .least recently used, the store holds at most 2"):
            client.responses.retrieve(ids[0])
        assert [client.responses.retrieve(i).id for i in ids[1:]] == ids[1:]


def test_stored_responses_survive_a_restart_with_a_database(live, tiny_model, tokenizer, tmp_path):
    db = tmp_path / "responses.sqlite"
    engine = ScriptedEngine(tiny_model, tokenizer)
    with live(engine, responses_db=db) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=60)
        engine.script = ["Before the restart."]
        first = client.responses.create(model="clover", input="remember me")
    with live(engine, responses_db=db) as srv:  # a new server process state, the same file
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=60)
        assert client.responses.retrieve(first.id).output_text == "Before the restart."
        engine.script = ["After it."]
        r = client.responses.create(model="clover", input="and now?", previous_response_id=first.id)
        assert tokenizer.decode(engine.prompts[-1]).count("Before the restart.") == 1
        assert [i.type for i in client.responses.input_items.list(r.id).data] == ["message"] * 3


def test_a_response_is_visible_to_its_own_api_key_only(live, tiny_model, tokenizer):
    engine = ScriptedEngine(tiny_model, tokenizer)
    with live(engine, api_key=["key-a", "key-b"]) as srv:
        a, b = (
            openai.OpenAI(base_url=srv.url + "/v1", api_key=k, max_retries=0, timeout=60) for k in ("key-a", "key-b")
        )
        engine.script = ["For a."]
        r = a.responses.create(model="clover", input="hi")
        assert a.responses.retrieve(r.id).id == r.id
        with pytest.raises(openai.NotFoundError, match="no response with id"):
            b.responses.retrieve(r.id)
        with pytest.raises(openai.NotFoundError):
            b.responses.create(model="clover", input="hi", previous_response_id=r.id)
        with pytest.raises(openai.NotFoundError):
            b.responses.delete(r.id)
        assert a.responses.retrieve(r.id).output_text == "For a."


# -- the store alone ----------------------------------------------------------------------------
class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def _body(rid: str, text: str = "x") -> dict:
    return {"id": rid, "object": "response", "output": [{"type": "message", "content": [{"text": text}]}]}


@pytest.mark.parametrize("path", [None, "db"])
def test_store_bounds_entries_bytes_and_time(tmp_path, path):
    clock = Clock()
    store = ResponseStore(
        str(tmp_path / "r.sqlite") if path else None, max_entries=3, max_mb=2048 / 2**20, ttl_s=60, clock=clock
    )
    for i in range(3):
        clock.t += 1
        store.put(f"r{i}", _body(f"r{i}"), [], owner=None)
    clock.t += 1
    store.get("r0", None)  # used: r1 is now the least recently used
    store.put("r3", _body("r3"), [], owner=None)
    assert len(store) == 3
    with pytest.raises(APIError, match="evicted .least recently used, the store holds at most 3 responses"):
        store.get("r1", None)
    store.put("big", _body("big", "y" * 1200), [], owner=None)  # over the byte bound with the others
    assert store.get("big", None).body["id"] == "big" and len(store) < 4
    with pytest.raises(APIError, match=f"more than the store's {2048}"):
        store.put("huge", _body("huge", "z" * 4096), [], owner=None)
        store.get("huge", None)
    clock.t += 61
    with pytest.raises(APIError, match="expired .60 s after it was created"):
        store.get("big", None)
    assert len(store) == 0
    with pytest.raises(APIError) as e:
        store.get("nothing", None)
    assert e.value.status == 404 and e.value.code == "response_not_found"


def test_store_owners_do_not_see_each_other():
    store = ResponseStore()
    store.put("r", _body("r"), [{"id": "msg_1"}], owner="a")
    assert store.get("r", "a").input == [{"id": "msg_1"}]
    for who in ("b", None):
        with pytest.raises(APIError, match="no response with id"):
            store.get("r", who)
    store.delete("r", "a")
    with pytest.raises(APIError, match="no response with id"):  # nor that it was deleted
        store.get("r", "b")
