"""``clover.LLM``: the in-process way in answers as the server does, for the same request."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from clover import LLM, RequestError
from clover.airspace.tools import AIRSPACE_TOOLS
from clover.data.task import model_task
from clover.engine import Engine, SamplingParams

MESSAGES = [{"role": "user", "content": "recall drone 17 and lift the no-fly zone Harbor East"}]
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
REQUESTS = [
    {"messages": MESSAGES, "max_tokens": 24},
    {"messages": MESSAGES, "tools": AIRSPACE_TOOLS, "max_tokens": 40},
    {"messages": MESSAGES, "tools": AIRSPACE_TOOLS, "tool_choice": "required", "max_tokens": 60},
    {
        "messages": MESSAGES,
        "tools": AIRSPACE_TOOLS,
        "max_tokens": 60,
        "parallel_tool_calls": False,
        "tool_choice": {"type": "function", "function": {"name": "recall_drone"}},
    },
    {
        "messages": MESSAGES,
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}},
        "max_tokens": 30,
        "policy": "ar",
    },
    {
        "messages": MESSAGES,
        "n": 2,
        "temperature": 0.9,
        "seed": 3,
        "max_tokens": 16,
        "logprobs": True,
        "top_logprobs": 2,
    },
]


def _comparable(body: dict) -> list:
    """A chat.completion without what differs by design (ids, timestamps, float rounding)."""
    out = []
    for c in body["choices"]:
        m = dict(c["message"])
        m["tool_calls"] = [tc["function"] for tc in m.get("tool_calls") or []]
        lp = [(t["token"], round(t["logprob"], 4)) for t in (c["logprobs"] or {}).get("content") or []]
        out.append((c["index"], m, c["finish_reason"], lp))  # logprobs: equal up to float summation order
    return [out, body["usage"]]


@pytest.fixture(scope="module")
def llm(tiny_model, tokenizer):
    return LLM(Engine(tiny_model, tokenizer))


@pytest.mark.parametrize("i", range(len(REQUESTS)))
def test_chat_answers_as_the_server_does(llm, live, i):
    body = REQUESTS[i]
    with live() as srv:  # its own engine over the same model
        want = httpx.post(srv.url + "/v1/chat/completions", json={"model": "clover", **body}, timeout=120).json()
    got = llm.chat(**body)
    assert got["object"] == "chat.completion" and got["model"] == "clover"
    assert _comparable(got) == _comparable(want)
    if "tool_choice" in body:  # held to a call (random weights: it may run past max_tokens)
        assert got["choices"][0]["finish_reason"] in ("tool_calls", "length")


def test_decide_answers_as_the_server_does(llm, live):
    body = {
        "context": "Drones fly in daylight only. It is 23:00.",
        "questions": [
            {"question": "Is it daylight?", "options": ["yes", "no"]},
            {"question": "May drone 4 fly?", "options": ["yes", "no"]},
            {"question": "Who decides?", "options": ["the pilot", "escalate to supervisor"]},
        ],
    }
    with live() as srv:
        want = httpx.post(srv.url + "/v1/decisions", json=body, timeout=120).json()
    for mode in ("joint", "independent"):
        got = llm.decide(body["context"], body["questions"], mode=mode)
        if mode == "joint":
            assert got["answers"] == want["answers"]
        assert [a["option"] in q["options"] for a, q in zip(got["answers"], body["questions"])] == [True] * 3


def test_generate_takes_text_or_ids_alone_or_batched(llm, tokenizer):
    prompts = ["recall drone 17", "lift zone Alpha", "status of D-9"]
    one = [llm.generate(p, max_tokens=12)[0] for p in prompts]
    batch = llm.generate(prompts, SamplingParams(max_tokens=12))
    ids = llm.generate([tokenizer.encode(p) for p in prompts], max_tokens=12)
    assert [o.token_ids for o in one] == [o.token_ids for o in batch] == [o.token_ids for o in ids]
    assert [o.text for o in batch] == [tokenizer.decode(o.token_ids) for o in batch]
    assert (
        llm.generate(tokenizer.encode("recall"), max_tokens=4)[0].token_ids
        == llm.generate("recall", max_tokens=4)[0].token_ids
    )
    assert llm.generate([]) == []


def test_bad_requests_raise_clear_errors_and_leave_nothing_behind(llm):
    cases = [
        (dict(messages=MESSAGES, block_size=10_000), "block_size"),
        (dict(messages=MESSAGES, max_tokens=10**7), "max_tokens"),
        (dict(messages=MESSAGES, tool_choice="required"), "tool_choice"),
        (dict(messages=MESSAGES, policy="fastest"), "policy"),
        (dict(messages=MESSAGES, temperature=-1), "temperature"),
        (dict(messages=[{"role": "wizard", "content": "hi"}]), "messages.0.role"),
    ]
    for kw, param in cases:
        with pytest.raises(RequestError) as e:
            llm.chat(**kw)
        assert e.value.param == param, (kw, e.value.param, str(e.value))
        assert e.value.body["error"]["message"] == str(e.value)
    with pytest.raises(TypeError, match="did you mean 'max_tokens'"):
        llm.chat(MESSAGES, max_token=5)
    with pytest.raises(TypeError, match="stream"):
        llm.chat([MESSAGES, MESSAGES], stream=True)
    with pytest.raises(RequestError) as e:  # refused at the call, before any chunk
        llm.chat(MESSAGES, stream=True, temperature=-1)
    assert e.value.param == "temperature"
    assert llm.chat(MESSAGES, max_tokens=4, user="u-1", metadata={"a": "b"})["choices"]  # OpenAI extras: ignored
    with pytest.raises(RequestError, match="at most 8") as e:
        llm.decide("ctx", [{"question": "q", "options": ["yes", "no"]}] * 9)
    assert e.value.param == "questions"
    with pytest.raises(ValueError, match="empty"):
        llm.generate(["ok", ""])
    with pytest.raises(ValueError, match="block_size"):
        llm.generate(["ok", "fine"], [SamplingParams(max_tokens=4), SamplingParams(block_size=0)])
    with pytest.raises(TypeError):
        llm.generate("ok", SamplingParams(), max_tokens=3)
    assert not llm.engine.has_unfinished()  # a refused batch left none of its requests running


def test_the_bundled_model_calls_tools_in_process():
    llm = LLM()
    r = llm.chat([{"role": "user", "content": "recall drone 17"}], tools=AIRSPACE_TOOLS)
    (call,) = r["choices"][0]["message"]["tool_calls"]
    assert call["function"] == {"name": "recall_drone", "arguments": '{"drone_id": "D-17"}'}
    assert r["choices"][0]["finish_reason"] == "tool_calls"


def test_the_bundled_model_answers_a_plain_chat_without_tools():
    """What a new OpenAI user sends first (no tools, no system message): a greeting back, and an
    action declined in words, not a call nor garbled text (the corpus has chats without tools)."""
    llm = LLM()
    hello = llm.chat([{"role": "user", "content": "hello"}])["choices"][0]
    assert hello["message"]["content"].startswith("Hello! I can create and lift no-fly zones")
    assert hello["finish_reason"] == "stop" and not hello["message"].get("tool_calls")
    act = llm.chat([{"role": "user", "content": "recall drone 17"}])["choices"][0]
    assert act["message"]["content"] == "Sorry, I can't recall drones: no tool for that is available."


def test_the_bundled_model_answers_the_last_turn_of_a_conversation():
    """An agent loop's second request (history: a call, its result, the summary) and a chat
    client's after small talk: the new turn's call, not the history's; and thanks after a result
    answered in words, not with the history's call again."""
    call = lambda name, args: {
        "id": "call_0",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }
    history = [
        {"role": "user", "content": "recall drone 17"},
        {"role": "assistant", "content": None, "tool_calls": [call("recall_drone", {"drone_id": "D-17"})]},
        {"role": "tool", "tool_call_id": "call_0", "content": '{"drone_id": "D-17", "status": "returning"}'},
        {"role": "assistant", "content": "D-17 is returning to base."},
    ]
    llm = LLM()
    tools = model_task(llm.config, default=True).tools()  # the bundled model's own task's tools
    hello = [{"role": "user", "content": "hello"}]  # then the model's own reply, as a chat client sends it back
    hello.append(llm.chat(hello, tools=tools)["choices"][0]["message"])
    for convo, name, args in (
        (
            history + [{"role": "user", "content": "now check the status of drone 42"}],
            "get_drone_status",
            {"drone_id": "D-42"},
        ),
        (hello + [{"role": "user", "content": "recall drone 17"}], "recall_drone", {"drone_id": "D-17"}),
    ):
        for policy in ("ar", "threshold"):
            msg = llm.chat(convo, tools=tools, policy=policy)["choices"][0]["message"]
            got = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg.get("tool_calls") or []]
            assert got == [(name, args)], (policy, convo[-1], msg)
    thanks = history + [{"role": "user", "content": "thanks"}]
    reply = llm.chat(thanks, tools=tools, policy="ar")["choices"][0]["message"]
    assert "welcome" in (reply["content"] or "").lower() and not reply.get("tool_calls")  # not the recall again


