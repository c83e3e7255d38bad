"""The agent loop with a scripted model: tool calls run against the world, results go back as
tool messages, and the loop ends on a reply in words or at its step limit."""

from __future__ import annotations

import json

import pytest

from clover.airspace.loop import MAX_STEPS, ModelReply, run_agent
from clover.airspace.tools import AIRSPACE_TOOLS, tool_by_name
from clover.airspace.world import World

from .fakes import ScriptedModel, calls_reply

USER = [{"role": "user", "content": "recall drone 5"}]


@pytest.fixture()
def world() -> World:
    return World.for_task([{"name": "recall_drone", "arguments": {"drone_id": "D-5"}}], seed=2)


def test_calls_run_then_the_reply_ends_the_task(world):
    model = ScriptedModel(
        calls_reply([{"name": "recall_drone", "arguments": {"drone_id": "D-5"}}], passes=7),
        ModelReply("D-5 is returning to base.", [], 4),
    )
    r = run_agent(model, USER, world)
    assert (r.stopped, r.steps, r.reply, r.forward_passes) == ("reply", 2, "D-5 is returning to base.", 11)
    assert r.world.drones["D-5"].status == "returning to base"
    assert world.drones["D-5"].status != "returning to base"  # the caller's world is not touched
    roles = [m["role"] for m in r.messages]
    assert roles == ["user", "assistant", "tool", "assistant"]
    tool = r.messages[2]
    assert tool["tool_call_id"] == r.messages[1]["tool_calls"][0]["id"]
    assert json.loads(tool["content"])["status"] == "returning"
    assert model.requests[1] == r.messages[:3]  # the second step sees the result
    assert [c.name for c in r.calls] == ["recall_drone"] and r.calls[0].changes and r.wall_s > 0


def test_the_loop_stops_at_its_step_limit(world):
    model = ScriptedModel(calls_reply([{"name": "get_drone_status", "arguments": {"drone_id": "D-5"}}]))
    r = run_agent(model, USER, world)
    assert (r.stopped, r.steps, r.reply) == ("step_limit", MAX_STEPS, None) and MAX_STEPS == 4
    assert len(model.requests) == 4 and len(r.calls) == 4 and r.forward_passes == 12
    assert [m["role"] for m in r.messages].count("tool") == 4
    r = run_agent(
        ScriptedModel(calls_reply([{"name": "recall_drone", "arguments": {"drone_id": "D-5"}}])),
        USER,
        world,
        max_steps=2,
    )
    assert (r.stopped, r.steps, len(r.calls)) == ("step_limit", 2, 2)
    with pytest.raises(ValueError, match="max_steps"):
        run_agent(model, USER, world, max_steps=0)


def test_a_reply_in_words_at_once_is_one_step(world):
    r = run_agent(ScriptedModel(ModelReply("Which drone?", [], None)), USER, world)
    assert (r.stopped, r.steps, r.reply, r.forward_passes, r.calls) == ("reply", 1, "Which drone?", None, [])
    assert r.world == world


def test_bad_calls_reach_the_model_as_errors(world):
    model = ScriptedModel(
        calls_reply(
            [
                {"name": "recall_drone", "arguments": {"drone_id": "D-77777"}},
                {
                    "name": "update_waypoint",
                    "arguments": {"drone_id": "D-5", "waypoint_index": 999, "lat": 1.0, "lon": 1.0},
                },
                {"name": "lift_no_fly_zone", "arguments": {"zone_name": "Nowhere"}},
            ]
        ),
        ModelReply("I could not do that.", [], 1),
    )
    tools = [t for t in AIRSPACE_TOOLS if t["function"]["name"] != "lift_no_fly_zone"]
    r = run_agent(model, USER, world, tools)
    errors = [json.loads(m["content"])["error"] for m in r.messages if m["role"] == "tool"]
    assert errors[0] == "unknown drone D-77777" and "out of range" in errors[1] and "not offered" in errors[2]
    assert r.world == world and all(not c.ok and c.changes == [] for c in r.calls)
    assert tool_by_name("lift_no_fly_zone")  # refused because this chat did not offer it
