"""The task seam: a demo is a plug-in (a *task*), not a layer. A task brings what the generic
layers only ever reach through here: the tools a chat offers, a corpus of training chats, a world
its tool calls act on, an evaluation, its training recipes and a demo of its agent.

The layers below never name a task: they ask ``get_task(name)`` or ``model_task(config)`` (the
task a checkpoint was trained for, recorded in its config's ``extra``). ``TASKS`` lists where
each task lives; its module defines ``TASK`` and is imported on first use, so a program that
never asks for a task never loads one. ``register`` adds a task from outside the package.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


class World(Protocol):
    """What a task's world offers the agent routes: a state kept by the client as plain JSON."""

    def to_dict(self) -> dict: ...

    def copy(self) -> World: ...

    def diff(self, other: World) -> list: ...

    def view(self) -> dict:
        """The state, plus what a map draws from it that only the world's rules know."""
        ...


class StateTooLarge(ValueError):
    """A world state from outside that is over a task's bounds; ``param`` names the part."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Task:
    """One plug-in task. Every member but ``name`` and ``tools`` may be absent (None)."""

    name: str
    summary: str  # one line: what the task's model does
    # () -> the OpenAI-format ``tools`` list a chat offers; a task whose models differ in the form of
    # their arguments takes (config=None): the list for a model of that config (None: the bundled
    # model). Callers ask through ``offered``
    tools: Callable[..., list[dict]]
    # (split, n, seed) -> chats {"messages", "tools", ...} in OpenAI's fine-tuning form
    corpus: Callable[[str, int, int], list[dict]] | None = None
    # (seed, area_deg) -> a World; world_from_dict(state) -> a World (ValueError when malformed,
    # StateTooLarge when over the task's bounds)
    world: Callable[..., World] | None = None
    world_from_dict: Callable[[dict], World] | None = None
    # (world, tool name, arguments) -> the call's result (an {"error": ...} when refused)
    execute: Callable[[Any, str, Any], dict] | None = None
    evaluate: Callable[..., dict] | None = None  # the task's evaluation: (model, tokenizer, ...) -> figures
    eval_split: Callable[[str, int], list[dict]] | None = None  # (split, n) -> the split's fixed evaluation chats
    recipes: Callable[[], dict[str, type]] = field(default=lambda: {})  # training recipes by name
    tokenizer: Callable[..., Any] | None = None  # (vocab_size) -> a tokenizer trained on the corpus
    # (complete, n, *, config, threshold, max_steps, on_event, should_stop) -> figures: the task's demo, its
    # first n demo messages through the agent loop under the default policy then ``ar``, with
    # ``complete(messages, tools=..., **request) -> chat.completion`` as the model of ``config`` (clover bench
    # agent --demo and the playground's demo button run this one function)
    agent_demo: Callable[..., dict] | None = None
    # () -> the words (lower case, runs of ASCII letters) a reply of the task's model may write
    # besides the conversation's: grounded replies hold a reply's words to them, and ``clover bench
    # replies`` judges a reply's words by them (docs/grounding.md, Grounded replies)
    reply_vocabulary: Callable[[], frozenset[str]] | None = None

    def offered(self, config=None) -> list[dict]:
        """The tools a chat offers a model of ``config`` (None: the bundled model): ``tools(config)``
        for a task whose ``tools`` takes a config, ``tools()`` for one whose does not."""
        try:
            takes = bool(inspect.signature(self.tools).parameters)
        except (TypeError, ValueError):  # a callable without a signature: call it as the seam first did
            takes = False
        return self.tools(config) if takes else self.tools()


# name -> the module that defines ``TASK``
TASKS: dict[str, str] = {"airspace": "clover.airspace.task"}
# former names -> the task's name: what a checkpoint's config records (the bundled model says
# ``airspace2``) and, for one release, what a user may still type (``deprecated`` says so)
ALIASES: dict[str, str] = {"airspace2": "airspace"}
# the task the bundled model was trained for: the playground's agent mode and ``clover chat
# --tools auto`` fall back to it for a model that names none
DEFAULT_TASK = "airspace"
_loaded: dict[str, Task] = {}


def register(task: Task) -> None:
    """Add (or replace) a task by its name."""
    _loaded[task.name] = task
    TASKS.setdefault(task.name, "")


def task_names() -> list[str]:
    return sorted(TASKS)


def canonical(name: str) -> str:
    """``name`` with a former task name (:data:`ALIASES`) replaced by the task's own, also as the
    head of a recipe's name (``airspace2-<variant>`` is ``airspace-<variant>``)."""
    head, dash, variant = name.partition("-")
    return ALIASES[head] + dash + variant if head in ALIASES else name


def deprecated(name: str, where: str) -> str:
    """``name`` (a task's or a recipe's) as it is called now; a former name is accepted with a note on
    stderr (``where``: the command that read it)."""
    new = canonical(name)
    if new != name:
        print(f"{where}: note: {name!r} is now called {new!r}; the old name goes in a later release", file=sys.stderr)
    return new


def get_task(name: str) -> Task:
    """The task called ``name`` (or a former name of it); a KeyError that lists the known ones otherwise."""
    name = canonical(name)
    if name not in _loaded:
        if not TASKS.get(name):
            raise KeyError(f"unknown task {name!r}; known: {task_names()}")
        _loaded[name] = importlib.import_module(TASKS[name]).TASK
    return _loaded[name]


def model_task(config, default: bool = False) -> Task | None:
    """The task a model's config names (``extra["task"]``, or the recipe it was trained with:
    ``extra["recipe"]`` as ``<task>`` or ``<task>-<variant>``); with ``default``, the bundled
    model's task for a model that names none."""
    extra = (getattr(config, "extra", None) or {}) if config is not None else {}
    recipe = str(extra.get("recipe") or "")
    names = sorted([*TASKS, *ALIASES], key=len, reverse=True)
    named = extra.get("task") or next((t for t in names if recipe == t or recipe.startswith(t + "-")), None)
    if named is not None and canonical(named) in TASKS:
        return get_task(named)
    return get_task(DEFAULT_TASK) if default else None


def reply_vocabulary(config) -> frozenset[str] | None:
    """The reply vocabulary of the task a model's config names (``Task.reply_vocabulary``), or
    None where it names no task (a converted checkpoint) or its task ships none."""
    task = model_task(config)
    return task.reply_vocabulary() if task is not None and task.reply_vocabulary is not None else None


def all_recipes() -> dict[str, type]:
    """Every registered task's training recipes, by name (``clover train --recipe``)."""
    out: dict[str, type] = {}
    for name in task_names():
        out.update(get_task(name).recipes())
    return out
