"""The airspace corpus's chats that offer no tools and its conversations with earlier turns, as a
plain OpenAI request and an agent loop send them."""

import random

import pytest

from clover.airspace import chats
from clover.airspace.calls import answers as answers_of
from clover.airspace.calls import gold_calls, plain_call
from clover.data.chat import render


def _dialogue(ex: dict) -> list[dict]:
    return [m for m in ex["messages"] if m["role"] != "system"]


def test_toolless_chats_offer_no_tools_and_decline_actions():
    """A chat with no ``tools`` (a plain OpenAI request): small talk answered as usual, an action
    declined in words. The draws are deterministic, and every kind's chats declare their tools."""
    exs = chats.generate("validation", 60, mix={"no_tools": 1.0})
    assert exs == chats.generate("validation", 60, mix={"no_tools": 1.0})
    assert exs != chats.generate("test", 60, mix={"no_tools": 1.0})
    declined = 0
    for e in exs:
        assert e["kind"] == "no_tools" and e["tools"] is None
        answer = e["messages"][-1]
        assert answer["role"] == "assistant" and answer["content"] and not answer.get("tool_calls")
        assert "<tools>" not in render(e["messages"][:-1], e["tools"], add_generation_prompt=True)
        declined += answer["content"].endswith("no tool for that is available.")
    assert 15 < declined < 45  # about half are actions, declined; the rest small talk or out of scope
    assert all(
        e["tools"] for e in chats.load_split("test", 300) if e["kind"] not in ("no_tools", "missing_tool", "plain")
    )
    with pytest.raises(ValueError):
        chats.generate("dev", 1, mix={"no_tools": 1.0})


def test_multi_turn_conversations_answer_the_last_turn_with_history_as_context():
    """Earlier exchanges carry ``weight: 0`` and only call tools the conversation offers; the
    answer (what eval scores and training learns) is the last turn's; the sets are fixed."""
    from clover.data import default_model_dir
    from clover.data.tokenizer import CloverTokenizer
    from clover.train.recipes import encode_example

    exs = chats.multiturn_set("validation", 80)
    assert exs == chats.multiturn_set("validation", 80) and exs != chats.multiturn_set("test", 80)
    tok = CloverTokenizer.load(default_model_dir())
    for e in exs:
        msgs = _dialogue(e)
        assert e["kind"] == "multi_turn" and msgs[0]["role"] == "user"
        answers = [m for m in msgs if m["role"] == "assistant" and m.get("weight", 1) != 0]
        assert answers == answers_of(e) and len(answers) == 1 and msgs[-1] is answers[0]
        offered = {t["function"]["name"] for t in e["tools"] or []}
        assert {c["function"]["name"] for m in msgs for c in m.get("tool_calls") or []} <= offered
        if e["final_kind"] in ("tool_call", "compound"):
            assert gold_calls(e) == [plain_call(c) for c in answers[0]["tool_calls"]]
        # training learns the last turn only: its text (and the block's EOS fill), not the history's
        ids, target = encode_example(tok, e, 4096, 32, random.Random(0))
        learnt = tok.decode([t for t, y in zip(ids, target) if y and t != tok.pad_token_id])
        answer = answers[0]["content"] or answers[0]["tool_calls"][0]["function"]["name"]
        assert answer in learnt
        for m in msgs[: msgs.index(answers[0])]:
            if m["role"] == "assistant" and m["content"] and m["content"] not in answer:
                assert m["content"] not in learnt
    assert sum(sum(m["role"] == "user" for m in e["messages"]) >= 2 for e in exs) > 70  # nearly all have history
    assert {e["kind"] for e in chats.load_split("test", 300)} <= set(chats.MIX)  # the split draws none
