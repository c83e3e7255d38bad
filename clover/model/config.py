"""Typed model configuration with named presets.

Field names follow transformers' ``qwen3_5_moe`` / ``qwen3_5`` text configs, so a converted
checkpoint's config reads the same; the Clover-only fields are at the end. ``num_experts = 0``
gives every layer a dense SwiGLU feed-forward of width ``intermediate_size`` (the dense Qwen3.5
models); otherwise every layer is a mixture of experts.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

GDN = "linear_attention"
ATTN = "full_attention"
GDN_BLOCK_MIXINGS = ("bidirectional", "causal")  # see ``CloverConfig.gdn_block_mixing``


class ConfigError(ValueError):
    """A configuration that cannot describe a valid model."""


@dataclass
class CloverConfig:
    vocab_size: int = 248320
    hidden_size: int = 2048
    num_hidden_layers: int = 40
    layer_types: list[str] | None = None  # None: 3 GDN layers then 1 attention, repeated
    full_attention_interval: int = 4
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    initializer_range: float = 0.02
    max_position_embeddings: int = 262144
    # block-causal gated attention
    num_attention_heads: int = 16
    num_key_value_heads: int = 2
    head_dim: int = 256
    partial_rotary_factor: float = 0.25
    rope_theta: float = 10_000_000.0
    # Gated DeltaNet
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 32
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_conv_kernel_dim: int = 4
    # feed-forward: a mixture of experts, or with num_experts = 0 a dense MLP of intermediate_size
    num_experts: int = 256
    num_experts_per_tok: int = 8
    moe_intermediate_size: int = 512
    shared_expert_intermediate_size: int = 512
    router_aux_loss_coef: float = 0.001
    intermediate_size: int = 0  # the dense MLP's width (used only when num_experts = 0)
    # tokens
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None
    # Clover
    mask_token_id: int = 0
    shift_logits: bool = True  # logit i-1 predicts token i (as the AR base); False: i predicts i
    block_size: int = 32  # default decoding block size
    max_block_size: int = 128  # largest block the model accepts
    # GDN ablations (clover/model/gdn.py); the defaults are the Clover design
    gdn_block_mixing: str = "bidirectional"  # "causal": the block runs Qwen3.5's causal delta rule
    gdn_right_conv: bool = True  # False: no right-context conv branch (block features = causal)
    gdn_block_calibration: bool = True  # False: no γ_h·ln n term in the memory logit
    model_type: str = "clover"
    # weight-only quantization header (docs/quantization.md; clover/model/quant.py): None for a
    # full-precision checkpoint, else {"bits", "group_size", "scheme", "modules"}
    quantization: dict | None = None
    extra: dict = field(default_factory=dict)  # free-form provenance (conversion source, recipe)

    def __post_init__(self) -> None:
        if self.layer_types is None:
            n = self.full_attention_interval
            self.layer_types = [ATTN if (i + 1) % n == 0 else GDN for i in range(self.num_hidden_layers)]
        self.layer_types = list(self.layer_types)
        problems = []
        if len(self.layer_types) != self.num_hidden_layers:
            problems.append(
                f"layer_types has {len(self.layer_types)} entries, num_hidden_layers is {self.num_hidden_layers}"
            )
        bad = sorted(set(self.layer_types) - {GDN, ATTN})
        if bad:
            problems.append(f"unknown layer types {bad}; use {GDN!r} or {ATTN!r}")
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "linear_num_key_heads",
            "linear_num_value_heads",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "linear_conv_kernel_dim",
            *(("num_experts_per_tok", "moe_intermediate_size") if self.num_experts else ("intermediate_size",)),
            "block_size",
            "max_block_size",
        ):
            if not isinstance(getattr(self, name), int) or getattr(self, name) <= 0:
                problems.append(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if not isinstance(self.num_experts, int) or isinstance(self.num_experts, bool) or self.num_experts < 0:
            problems.append(f"num_experts must be an integer >= 0 (0: dense feed-forward), got {self.num_experts!r}")
        if self.gdn_block_mixing not in GDN_BLOCK_MIXINGS:
            problems.append(f"gdn_block_mixing must be one of {list(GDN_BLOCK_MIXINGS)}, got {self.gdn_block_mixing!r}")
        for name in ("gdn_right_conv", "gdn_block_calibration"):
            if not isinstance(getattr(self, name), bool):
                problems.append(f"{name} must be true or false, got {getattr(self, name)!r}")
        if not problems:
            if self.num_attention_heads % self.num_key_value_heads:
                problems.append("num_attention_heads must be a multiple of num_key_value_heads")
            if self.linear_num_value_heads % self.linear_num_key_heads:
                problems.append("linear_num_value_heads must be a multiple of linear_num_key_heads")
            if self.num_experts and self.num_experts_per_tok > self.num_experts:
                problems.append("num_experts_per_tok cannot exceed num_experts")
            rd = int(self.head_dim * self.partial_rotary_factor)
            if rd % 2 or not 0 < self.partial_rotary_factor <= 1:
                problems.append(f"rotary dim head_dim*partial_rotary_factor={rd} must be even and > 0")
            if not 0 <= self.mask_token_id < self.vocab_size:
                problems.append(f"mask_token_id {self.mask_token_id} outside vocabulary of {self.vocab_size}")
            if self.block_size > self.max_block_size:
                problems.append(f"block_size {self.block_size} exceeds max_block_size {self.max_block_size}")
        if self.quantization is not None:
            problems += quantization_problems(self.quantization)
        if problems:
            raise ConfigError("invalid Clover config: " + "; ".join(problems))

    # -- helpers ---------------------------------------------------------------------------
    @property
    def layer_pattern(self) -> str:
        """The layers as letters, first to last: G for a GDN layer, A for an attention layer."""
        return "".join("A" if t == ATTN else "G" for t in self.layer_types)

    @property
    def eos_ids(self) -> list[int]:
        e = self.eos_token_id
        return [] if e is None else ([e] if isinstance(e, int) else list(e))

    def check_block_size(self, block_size: int) -> int:
        """Refuse a block size this model cannot take, with a clear message."""
        if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size <= 0:
            raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
        if block_size > self.max_block_size:
            raise ValueError(f"block_size {block_size} exceeds this model's max_block_size {self.max_block_size}")
        return block_size

    def all_attention(self) -> CloverConfig:
        """The same shape with every layer attention (a Fast-dLLM-v2-style baseline)."""
        return self.replace(layer_types=[ATTN] * self.num_hidden_layers)

    def replace(self, **changes) -> CloverConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> CloverConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown config keys {unknown}")
        if d.get("model_type", "clover") != "clover":
            raise ConfigError(f"model_type is {d.get('model_type')!r}, expected 'clover' (convert it first)")
        return cls(**d)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> CloverConfig:
        try:
            d = json.loads(Path(path).read_text())
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: not valid JSON ({e})") from None
        if not isinstance(d, dict):
            raise ConfigError(f"{path}: expected a JSON object")
        return cls.from_dict(d)


# the quantization schemes (docs/quantization.md): bits → scheme name
QUANT_SCHEMES = {8: "symmetric", 4: "asymmetric"}


def quantization_problems(q) -> list[str]:
    """What is wrong with a ``quantization`` header on its own (the modules it names are checked
    against the model when a checkpoint loads: clover.model.quant.check_header)."""
    if not isinstance(q, dict):
        return [f"quantization header must be an object, got {type(q).__name__}"]
    out = []
    unknown = sorted(set(q) - {"bits", "group_size", "scheme", "modules"})
    missing = sorted({"bits", "group_size", "scheme", "modules"} - set(q))
    if unknown:
        out.append(f"quantization header has unknown keys {unknown}")
    if missing:
        out.append(f"quantization header lacks {missing}")
    bits, group, scheme, modules = (q.get(k) for k in ("bits", "group_size", "scheme", "modules"))
    if "bits" in q and (isinstance(bits, bool) or bits not in QUANT_SCHEMES):
        out.append(f"quantization bits must be 8 or 4, got {bits!r}")
    elif "scheme" in q and scheme != QUANT_SCHEMES.get(bits):
        out.append(f"quantization scheme for {bits}-bit weights must be {QUANT_SCHEMES.get(bits)!r}, got {scheme!r}")
    if "group_size" in q and (not isinstance(group, int) or isinstance(group, bool) or group < 0):
        out.append(f"quantization group_size must be an integer >= 0 (0: one group per row), got {group!r}")
    if "modules" in q and (not isinstance(modules, list) or not all(isinstance(m, str) for m in modules)):
        out.append("quantization modules must be a list of module names")
    return out


PRESETS: dict[str, dict] = {
    # for tests: every mechanism present, tiny dims
    "tiny": dict(
        vocab_size=97,
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=16,
        max_position_embeddings=8192,
        rope_theta=10000.0,
        mask_token_id=96,
        block_size=8,
    ),
    # a CPU-sized model (the default model's shape family)
    "small": dict(
        vocab_size=4096,
        hidden_size=256,
        num_hidden_layers=8,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=64,
        linear_value_head_dim=64,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=256,
        shared_expert_intermediate_size=256,
        max_position_embeddings=32768,
        rope_theta=1_000_000.0,
        mask_token_id=4095,
    ),
    # big enough that the matmuls dominate a CPU decode step (~240 M parameters, ~60 M active):
    # where weight quantization's speed shows (clover bench quant)
    "medium": dict(
        vocab_size=4096,
        hidden_size=1024,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=128,
        linear_num_key_heads=4,
        linear_num_value_heads=8,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        num_experts=16,
        num_experts_per_tok=2,
        moe_intermediate_size=512,
        shared_expert_intermediate_size=1024,
        max_position_embeddings=32768,
        rope_theta=1_000_000.0,
        mask_token_id=4095,
    ),
    # the full Clover-35B-A3B shape (Qwen3.6-35B-A3B backbone); all defaults
    "qwen3.6-35b-a3b": dict(mask_token_id=248319),
    # the dense Qwen3.5 language models (their text_config; vision tower and MTP head not counted).
    # The 2B's tied head is taken from its neighbours (0.8B and 4B tie theirs); the others are as
    # their configs give them. Head dims 256 (attention) and 128 (GDN) as in every size.
    **{
        name: dict(
            num_experts=0,
            hidden_size=hidden,
            intermediate_size=ffn,
            num_hidden_layers=layers,
            num_attention_heads=q_heads,
            num_key_value_heads=kv_heads,
            linear_num_key_heads=16,
            linear_num_value_heads=v_heads,
            tie_word_embeddings=tied,
            mask_token_id=248319,
        )
        for name, hidden, ffn, layers, q_heads, kv_heads, v_heads, tied in (
            ("qwen3.5-0.8b", 1024, 3584, 24, 8, 2, 16, True),
            ("qwen3.5-2b", 2048, 6144, 24, 8, 2, 16, True),
            ("qwen3.5-4b", 2560, 9216, 32, 16, 4, 32, True),
            ("qwen3.5-9b", 4096, 12288, 32, 16, 4, 32, False),
            ("qwen3.5-27b", 5120, 17408, 64, 24, 4, 48, False),
        )
    },
    # Qwen3-Next-80B-A3B: the MoE ancestor (fused GDN projections in its checkpoints, split on conversion)
    "qwen3-next-80b-a3b": dict(
        vocab_size=151936,
        num_hidden_layers=48,
        linear_num_value_heads=32,
        num_experts=512,
        num_experts_per_tok=10,
        intermediate_size=5120,
        rope_theta=5_000_000.0,  # as its config.json gives it (not the 1e7 of Qwen3.5)
        mask_token_id=151935,
    ),
}


def preset(name: str, **overrides) -> CloverConfig:
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}")
    return CloverConfig(**{**PRESETS[name], **overrides})
