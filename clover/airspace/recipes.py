"""The airspace training recipes: ``airspace`` trains the bundled block-diffusion model from
scratch on the CPU, ``airspace-ar`` its autoregressive base (a Hugging Face Qwen3.5-MoE causal LM,
``clover.train.ar``), both on the same corpus mix (operator chats and decision groups)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from clover.airspace.corpus import example, multi_turn
from clover.airspace.decision_groups import decision_examples
from clover.airspace.tokenizer import build_default_tokenizer, default_added_tokens
from clover.data.tokenizer import CloverTokenizer
from clover.train.ar import hf_config
from clover.train.objective import MaskingConfig
from clover.train.recipes import Recipe, collate, encode_example
from clover.train.trainer import TrainConfig

# the small hybrid MoE both airspace models share (the Clover model adds its own switches, the
# autoregressive base more layers): Qwen3.5's layout, one attention layer to three GDN layers
SMALL_SHAPE = dict(
    hidden_size=128,
    layer_types=None,  # None: from full_attention_interval
    full_attention_interval=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=32,
    linear_value_head_dim=32,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=128,
    shared_expert_intermediate_size=128,
    max_position_embeddings=4096,
    # every head dimension rotates: with head_dim 32, Qwen's 25 % leaves 8 dims and the model
    # cannot copy by position (synthetic copy task, 200 steps: loss 3.80 with 25 % / theta 1e5,
    # 0.03 with 100 % / theta 1e4)
    partial_rotary_factor=1.0,
    rope_theta=10_000.0,
)


@dataclass
class AirspaceRecipe(Recipe):
    model: dict = field(
        default_factory=lambda: dict(
            SMALL_SHAPE,
            num_hidden_layers=4,
            shift_logits=False,
            block_size=32,
            max_block_size=64,
            gdn_block_mixing="bidirectional",
            gdn_right_conv=True,
            gdn_block_calibration=True,
        )
    )
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            steps=7_000,
            lr=2e-3,
            warmup=200,
            block_size=32,
            eval_every=250,
            ckpt_every=100,
            log_every=10,
            micro_batches=4,
            # 4 noisy views per sequence (2 masks + complements) share one clean stream: the
            # prompt (tool list, message) is most of each sequence, the answer a block or two
            masking=MaskingConfig(t_min=0.05, t_max=1.0, weighting="elbo", complementary=True, samples=2),
        )
    )
    batch_size: int = 16
    max_len: int = 512
    decision_frac: float = 0.2
    # chats that offer no tools at all (kind "no_tools"), as a plain OpenAI request without
    # ``tools`` is: without them the model never sees such a prompt
    toolless_frac: float = 0.0
    # conversations with earlier turns (kind "multi_turn": an agent loop's or a chat client's
    # second request); without them every training chat has one user turn
    multiturn_frac: float = 0.0
    curriculum_steps: int = 600  # single-action messages only before this step
    tokenizer_vocab: int = 2048
    # train names coined from the tokenizer's own word pieces too (``phrasing.coined_word``): a
    # piece that never stands in a train name cannot be copied into one
    name_pieces: bool = True

    name: ClassVar[str] = "airspace"

    def source(self, tok: CloverTokenizer, split: str = "train", seed: int = 0) -> Callable[[int], dict]:
        return airspace_source(tok, self, split, seed)

    def validation_batches(self, tok: CloverTokenizer, n: int = 4) -> list[dict]:
        source = self.source(tok, "validation", seed=99)
        return [source(self.curriculum_steps + i) for i in range(n)]  # the full mix, past the curriculum

    def tokenizer(self) -> CloverTokenizer:
        return build_default_tokenizer(self.tokenizer_vocab)

    def added_tokens(self) -> list[str]:
        return default_added_tokens()


def airspace_source(tok: CloverTokenizer, recipe: AirspaceRecipe, split: str = "train", seed: int = 0):
    """step → batch, a pure function of (seed, step): resumable and identical on every rank."""
    pieces = tok.word_pieces() if recipe.name_pieces else ()

    def source(step: int) -> dict[str, torch.Tensor]:
        rng = random.Random(f"airspace-{split}-{seed}-{step}")
        max_actions = 1 if step < recipe.curriculum_steps else 5
        rows = []
        for _ in range(recipe.batch_size):
            if rng.random() < recipe.decision_frac:
                ex = decision_examples(split, 1, seed=rng.randrange(1 << 30))[0]
            elif recipe.toolless_frac and rng.random() < recipe.toolless_frac:  # no draw when 0: older runs replay
                ex = example(rng, split, max_actions, mix={"no_tools": 1.0}, pieces=pieces)
            elif recipe.multiturn_frac and rng.random() < recipe.multiturn_frac:  # (no draw when 0)
                ex = multi_turn(rng, split, max_actions, pieces=pieces)
            else:
                ex = example(rng, split, max_actions, pieces=pieces)
            rows.append(encode_example(tok, ex, recipe.max_len, recipe.train.block_size, rng))
        return collate(rows, tok.pad_token_id)

    return source


@dataclass
class AirspaceArRecipe(AirspaceRecipe):
    """The airspace corpus (the same mix the diffusion recipe draws) for a next-token model.
    ``model`` holds ``Qwen3_5MoeTextConfig`` fields."""

    model: dict = field(
        default_factory=lambda: dict(
            SMALL_SHAPE, num_hidden_layers=8, linear_conv_kernel_dim=4, router_aux_loss_coef=0.001
        )
    )
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            steps=3_000,
            lr=2e-3,
            warmup=100,
            block_size=1,
            eval_every=200,
            ckpt_every=50,
            log_every=10,
            micro_batches=4,
        )
    )
    batch_size: int = 32
    max_len: int = 1024
    decision_frac: float = 0.3
    toolless_frac: float = 0.1
    multiturn_frac: float = 0.25
    curriculum_steps: int = 0
    name: ClassVar[str] = "airspace-ar"
    autoregressive: ClassVar[bool] = True

    def hf_config(self, tok: CloverTokenizer):
        return hf_config(tok, self.model)


RECIPES: dict[str, type[Recipe]] = {r.name: r for r in (AirspaceRecipe, AirspaceArRecipe)}
