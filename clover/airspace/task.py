"""The airspace task (``clover.data.task``'s ``TASK``): the extraction tools (``extraction_tools``:
lengths as the operator gave them, a number and a unit, converted to metres by the world in code),
the corpus (``chats``) of open-ended names held out by family, requests no tool serves, questions
for a missing argument, follow-ups that refer back, plain text, and wider phrasing; its world,
evaluation (``scoring``), recipes and tokenizer.

This is the bundled model's task, and the one a model that names none falls back to. A model
trained with one of its recipes records ``airspace`` in its config (``clover.data.task.model_task``
reads it); the bundled model, trained before the task took that name, records ``airspace2``, a
former name of it (``clover.data.task.ALIASES``). The world also runs the metres form of the tools
(``clover.airspace.tools``) that models of the first corpus (``tokenizer_corpus``) call.
"""

from __future__ import annotations

from clover.airspace.extraction_tools import EXTRACTION_TOOLS, tools_in_form, values_form
from clover.airspace.world import World, execute
from clover.data.task import Task

NAME = "airspace"


def _corpus(split: str, n: int, seed: int = 0) -> list[dict]:
    from clover.airspace.chats import generate  # deferred: the corpus is large to import

    return generate(split, n, seed=seed)


def _world(seed: int = 0, area_deg: float | None = None):
    from clover.airspace.world import World  # deferred: the world imports this package's tools

    return World.seeded(seed, area_deg=area_deg)


def _world_from_dict(state: dict):
    return World.from_request(state)


def _execute(world, name: str, arguments) -> dict:
    return execute(world, name, arguments)


def _eval_split(split: str, n: int) -> list[dict]:
    from clover.airspace.chats import load_split  # deferred: the corpus is large to import

    return load_split(split, n)


def _recipes() -> dict[str, type]:
    from clover.airspace import ar_recipe, diffusion_recipe  # deferred: the recipes import torch

    return {**diffusion_recipe.RECIPES, **ar_recipe.RECIPES}


def _evaluate(*args, **kwargs) -> dict:
    from clover.airspace.evaluate import evaluate_airspace  # deferred: the engine and torch

    return evaluate_airspace(*args, **kwargs)  # the task's scoring, in the form of the model's values


def _agent_demo(complete, n: int = 20, **kwargs) -> dict:
    from clover.airspace.demo import zone_demo  # deferred: the demo's tasks read the corpus

    return zone_demo(complete, n, load=_eval_split, **kwargs)


def _reply_vocabulary() -> frozenset[str]:
    from clover.airspace.replies import reply_vocabulary  # deferred: the corpus is large to import

    return reply_vocabulary()


def _tokenizer(vocab_size: int = 3072, **kwargs):
    from clover.airspace.tokenizer import build_default_tokenizer  # deferred: tokenizers, not for clover --help

    return build_default_tokenizer(vocab_size, **kwargs)


TASK = Task(
    name=NAME,
    summary="an airspace-operations assistant with extraction tools: lengths as given (number and unit), "
    "names copied as written, follow-ups, requests no tool serves answered in words",
    tools=lambda config=None: tools_in_form(EXTRACTION_TOOLS, values_form(config)),
    corpus=_corpus,
    world=_world,
    world_from_dict=_world_from_dict,
    execute=_execute,
    evaluate=_evaluate,  # ``clover eval airspace``
    eval_split=_eval_split,
    recipes=_recipes,
    tokenizer=_tokenizer,
    agent_demo=_agent_demo,
    reply_vocabulary=_reply_vocabulary,
)
