"""``airspace-ar``: the airspace task's autoregressive twin, a Hugging Face Qwen3.5-MoE causal LM
with a next-token loss (``clover.train.ar``), trained on the same corpus mix as the diffusion
recipe (``diffusion_recipe``: operator chats, conversations, greetings and decision groups) with
block size 1. ``clover convert`` turns it into a Clover model that the ``airspace`` recipe adapts
(benchmarks/make_twin.sh)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from clover.airspace.diffusion_recipe import Airspace2Recipe
from clover.airspace.recipes import SMALL_SHAPE
from clover.data.tokenizer import CloverTokenizer
from clover.train.ar import hf_config
from clover.train.trainer import TrainConfig


@dataclass
class AirspaceArRecipe(Airspace2Recipe):
    """The airspace corpus for a next-token model. ``model`` holds ``Qwen3_5MoeTextConfig`` fields."""

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
    conversation_frac: float = 0.25
    name: ClassVar[str] = "airspace-ar"
    autoregressive: ClassVar[bool] = True

    def hf_config(self, tok: CloverTokenizer):
        return hf_config(tok, self.model)


RECIPES = {AirspaceArRecipe.name: AirspaceArRecipe}
