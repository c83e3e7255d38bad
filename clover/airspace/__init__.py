"""The airspace demo, one plug-in task (``clover.data.task``): the six airspace tools (``tools``),
the seeded corpus of operator chats (``corpus``, ``phrasing``) and decision groups
(``decision_groups``), the model's tokenizer (``tokenizer``) and training recipes (``recipes``), a world
the tools act on (``world``), an agent loop that runs a model's tool calls against it until the
model answers in words (``loop``), operator tasks scored by the state they leave (``tasks``) and
the evaluation ``clover eval`` runs (``evaluate``). See docs/agent.md.

Nothing in the generic layers imports this package: they reach it through ``TASK``.
"""

from __future__ import annotations

from clover.airspace.corpus import generate, load_split
from clover.airspace.evaluate import evaluate_airspace
from clover.airspace.loop import AgentResult, CallRecord, LocalModel, ModelReply, OpenAIModel, run_agent
from clover.airspace.tools import AIRSPACE_TOOLS
from clover.airspace.world import Drone, Mission, Waypoint, World, Zone, execute
from clover.data.task import Task

__all__ = [
    "TASK",
    "AgentResult",
    "CallRecord",
    "Drone",
    "LocalModel",
    "Mission",
    "ModelReply",
    "OpenAIModel",
    "Waypoint",
    "World",
    "Zone",
    "execute",
    "run_agent",
]


def _recipes() -> dict[str, type]:
    # deferred: the recipes import torch
    from clover.airspace.recipes import RECIPES  # deferred: loads torch, not for clover --help

    return RECIPES


def _evaluate(*args, **kwargs) -> dict:
    # deferred: the evaluation needs the grammar module (torch), which listing the tasks does not

    return evaluate_airspace(*args, **kwargs)


def _agent_demo(complete, n: int = 20, **kwargs) -> dict:
    from clover.airspace.demo import zone_demo  # deferred: the demo's tasks read the corpus

    return zone_demo(complete, n, load=load_split, **kwargs)


def _tokenizer(vocab_size: int = 3072, **kwargs):
    # deferred: the tokenizer needs the tokenizers library
    from clover.airspace.tokenizer import build_default_tokenizer  # deferred: tokenizers, not for clover --help

    return build_default_tokenizer(vocab_size, **kwargs)


TASK = Task(
    name="airspace",
    summary="an airspace-operations assistant: no-fly zones, waypoints, missions, recalls and drone status "
    "through six tools, and joint yes/no decisions about a flight",
    tools=lambda: AIRSPACE_TOOLS,
    corpus=lambda split, n, seed=0: generate(split, n, seed=seed),
    world=lambda seed=0, area_deg=None: World.seeded(seed, area_deg=area_deg),
    world_from_dict=World.from_request,
    execute=execute,
    evaluate=_evaluate,
    eval_split=load_split,
    recipes=_recipes,
    tokenizer=_tokenizer,
    agent_demo=_agent_demo,
)
