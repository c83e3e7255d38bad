"""What the airspace recipes share: the small hybrid MoE shape, the schedule, the tokenizer and
the mix fields (``AirspaceRecipe``, a base no command names). The recipes themselves:
``diffusion_recipe`` (``airspace``, the bundled block-diffusion model) and ``ar_recipe``
(``airspace-ar``, its autoregressive twin)."""

from __future__ import annotations

from dataclasses import dataclass, field

from clover.airspace.tokenizer import build_default_tokenizer, default_added_tokens
from clover.data.tokenizer import CloverTokenizer
from clover.train.objective import MaskingConfig
from clover.train.recipes import Recipe
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
    tokenizer_vocab: int = 2048
    # train names coined from the tokenizer's own word pieces too (``phrasing.coined_word``): a
    # piece that never stands in a train name cannot be copied into one
    name_pieces: bool = True

    def tokenizer(self) -> CloverTokenizer:
        return build_default_tokenizer(self.tokenizer_vocab)

    def added_tokens(self) -> list[str]:
        return default_added_tokens()