def test_a_list_of_conversations_is_answered_as_a_batch(llm):
    convs = [MESSAGES, [{"role": "user", "content": "status of drone 4"}], MESSAGES]
    kw = {"tools": AIRSPACE_TOOLS, "max_tokens": 24}
    batch = llm.chat(convs, **kw)
    assert len(batch) == 3 and [_comparable(b) for b in batch] == [_comparable(llm.chat(c, **kw)) for c in convs]
    two = llm.chat(convs[:2], n=2, temperature=0.7, seed=5, max_tokens=8)
    assert [len(b["choices"]) for b in two] == [2, 2]
    with pytest.raises(RequestError) as e:  # one bad conversation: nothing runs
        llm.chat([MESSAGES, [{"role": "wizard", "content": "x"}]])
    assert e.value.param == "messages.0.role" and not llm.engine.has_unfinished()


def test_a_missing_model_directory_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such directory"):
        LLM(str(tmp_path / "nope"))
    (tmp_path / "f").write_text("x")
    with pytest.raises(FileNotFoundError, match="a file, not a checkpoint directory"):
        LLM(str(tmp_path / "f"))


def test_vllm_style_imports_and_structured_output_in_process(llm):
    """``from clover import LLM, SamplingParams`` as from vllm; the structured-output and sampling
    extras of the server's bodies work in ``LLM.chat`` too."""
    import clover
    from clover.engine.grammar import regex_grammar

    assert clover.SamplingParams is SamplingParams
    out = llm.generate("Drone id:", clover.SamplingParams(max_tokens=8, grammar=regex_grammar(r"D-\d{1,3}")))[0]
    assert re.fullmatch(r"D-\d{1,3}", out.text), out.text
    r = llm.chat([{"role": "user", "content": "Airborne?"}], guided_choice=["yes", "no"], max_tokens=4)
    assert r["choices"][0]["message"]["content"] in ("yes", "no")
    r = llm.chat([{"role": "user", "content": "Go"}], max_tokens=6, ignore_eos=True)
    assert r["usage"]["completion_tokens"] == 6


