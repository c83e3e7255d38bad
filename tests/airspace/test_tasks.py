"""Operator tasks of the test split: the gold calls succeed in the task's world, and an agent that
makes them (in any order that does not touch one thing twice) succeeds by the world's state."""

from __future__ import annotations

import pytest

from clover.airspace.loop import ModelReply, run_agent
from clover.airspace.tasks import TASK_KINDS, operator_tasks, task_from_example, task_success
from clover.airspace.world import READ_ONLY, execute

from .fakes import ScriptedModel, calls_reply


@pytest.fixture(scope="module")
def tasks():
    return operator_tasks(120)


def test_tasks_cover_the_kinds_and_are_reproducible(tasks):
    assert len(tasks) == 120 and {t.kind for t in tasks} == set(TASK_KINDS)
    assert any(len(t.gold) > 1 for t in tasks) and any(t.gold[0]["name"] == "get_drone_status" for t in tasks)
    again = operator_tasks(5)
    assert [t.world for t in again] == [t.world for t in tasks[:5]]


def test_gold_calls_give_the_gold_world(tasks):
    for t in tasks:
        assert t.gold_errors == [], (t.messages[-1]["content"], t.gold_errors)
        w = t.world.copy()
        for c in t.gold:
            assert "error" not in execute(w, c["name"], c["arguments"])
        assert w == t.gold_world
        if any(c["name"] not in READ_ONLY for c in t.gold):
            assert t.gold_world != t.world  # every action changes the world


def test_an_agent_making_the_gold_calls_succeeds(tasks):
    for t in tasks:
        model = ScriptedModel(calls_reply(t.gold), ModelReply("Done.", [], 1))
        r = run_agent(model, t.messages, t.world, t.tools)
        assert r.stopped == "reply" and task_success(t, r), t.messages[-1]["content"]


def test_the_order_of_independent_calls_does_not_matter(tasks):
    for t in tasks:
        targets = [c["arguments"].get("drone_id") or c["arguments"].get("zone_name") for c in t.gold]
        if len(t.gold) > 1 and len(set(targets)) == len(targets):
            r = run_agent(
                ScriptedModel(calls_reply(t.gold[::-1]), ModelReply("ok", [], 1)), t.messages, t.world, t.tools
            )
            assert task_success(t, r)


def test_wrong_or_missing_calls_fail(tasks):
    for t in tasks[:40]:
        r = run_agent(ScriptedModel(ModelReply("Done.", [], 1)), t.messages, t.world, t.tools)
        assert not task_success(t, r)  # nothing done: no action, no status read
        if len(t.gold) > 1:
            r = run_agent(
                ScriptedModel(calls_reply(t.gold[:-1]), ModelReply("ok", [], 1)), t.messages, t.world, t.tools
            )
            assert not task_success(t, r)


def test_a_chat_answered_in_words_is_no_task():
    ex = {
        "kind": "no_tool",
        "tools": None,
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"}],
    }
    with pytest.raises(ValueError, match="not an operator task"):
        task_from_example(ex)


def test_zone_tasks_each_ask_for_one_no_fly_zone():
    from clover.airspace.tasks import zone_tasks

    tasks = zone_tasks(20)
    assert len(tasks) == 20 and len({t.messages[-1]["content"] for t in tasks}) == 20
    assert all([c["name"] for c in t.gold] == ["create_no_fly_zone"] for t in tasks)
    assert all(t.gold_world != t.world and not t.gold_errors for t in tasks)  # each gold call adds its zone


def test_the_second_task_s_tasks_run_in_the_same_world_and_the_loop_offers_a_model_its_own_tools():
    from clover.airspace.loop import default_tools
    from clover.airspace.task import TASK
    from clover.airspace.tasks import zone_tasks

    tasks = operator_tasks(60, load=TASK.eval_split) + zone_tasks(10, load=TASK.eval_split)
    assert not any(t.gold_errors for t in tasks)
    assert all(t.gold_world != t.world for t in tasks if any(c["name"] not in READ_ONLY for c in t.gold))
    assert any("radius_unit" in c["arguments"] for t in tasks for c in t.gold)  # the extraction form
    for t in tasks[:20]:
        r = run_agent(ScriptedModel(calls_reply(t.gold), ModelReply("Done.", [], 1)), t.messages, t.world, t.tools)
        assert task_success(t, r)
    seen = []

    class Recording(ScriptedModel):
        def chat(self, messages, tools):
            seen.append(tools)
            return super().chat(messages, tools)

    own = Recording(ModelReply("ok", [], 1))
    own.tools = TASK.tools()  # a model side that says which tools it was trained with
    run_agent(own, tasks[0].messages, tasks[0].world)
    run_agent(Recording(ModelReply("ok", [], 1)), tasks[0].messages, tasks[0].world)  # no tools of its own
    assert seen == [TASK.tools(), default_tools()]
