"""Operator tasks from the airspace corpus, each with a world to act on and the world its gold
calls produce: what ``clover bench agent`` runs through the loop and scores by state.

A task is the prompt of a corpus chat whose answer is tool calls: kinds ``tool_call`` (one
call), ``compound`` (2-5 calls from one message) and ``tool_result`` (a message whose results
the assistant then summarises; half of them a status check). Its start world is
``World.for_task(gold calls)`` seeded from the message, and its gold world is that world after the
gold calls. The corpus has no task that must read a status before deciding how to act.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass

from clover.airspace.calls import gold_calls
from clover.airspace.chats import load_split
from clover.airspace.loop import AgentResult
from clover.airspace.world import READ_ONLY, World, execute
from clover.data.chat import is_answer

TASK_KINDS = ("tool_call", "compound", "tool_result")


@dataclass
class Task:
    messages: list[dict]  # the prompt: a system message (sometimes), then the operator's message
    tools: list[dict]  # the tools the chat offers (all six, or a shuffled superset of the needed ones)
    gold: list[dict]  # the gold calls, ``{"name", "arguments"}``, in order
    kind: str
    world: World  # the start
    gold_world: World  # the start after the gold calls
    gold_errors: list[dict]  # results of gold calls that failed (none for corpus tasks: tested)


def task_from_example(ex: dict, seed: int | None = None) -> Task:
    """The task of one corpus chat (its first answer turn must be calls)."""
    prompt = []
    for m in ex["messages"]:
        if is_answer(m):
            break
        prompt.append(m)
    gold = gold_calls(ex)
    if not gold:
        raise ValueError("this chat's answer is not tool calls: not an operator task")
    results = []  # the corpus's tool results after the calls, if the chat has them
    for m in ex["messages"][len(prompt) + 1 :]:
        if m.get("role") != "tool":
            break
        try:
            results.append(json.loads(m["content"]))
        except (json.JSONDecodeError, TypeError):
            results.append(None)
    key = seed if seed is not None else zlib.crc32(json.dumps(prompt, sort_keys=True).encode())
    world = World.for_task(gold, seed=key, results=results)
    after = world.copy()
    errors = [r for r in (execute(after, c["name"], c["arguments"]) for c in gold) if "error" in r]
    return Task(prompt, ex["tools"], gold, ex["kind"], world, after, errors)


def operator_tasks(n: int, split: str = "test", load=load_split) -> list[Task]:
    """The first ``n`` operator tasks of ``split``'s fixed evaluation set (``load(split, size)``:
    this corpus's ``load_split`` by default, or a task's ``eval_split``)."""
    return _first_tasks(n, split, lambda e: e["kind"] in TASK_KINDS, 64, load)


def zone_tasks(n: int = 20, split: str = "test", load=load_split) -> list[Task]:
    """The first ``n`` messages of ``split`` that each ask for one no-fly zone: the demo of an
    operator reading airspace messages to the map (``clover bench agent --demo``)."""
    return _first_tasks(n, split, lambda e: e["kind"] == "tool_call" and _one_zone(e), 256, load)


def _first_tasks(n: int, split: str, keep, size: int, load=load_split) -> list[Task]:
    """The tasks of the first ``n`` chats of ``split`` that ``keep`` accepts, drawing a longer
    prefix of the split (doubling from ``size``, at least 3n) until there are enough."""
    size, tasks = max(size, 3 * n), []
    while len(tasks) < n:
        pool = load(split, size)
        tasks = [task_from_example(e) for e in pool if keep(e)][:n]
        if len(pool) < size or size >= 20_000:
            break
        size *= 2
    return tasks


def _one_zone(ex: dict) -> bool:
    gold = gold_calls(ex)
    return len(gold) == 1 and gold[0]["name"] == "create_no_fly_zone"


def task_success(task: Task, result: AgentResult) -> bool:
    """The world after the agent equals the gold world; and, since a status query changes no state,
    every drone the gold calls query was queried (successfully) by the agent."""
    if result.world != task.gold_world:
        return False
    asked = {
        json.dumps(c.arguments if isinstance(c.arguments, dict) else _loads(c.arguments), sort_keys=True)
        for c in result.calls
        if c.name in READ_ONLY and c.ok
    }
    return all(json.dumps(c["arguments"], sort_keys=True) in asked for c in task.gold if c["name"] in READ_ONLY)


def _loads(text: str):
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return text
