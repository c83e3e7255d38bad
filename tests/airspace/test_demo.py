"""The zone demo (clover/airspace/demo.py), one implementation for ``clover bench agent --demo``
and the playground's button: driven here by a model side that answers each message with its gold
call, so every zone is right and the events can be checked one by one."""

import json
from types import SimpleNamespace

import pytest

from clover.airspace.demo import POLICIES, DemoStopped, zone_demo
from clover.airspace.tasks import zone_tasks
from clover.airspace.world import execute
from clover.data.task import DEFAULT_TASK, get_task
from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD

LOAD = get_task(DEFAULT_TASK).eval_split


def gold_model(tasks):
    """``complete``: the message's gold calls, then a reply in words once their results are in."""
    gold = {t.messages[-1]["content"]: t.gold for t in tasks}
    requests = []

    def complete(messages, tools=None, **request):
        requests.append(request)
        assert tools  # the task's tools are offered
        if messages[-1]["role"] == "tool":
            return {
                "choices": [{"message": {"role": "assistant", "content": "Done."}}],
                "clover": {"forward_passes": 2},
            }
        calls = [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
            }
            for i, c in enumerate(gold[messages[-1]["content"]])
        ]
        message = {"role": "assistant", "content": None, "tool_calls": calls}
        return {"choices": [{"message": message}], "clover": {"forward_passes": 5}}

    return complete, requests


def test_the_demo_runs_each_message_under_the_default_then_ar_and_tells_each_zone_as_it_lands():
    tasks = zone_tasks(3, load=LOAD)
    complete, requests = gold_model(tasks)
    events = []
    out = zone_demo(complete, 3, load=LOAD, on_event=events.append)
    assert POLICIES == ("default", "ar")
    # each message: its calls (one model call), then the reply (another): the default's fields, then ar's
    assert len(requests) == 12
    common = {"max_tokens": 320, "temperature": 0, "grounded_reply": True}  # the loop's grounded replies
    default = {"policy": DEFAULT_POLICY, "threshold": DEFAULT_THRESHOLD, **common}
    assert requests[:6] == [default] * 6 and requests[6:] == [{"policy": "ar", **common}] * 6
    kinds = [e["type"] for e in events]
    per_message = ["step", "step", "message"]
    assert kinds == ["start", "run", *per_message * 3, "end", "run", *per_message * 3, "end", "done"]
    assert events[0] == {"type": "start", "messages": 3, "policies": ["default", "ar"], "threshold": DEFAULT_THRESHOLD}
    steps = [e for e in events if e["type"] == "step"]
    for i, t in enumerate(tasks * 2):
        first, reply = steps[2 * i], steps[2 * i + 1]
        assert (first["message"], first["step"], first["text"]) == (i % 3, 1, t.messages[-1]["content"])
        (call,) = first["calls"]
        assert call["name"] == "create_no_fly_zone" and json.loads(call["arguments"]) == t.gold[0]["arguments"]
        after = t.world.copy()
        assert call["result"] == execute(after, "create_no_fly_zone", t.gold[0]["arguments"])
        (name,) = first["zones"]  # the zone the call created, as the world holds it, in force or not
        zone = after.zones[name]
        assert first["zones"][name] == {
            "name": zone.name,
            "lat": zone.lat,
            "lon": zone.lon,
            "radius_m": zone.radius_m,
            "start_time": zone.start_time,
            "end_time": zone.end_time,
            "active": zone.active_at(after.clock),
        }
        assert first["clock"] == after.clock and call["changes"] == t.world.diff(after)
        assert reply["step"] == 2 and reply["calls"] == [] and reply["zones"] == first["zones"]
    messages = [e for e in events if e["type"] == "message"]
    assert all(m["right"] for m in messages)  # the gold calls leave the gold world
    for name in POLICIES:
        mine = [m for m in messages if m["policy"] == name]
        assert [m["message"] for m in mine] == [0, 1, 2]
        assert mine[-1]["elapsed_s"] == pytest.approx(sum(m["seconds"] for m in mine))
        assert out[name] == {"seconds": mine[-1]["elapsed_s"], "zones_right": 3}
    assert out["messages"] == 3 and out["speedup"] == out["ar"]["seconds"] / out["default"]["seconds"]
    assert events[-1] == {"type": "done", **out}


def test_the_bench_and_the_task_seam_run_the_same_demo():
    """``clover bench agent --demo`` (``clover.bench.agent.zone_demo``) runs the model's task's
    ``agent_demo``, which the server's route runs too: the same messages, calls and outcomes."""
    from clover.bench.agent import zone_demo as bench_demo

    tasks = zone_tasks(2, load=LOAD)
    complete, bench_requests = gold_model(tasks)
    figures = bench_demo(SimpleNamespace(config=None, chat=complete), 2, None, 4)
    complete2, seam_requests = gold_model(tasks)
    events = []
    again = get_task(DEFAULT_TASK).agent_demo(complete2, 2, on_event=events.append)
    assert bench_requests == seam_requests
    assert {k: v["zones_right"] for k, v in figures.items() if isinstance(v, dict)} == {"default": 2, "ar": 2}
    assert {k: v["zones_right"] for k, v in again.items() if isinstance(v, dict)} == {"default": 2, "ar": 2}


def test_the_demo_stops_between_messages_when_asked():
    tasks = zone_tasks(2, load=LOAD)
    complete, requests = gold_model(tasks)
    events = []
    with pytest.raises(DemoStopped):
        zone_demo(complete, 2, load=LOAD, on_event=events.append, should_stop=lambda: len(events) > 3)
    assert [e["type"] for e in events] == ["start", "run", "step", "step", "message"] and len(requests) == 2
    with pytest.raises(ValueError, match="at least one message"):
        zone_demo(complete, 0, load=LOAD)