def _joined(chunks: list[dict], i: int = 0) -> tuple[str, list, str | None]:
    """A choice's streamed content, tool calls and finish reason, joined from its chunks."""
    text, calls, reason = "", [], None
    for c in chunks:
        for ch in c["choices"]:
            if ch["index"] != i:
                continue
            d = ch.get("delta", {})
            text += d.get("content") or ch.get("text") or ""
            calls += [tc["function"] for tc in d.get("tool_calls") or []]
            reason = ch["finish_reason"] or reason
    return text, calls, reason


@pytest.mark.parametrize("i", [0, 1, 5])
def test_chat_stream_joins_to_the_reply(llm, i):
    """``LLM.chat(stream=True)`` yields the server's chunks; joined, they are the non-streamed reply."""
    body = {**REQUESTS[i], "stream_options": {"include_usage": True}}
    whole = llm.chat(**REQUESTS[i])
    chunks = list(llm.chat(**body, stream=True))
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"]
    for k, choice in enumerate(whole["choices"]):
        m = choice["message"]
        text, calls, reason = _joined(chunks, k)
        assert text == (m["content"] or "") and reason == choice["finish_reason"]
        assert calls == [tc["function"] for tc in m.get("tool_calls") or []]


def test_complete_and_its_stream_match_the_server(llm, live):
    body = {"prompt": "Recall drone", "max_tokens": 12, "n": 2, "seed": 1, "temperature": 0.8, "logprobs": 1}
    with live() as srv:
        want = httpx.post(srv.url + "/v1/completions", json={"model": "clover", **body}, timeout=120).json()
    got = llm.complete(**body)
    assert got["object"] == "text_completion"
    assert [c["text"] for c in got["choices"]] == [c["text"] for c in want["choices"]]
    chunks = list(llm.complete(**body, stream=True))
    assert [_joined(chunks, k)[0] for k in range(2)] == [c["text"] for c in got["choices"]]
