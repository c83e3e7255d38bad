"""Clover's decoding settings, declared once: the request schemas (chat, text completions, the
Responses API, joint decisions), their mapping onto ``SamplingParams`` and the command line's
flags and help are all made from ``DECODING``. Adding a setting is one line here (and its field on
``SamplingParams``, which holds every default: ``clover.engine.policies`` defines the policy's).

This module imports neither pydantic nor torch, so ``clover --help`` builds the flags from it
cheaply; the policy list and the engine's defaults are looked up only when help is printed.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields


@dataclass(frozen=True)
class Setting:
    name: str  # the request field and SamplingParams field; the flag is --name-with-dashes
    type: type  # int, float or str
    help: str  # "{policies}" stands for the registered policies' names
    bounds: dict = field(default_factory=dict)  # pydantic Field bounds: ge, gt, le
    block: bool = False  # a setting of how a block is decoded (joint decisions take these alone)


DECODING: tuple[Setting, ...] = (
    Setting("block_size", int, "tokens per block (default: the model's)", {"ge": 1}, block=True),
    Setting("policy", str, "which positions each pass commits: one of {policies}", block=True),
    Setting("threshold", float, "confidence to commit a position (threshold, prefix, edit)", {"gt": 0, "le": 1}, True),
    Setting("steps_per_block", int, "passes per block for the fixed policy (default: block size / 4)", {"ge": 1}),
    Setting("temperature", float, "0: greedy", {"ge": 0, "le": 2}),
    Setting("top_p", float, "sampling: the most likely tokens up to this mass (1: all)", {"gt": 0, "le": 1}),
    Setting("top_k", int, "sampling: the k most likely tokens only (0: off)", {"ge": 0}),
    Setting("seed", int, "sampling seed (default: none, each run draws its own)", {"ge": 0, "le": 2**63 - 1}),
)
BLOCK_SETTINGS = tuple(s for s in DECODING if s.block)


def decoding_values(req, settings: tuple[Setting, ...] = DECODING) -> dict:
    """The settings a request (or parsed flags) gives, by name; unset ones left out, so
    ``SamplingParams`` applies its own defaults."""
    return {s.name: v for s in settings if (v := getattr(req, s.name, None)) is not None}


def policy_names() -> str:
    from clover.engine.policies import POLICIES  # deferred: the policies import torch

    return ", ".join(sorted(POLICIES))


def engine_default(name: str):
    """``SamplingParams``' default for ``name`` (the one definition of every decoding default)."""
    from clover.engine.params import SamplingParams  # deferred: torch

    return next(f.default for f in fields(SamplingParams) if f.name == name)


class _Later:
    """A help-text value computed when help is printed (argparse formats help with ``%``)."""

    def __init__(self, fn):
        self.fn = fn

    def __str__(self) -> str:
        return str(self.fn())


def add_decoding_flags(p: argparse.ArgumentParser, settings: tuple[Setting, ...] = DECODING) -> None:
    """One flag per setting, unset by default: ``SamplingParams`` then applies its own default,
    which the help shows."""
    for s in settings:
        text = s.help.replace("{policies}", "%(policies)s")
        if "default" not in text:
            text += " (default: %(engine_default)s)"
        action = p.add_argument("--" + s.name.replace("_", "-"), type=s.type, default=None, help=text)
        action.policies = _Later(policy_names)
        action.engine_default = _Later(lambda name=s.name: engine_default(name))


def block_size_problem(block_size: int | None, max_block_size: int) -> str | None:
    """What is wrong with a requested block size, or None (the API's one check; the model's own
    is ``CloverConfig.check_block_size``)."""
    if block_size is not None and not 1 <= block_size <= max_block_size:
        return f"block_size {block_size} is out of range: this model takes 1..{max_block_size}"
    return None
