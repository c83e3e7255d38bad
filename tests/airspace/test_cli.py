"""``clover agent`` (a scripted session: calls, results and world changes printed) and
``clover bench agent`` (its JSON keys, with the bundled model on two tasks)."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from clover.airspace.loop import ModelReply
from clover.airspace.world import World
from clover.cli import build_parser, main
from clover.commands.agent import run_session

from .fakes import ScriptedModel, calls_reply


class TypedConsole(Console):
    """A console whose ``input`` reads scripted lines (then EOF)."""

    def __init__(self, lines: list[str]):
        super().__init__(file=io.StringIO(), width=200, color_system=None)
        self.lines = list(lines)

    def input(self, prompt: str = "", **kw) -> str:
        if not self.lines:
            raise EOFError
        return self.lines.pop(0)


def test_a_session_prints_calls_results_and_changes():
    world = World.seeded(0)
    did = next(d.id for d in world.drones.values() if d.status in ("en route", "hovering", "holding"))
    model = ScriptedModel(
        calls_reply(
            [
                {"name": "recall_drone", "arguments": {"drone_id": did}},
                {"name": "lift_no_fly_zone", "arguments": {"zone_name": "Nowhere"}},
            ]
        ),
        ModelReply(f"{did} is returning to base.", [], 2),
    )
    console = TypedConsole(["recall it", "/world", "/reset", "/exit"])
    assert run_session(model, world, console) == 0
    out = console.file.getvalue()
    assert f'recall_drone({{"drone_id": "{did}"}})' in out and '"status": "returning"' in out
    assert f"world {did} status: " in out and "-> returning to base" in out
    assert 'error {"error": "no such zone"}' in out
    assert f"clover> {did} is returning to base." in out and "2 model calls" in out
    assert out.count("airspace world at") == 2  # at the start and on /world
    assert "returning to base" in out.split("airspace world at")[2]  # /world shows the changed world
    assert "(world and conversation reset)" in out
    assert [m["role"] for m in model.requests[0]] == ["user"]


def test_a_session_stops_at_the_step_limit_and_keeps_the_conversation():
    model = ScriptedModel(calls_reply([{"name": "get_drone_status", "arguments": {"drone_id": "D-1"}}]))
    console = TypedConsole(["status D-1", "again"])
    assert run_session(model, World.seeded(0), console, max_steps=2) == 0
    out = console.file.getvalue()
    assert "stopped at the step limit, 2 model calls" in out and "unknown drone D-1" in out
    assert [m["role"] for m in model.requests[-1]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "user",
        "assistant",
        "tool",
    ]


def test_the_command_is_registered():
    args = build_parser().parse_args(["agent", "--world", "3", "--policy", "ar", "--base-url", "http://x/v1"])
    assert (args.world, args.policy, args.base_url, args.max_steps) == (3, "ar", "http://x/v1", 4)
    with pytest.raises(SystemExit, match="unknown policy"):
        main(["agent", "--policy", "nonsense"])


def test_bench_agent_writes_its_figures(tmp_path):
    path = tmp_path / "agent.json"
    with pytest.raises(SystemExit) as e:
        main(["bench", "agent", "--n", "2", "--demo", "2", "--json", str(path)])
    assert e.value.code == 0
    figures = json.loads(path.read_text())["figures"]
    for k in (
        "tasks",
        "ar_success",
        "default_success",
        "ar_s_per_task",
        "default_s_per_task",
        "speedup",
        "ar_passes_per_task",
        "default_passes_per_task",
        "default_policy",
    ):
        assert k in figures, k
    assert figures["tasks"] == 2 and 0 <= figures["ar_success"] <= 1 and figures["speedup"] > 0
    assert figures["speedup"] == figures["ar_s_per_task"] / figures["default_s_per_task"]
    assert figures["ar_passes_per_task"] > figures["default_passes_per_task"] > 0
    demo = figures["demo"]
    assert demo["messages"] == 2 and demo["speedup"] == demo["ar"]["seconds"] / demo["default"]["seconds"]
    assert all(0 <= demo[p]["zones_right"] <= 2 for p in ("ar", "default"))
    assert figures["default_replies"]["replies"] <= 2 and 0 <= figures["default_replies"]["faithful"] <= 1


def test_bench_replies_writes_its_figures(tmp_path):
    path = tmp_path / "replies.json"
    with pytest.raises(SystemExit) as e:
        main(["bench", "replies", "--n", "2", "--demo", "1", "--threads", "1", "--json", str(path)])
    assert e.value.code == 0
    figures = json.loads(path.read_text())["figures"]
    assert figures["split"] == "validation" and figures["tasks"]["n"] == 2 and figures["demo"]["n"] == 1
    for what in ("tasks", "demo"):
        for setting in ("off", "words_free", "on"):
            r = figures[what][setting]
            assert r["replies"] <= figures[what]["n"] and 0 <= r["faithful"] <= min(r["ids_grounded"], r["well_formed"])
        assert figures[what]["on"]["well_formed"] == 1.0  # the word rule: no broken word
    assert figures["tasks"]["on"]["ids_grounded"] == 1.0  # every reply under grounded_reply holds only the chat's ids


def test_bench_agent_over_http_runs_the_same_tasks_the_same_way(tmp_path):
    """``--http``: the tasks again through ``clover serve`` in a subprocess; the same decoding, so
    the same success and forward passes, and a ratio of seconds per task."""
    path = tmp_path / "agent.json"
    with pytest.raises(SystemExit) as e:
        main(["bench", "agent", "--n", "1", "--demo", "0", "--threads", "1", "--http", "--json", str(path)])
    assert e.value.code == 0
    figures = json.loads(path.read_text())["figures"]
    for p in ("ar", "default"):
        http = figures["http"][p]
        assert http["success"] == figures[f"{p}_success"]
        assert http["passes_per_task"] == figures[f"{p}_passes_per_task"]
        assert http["vs_in_process"] == http["s_per_task"] / figures[f"{p}_s_per_task"]
