"""The second airspace recipe, ``airspace2``: the bundled model's shape and schedule fields on the
second corpus (extraction tools, open-ended names, follow-ups, plain text; ``corpus``) with the
first corpus's decision groups and conversations whose last turn stands on its own
(``corpus.multi_turn``), and block sizes drawn from 1 to 64 per step (``TrainConfig.
block_size_range``) so that one model decodes at any of them."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from clover.airspace.chats import example, greeting, multi_turn, written_chat
from clover.airspace.decision_groups import decision_examples
from clover.airspace.recipes import AirspaceRecipe
from clover.airspace.task import NAME
from clover.airspace.tool_lists import drawn_tools
from clover.data.chat import IM_END
from clover.data.tokenizer import CloverTokenizer
from clover.model import CloverConfig
from clover.train.objective import MaskingConfig
from clover.train.recipes import collate, encode_example
from clover.train.trainer import TrainConfig


@dataclass
class Airspace2Recipe(AirspaceRecipe):
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            steps=6_000,
            lr=3e-4,
            warmup=50,
            block_size=32,
            eval_every=200,
            ckpt_every=50,
            log_every=10,
            micro_batches=4,
            block_size_range=[1, 64],
            masking=MaskingConfig(t_min=0.05, t_max=1.0, weighting="elbo", complementary=True, samples=2),
        )
    )
    batch_size: int = 16
    max_len: int = 1024
    decision_frac: float = 0.15
    conversation_frac: float = 0.12  # of the other sequences: ``multi_turn`` conversations
    greeting_frac: float = 0.04  # of the rest: greetings and thanks with operations words (``corpus.greeting``)
    greeting_no_tools_frac: float = 0.0  # of those greetings: drawn in a chat that offers no tools
    greeting_composed_frac: float = 0.0  # of their remarks (train only): composed from parts (``composed_remark``)
    curriculum_steps: int = 0
    # "units": lengths as a number and a unit enum, times HH:MM, ids D-<n> (``tools.EXTRACTION_TOOLS``);
    # "written": lengths, times and drone ids copied as the operator wrote them (``extraction_tools.WRITTEN_TOOLS``)
    values: str = "units"
    tool_list_frac: float = 0.0  # of the chats that offer tools: the list drawn as users pass theirs
    tool_missing_frac: float = 0.0  # of those that are one call: asked without its tool, declined in words
    name: ClassVar[str] = NAME

    def check(self) -> None:
        if self.values not in ("units", "written"):
            raise ValueError(f"data field 'values' must be 'units' or 'written', got {self.values!r}")

    def source(self, tok: CloverTokenizer, split: str = "train", seed: int = 0):
        self.check()
        return airspace2_source(tok, self, split, seed)

    def validation_batches(self, tok: CloverTokenizer, n: int = 4) -> list[dict]:
        source = self.source(tok, "validation", seed=99)
        return [source(i) for i in range(n)]

    def model_config(self, tok: CloverTokenizer) -> CloverConfig:
        cfg = super().model_config(tok)
        self.check()
        cfg.extra = {**cfg.extra, "task": NAME, "values": self.values}
        return cfg


def encode_plain(tok: CloverTokenizer, ex: dict, max_len: int, block_size: int) -> tuple[list[int], list[bool]]:
    """A plain-text example (no chat markup): its ``prompt`` is context, the rest of the text and
    an end of turn are the target, the last block filled with EOS as chat answers are."""
    ids, tgt = tok.encode_segments([(ex["prompt"], False), (ex["text"][len(ex["prompt"]) :] + IM_END, True)])
    fill = -len(ids) % block_size
    return (ids + [tok.pad_token_id] * fill)[:max_len], (tgt + [True] * fill)[:max_len]


def shaped(ex: dict, recipe: Airspace2Recipe, rng: random.Random, split: str) -> dict:
    """A corpus chat in the recipe's form: its values as written (``chats.written_chat``) when
    ``recipe.values`` says so, and (train only) its tool list drawn as users pass theirs
    (``tool_lists.drawn_tools``). Decision groups and plain text pass as they are."""
    if "surfaces" not in ex:
        return ex
    if recipe.values == "written":
        ex = written_chat(ex)
    if split == "train" and ex.get("tools") and recipe.tool_list_frac and rng.random() < recipe.tool_list_frac:
        ex = drawn_tools(ex, rng, recipe.tool_missing_frac)
    return ex


def airspace2_source(tok: CloverTokenizer, recipe: Airspace2Recipe, split: str = "train", seed: int = 0):
    """step → batch, a pure function of (seed, step). Train batches fill answers to the step's
    drawn block size; validation batches to the fixed one, so validation figures compare."""
    pieces = tok.word_pieces() if recipe.name_pieces else ()

    def source(step: int) -> dict[str, torch.Tensor]:
        rng = random.Random(f"airspace2-{split}-{seed}-{step}")
        bs = recipe.train.block_size_at(step) if split == "train" else recipe.train.block_size
        rows = []
        for _ in range(recipe.batch_size):
            if rng.random() < recipe.decision_frac:
                ex = decision_examples(split, 1, seed=rng.randrange(1 << 30))[0]
            elif rng.random() < recipe.conversation_frac:
                ex = multi_turn(rng, split, pieces)
            elif recipe.greeting_frac and rng.random() < recipe.greeting_frac:
                ex = greeting(rng, split, recipe.greeting_no_tools_frac, recipe.greeting_composed_frac)
            else:
                ex = example(rng, split, pieces=pieces)
            ex = shaped(ex, recipe, rng, split)
            if ex["kind"] == "plain":
                rows.append(encode_plain(tok, ex, recipe.max_len, bs))
            else:
                rows.append(encode_example(tok, ex, recipe.max_len, bs, rng))
        return collate(rows, tok.pad_token_id)

    return source


RECIPES = {r.name: r for r in (Airspace2Recipe,)}
