"""The zone demo: the first ``n`` test messages that each ask for one no-fly zone, through the agent
loop one after another, first under the default policy, then under ``ar``; the whole run timed
per policy, and the zones that reached the map right counted. One implementation for both of its
front ends: ``clover bench agent --demo N`` (``LLM.chat`` as the model) and the playground's
"20 messages" button (``POST /v1/agent/demo``, the server's own chat path as the model), which
reaches it through the task seam (``Task.agent_demo``).

``on_event`` hears the run as it goes, each event a JSON-able dict:

* ``{"type": "start", "messages", "policies", "threshold"}``;
* ``{"type": "run", "policy"}``: a policy's run begins (from the first message's start world);
* ``{"type": "step", "policy", "message", "text", "step", "calls", "zones", "clock"}``: one
  model call's tool calls have run (``calls``: each ``{"name", "arguments", "result",
  "changes"}``); ``zones``: the zones they left that the message's start world did not have
  as they are now, each the world's zone record plus ``active`` (in force at ``clock``);
* ``{"type": "message", "policy", "message", "right", "seconds", "elapsed_s"}``: a message is
  done: whether its world is the gold calls' world, its seconds and the run's so far;
* ``{"type": "end", "policy", "seconds", "zones_right"}``; then ``{"type": "done", **figures}``.

The events are sent from inside the timed loop (a step's is built from the world the loop hands
``on_step``), so a listener must be quick; ``should_stop()`` is asked between messages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

from clover.airspace.extraction_tools import values_form
from clover.airspace.loop import GROUNDED_REPLY, MAX_STEPS, CompletionModel, run_agent
from clover.airspace.tasks import task_success, zone_tasks
from clover.airspace.world import World

POLICIES = ("default", "ar")  # the default first: its zones reach the map first
DEFAULT_MESSAGES = 20


class DemoStopped(Exception):
    """``should_stop()`` said so between two messages."""


def decoder_request(name: str, threshold: float | None = None) -> dict:
    """The request fields of ``ar`` or of the default policy at ``threshold`` (None: its own)."""
    from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD  # deferred: loads torch, not for clover --help

    if name == "ar":
        return {"policy": "ar"}
    if name != "default":
        raise ValueError(f"unknown decoder {name!r}: ar or default")
    return {"policy": DEFAULT_POLICY, "threshold": threshold or DEFAULT_THRESHOLD}


def new_zones(start: World, world: World) -> dict[str, dict]:
    """The zones of ``world`` that ``start`` does not have as they are, each with ``active``."""
    return {
        name: {**asdict(z), "active": z.active_at(world.clock)}
        for name, z in world.zones.items()
        if start.zones.get(name) != z
    }


def zone_demo(
    complete: Callable[..., dict],
    n: int = DEFAULT_MESSAGES,
    *,
    load,
    config=None,
    threshold: float | None = None,
    max_steps: int = MAX_STEPS,
    on_event: Callable[[dict], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> dict:
    """The demo's ``n`` messages (``load``: the task's ``eval_split``) under each of ``POLICIES``
    with ``complete`` as the model of ``config`` (``CompletionModel``; None: the bundled model),
    offered the tools in the form of values it was trained on → ``{"messages", "default": {"seconds",
    "zones_right"}, "ar": {...}, "speedup"}``: ``seconds`` is the loop's own time over all
    messages (``AgentResult.wall_s`` summed), ``speedup`` ar's seconds over the default's."""
    if n < 1:
        raise ValueError(f"the demo needs at least one message, got {n}")
    emit = on_event or (lambda ev: None)
    tasks = zone_tasks(n, load=load)
    fields = {name: decoder_request(name, threshold) for name in POLICIES}
    emit(
        {
            "type": "start",
            "messages": len(tasks),
            "policies": list(POLICIES),
            "threshold": fields["default"]["threshold"],
        }
    )
    out: dict = {"messages": len(tasks)}
    for name in POLICIES:
        model = CompletionModel(  # as the loop asks
            complete, **fields[name], grounded_reply=GROUNDED_REPLY, values=values_form(config)
        )
        emit({"type": "run", "policy": name})
        seconds, right = 0.0, 0
        for i, task in enumerate(tasks):
            if should_stop is not None and should_stop():
                raise DemoStopped()
            text = task.messages[-1]["content"]

            def on_step(step, reply, records, world, i=i, task=task, text=text):
                emit(
                    {
                        "type": "step",
                        "policy": name,
                        "message": i,
                        "text": text,
                        "step": step,
                        "calls": [
                            {"name": r.name, "arguments": r.arguments, "result": r.result, "changes": r.changes}
                            for r in records
                        ],
                        "zones": new_zones(task.world, world),
                        "clock": world.clock,
                    }
                )

            r = run_agent(model, task.messages, task.world, task.tools, max_steps=max_steps, on_step=on_step)
            ok = task_success(task, r)
            seconds += r.wall_s
            right += ok
            emit(
                {
                    "type": "message",
                    "policy": name,
                    "message": i,
                    "right": ok,
                    "seconds": r.wall_s,
                    "elapsed_s": seconds,
                }
            )
        out[name] = {"seconds": seconds, "zones_right": right}
        emit({"type": "end", "policy": name, **out[name]})
    out["speedup"] = out["ar"]["seconds"] / max(1e-9, out["default"]["seconds"])
    emit({"type": "done", **out})
    return out
