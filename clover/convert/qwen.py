"""The Qwen hybrid GDN/attention families → Clover: one declarative name map per family, the
config translation, and how a fused source tensor splits.

Families, by the ``model_type`` of config.json:

* ``qwen3_5_moe`` (Qwen3.5/3.6 MoE, e.g. 35B-A3B): GDN projections stored apart, MoE feed-forward;
* ``qwen3_5`` (the dense Qwen3.5 models, 0.8B to 27B): the same backbone with a dense SwiGLU MLP;
* ``qwen3_next`` (Qwen3-Next-80B-A3B): the MoE ancestor, whose GDN input projections are fused
  per key head (``in_proj_qkvz``, ``in_proj_ba``) and are split here into Clover's four.

Clover keeps Hugging Face module names, so each map is nearly the identity; what a map adds is
stacking per-expert tensors into the packed layout and the fused tensors' split. The text prefix
of each layout, the tensors that are skipped (vision tower, MTP head) and Clover's own parameters
with their starting values are shared by every family. Every source tensor is used or skipped by
a named rule (clover/convert/plan.py); anything else is an error.
"""

from __future__ import annotations

import torch

from clover.convert.shards import ConversionError
from clover.model.config import ATTN, GDN, CloverConfig, ConfigError

# -- the name maps -----------------------------------------------------------------------------
# Source names after the text prefix → Clover names ({i}: layer, {e}: expert). A value is the
# Clover name (the whole tensor), or (name, part): one expert's slice of a packed tensor
# (gate_up_proj[e] = [gate_e; up_e] along rows, down_proj[e] = down_e), or a list of
# (name, part) for a fused source tensor that several Clover tensors are cut from (split_rows).
WHOLE, GATE, UP, DOWN = "whole", "gate", "up", "down"
QKV, Z, B, A = "qkv", "z", "b", "a"  # Qwen3-Next's fused in_proj_qkvz / in_proj_ba, split
SPLIT_PARTS = (QKV, Z, B, A)


def _same(*names: str) -> dict[str, str]:
    return {n: "model." + n for n in names}


_BACKBONE = _same(
    "embed_tokens.weight",
    "norm.weight",
    "layers.{i}.input_layernorm.weight",
    "layers.{i}.post_attention_layernorm.weight",
    "layers.{i}.linear_attn.conv1d.weight",  # channels [q, k, v] in every family
    "layers.{i}.linear_attn.dt_bias",
    "layers.{i}.linear_attn.A_log",
    "layers.{i}.linear_attn.norm.weight",
    "layers.{i}.linear_attn.out_proj.weight",
    "layers.{i}.self_attn.q_proj.weight",
    "layers.{i}.self_attn.k_proj.weight",
    "layers.{i}.self_attn.v_proj.weight",
    "layers.{i}.self_attn.o_proj.weight",
    "layers.{i}.self_attn.q_norm.weight",
    "layers.{i}.self_attn.k_norm.weight",
)
_GDN_APART = _same(
    "layers.{i}.linear_attn.in_proj_qkv.weight",
    "layers.{i}.linear_attn.in_proj_z.weight",
    "layers.{i}.linear_attn.in_proj_b.weight",
    "layers.{i}.linear_attn.in_proj_a.weight",
)
_GDN_FUSED = {
    "layers.{i}.linear_attn.in_proj_qkvz.weight": [
        ("model.layers.{i}.linear_attn.in_proj_qkv.weight", QKV),
        ("model.layers.{i}.linear_attn.in_proj_z.weight", Z),
    ],
    "layers.{i}.linear_attn.in_proj_ba.weight": [
        ("model.layers.{i}.linear_attn.in_proj_b.weight", B),
        ("model.layers.{i}.linear_attn.in_proj_a.weight", A),
    ],
}
_MOE = {
    **_same(
        "layers.{i}.mlp.gate.weight",
        "layers.{i}.mlp.shared_expert.gate_proj.weight",
        "layers.{i}.mlp.shared_expert.up_proj.weight",
        "layers.{i}.mlp.shared_expert.down_proj.weight",
        "layers.{i}.mlp.shared_expert_gate.weight",
        "layers.{i}.mlp.experts.gate_up_proj",  # packed experts [E, 2I, H]
        "layers.{i}.mlp.experts.down_proj",  # [E, H, I]
    ),
    # one tensor per expert, stacked into the packed layout
    "layers.{i}.mlp.experts.{e}.gate_proj.weight": ("model.layers.{i}.mlp.experts.gate_up_proj", GATE),
    "layers.{i}.mlp.experts.{e}.up_proj.weight": ("model.layers.{i}.mlp.experts.gate_up_proj", UP),
    "layers.{i}.mlp.experts.{e}.down_proj.weight": ("model.layers.{i}.mlp.experts.down_proj", DOWN),
}
_DENSE = _same("layers.{i}.mlp.gate_proj.weight", "layers.{i}.mlp.up_proj.weight", "layers.{i}.mlp.down_proj.weight")

NAME_MAPS: dict[str, dict] = {
    "qwen3_5_moe": {**_BACKBONE, **_GDN_APART, **_MOE},
    "qwen3_5": {**_BACKBONE, **_GDN_APART, **_DENSE},
    "qwen3_next": {**_BACKBONE, **_GDN_FUSED, **_MOE},
}
NAME_MAP = NAME_MAPS["qwen3_5_moe"]
# model_type → family; the first two families nest the language model's config in text_config
FAMILY_OF = {
    "qwen3_5_moe": "qwen3_5_moe",
    "qwen3_5_moe_text": "qwen3_5_moe",
    "qwen3_5": "qwen3_5",
    "qwen3_5_text": "qwen3_5",
    "qwen3_next": "qwen3_next",
}
NESTED = ("qwen3_5_moe", "qwen3_5")
DENSE_FAMILIES = ("qwen3_5",)

# the text config's fields that a CloverConfig holds under the same name and meaning (read as they
# are; the others are read one by one in ``clover_config``)
SAME_NAMED = (
    "hidden_size",
    "num_hidden_layers",
    "rms_norm_eps",
    "initializer_range",
    "max_position_embeddings",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "router_aux_loss_coef",
    "intermediate_size",
)

HEAD = "lm_head.weight"  # outside the text prefix in every layout
TEXT_PREFIXES = {"model.language_model.": "vision+text", "model.": "text-only"}
SKIP: dict[str, str] = {  # full source names → why; each reason is printed with its count
    r"^model\.visual\.": "vision tower left out (Clover is text-only)",
    r"^mtp\.": "multi-token-prediction head dropped (block diffusion predicts a block in parallel without it)",
    r"(^|\.)rotary_emb\.inv_freq$": "rotary frequencies (recomputed from the config)",
}
# Clover's own parameters (docs/architecture.md, Rule 6): how a converted model starts
NEW_PARAMS = {
    "conv_right": "zeros: the right-context conv starts off, the causal conv is the base's",
    "attn_scale": "√dk: in-block logits s_h·q̂·k̂ start as scaled dot products",
    "mem_key": "zeros: memory logit q̂·u_h + c_h + γ_h·ln n starts at γ_h·ln n",
    "mem_bias": "zeros",
    "mem_gamma": "ones: block-size calibration γ_h·ln n",
    "mem_scale": "ρ_h = RMS(v_h)/RMS(Sᵀq̂_h) measured on calibration tokens (1 without calibration)",
}


def clover_only_numel(model) -> int:
    """How many of ``model``'s parameters are Clover's own (``NEW_PARAMS``): what it has beyond the
    model it was converted from."""
    return sum(p.numel() for n, p in model.named_parameters() if n.rsplit(".", 1)[-1] in NEW_PARAMS)


def targets_of(value) -> list[tuple[str, str]]:
    """A name-map value as its list of (Clover name, part)."""
    if isinstance(value, str):
        return [(value, WHOLE)]
    return [value] if isinstance(value[0], str) else list(value)


# -- fused tensors -----------------------------------------------------------------------------
def split_rows(part: str, c: CloverConfig) -> tuple[int, torch.Tensor]:
    """Qwen3-Next's fused GDN projections hold, for each key head g (Hk of them, with r = Hv/Hk
    value heads each), the rows ``[q_g (dk), k_g (dk), v_g (r·dv), z_g (r·dv)]`` (in_proj_qkvz)
    and ``[b_g (r), a_g (r)]`` (in_proj_ba); value head g·r + j is the j-th of group g.

    Returns (the fused tensor's row count, the source rows ``[n]`` that make Clover's tensor in
    order): in_proj_qkv is all q, then all k, then all v (key-head order), in_proj_z all z."""
    Hk, dk, dv = c.linear_num_key_heads, c.linear_key_head_dim, c.linear_value_head_dim
    r = c.linear_num_value_heads // Hk
    if part in (QKV, Z):
        sizes, pieces = [dk, dk, r * dv, r * dv], {QKV: (0, 1, 2), Z: (3,)}[part]
    else:
        sizes, pieces = [r, r], {B: (0,), A: (1,)}[part]
    group = sum(sizes)  # rows per key head
    starts = [sum(sizes[:p]) for p in range(len(sizes))]
    rows = [torch.arange(sizes[p]) + g * group + starts[p] for p in pieces for g in range(Hk)]
    return Hk * group, torch.cat(rows)


# -- config ------------------------------------------------------------------------------------
def family_of(hf: dict) -> str:
    """The family of a source config.json, with a clear error naming the supported ones."""
    mt = hf.get("model_type")
    if mt not in FAMILY_OF:
        arch = hf.get("architectures")
        raise ConversionError(
            f"unsupported architecture: model_type {mt!r} {arch or ''}; clover convert reads "
            f"{', '.join(FAMILY_OF)} (the Qwen3.5/3.6 hybrid models, dense and MoE, and Qwen3-Next)"
        )
    return FAMILY_OF[mt]


def text_config(hf: dict) -> dict:
    """The language model's config of any supported layout."""
    mt = hf.get("model_type")
    family_of(hf)
    tc = hf.get("text_config") if mt in NESTED else hf
    if not isinstance(tc, dict):
        raise ConversionError(f"config.json of a {mt} model has no text_config")
    return tc


def clover_config(hf: dict, mask_id: int, vocab_size: int, block_size: int, specials: dict) -> CloverConfig:
    family, tc = family_of(hf), text_config(hf)
    problems = []
    if hf.get("quantization_config") or tc.get("quantization_config"):
        problems.append("quantized checkpoints are not supported (convert the bf16 release)")
    if tc.get("hidden_act", "silu") != "silu":
        problems.append(f"hidden_act {tc['hidden_act']!r} (Clover uses silu)")
    if tc.get("attention_bias"):
        problems.append("attention_bias=true (Clover's attention has no biases)")
    if tc.get("attn_output_gate", True) is False:
        problems.append("attn_output_gate=false (Clover's attention always has the sigmoid output gate)")
    if family not in DENSE_FAMILIES and tc.get("norm_topk_prob", True) is False:
        problems.append("norm_topk_prob=false (Clover renormalises the top-k router weights)")
    if family == "qwen3_next" and (tc.get("mlp_only_layers") or tc.get("decoder_sparse_step", 1) != 1):
        problems.append(
            "dense MLP layers among MoE layers (mlp_only_layers / decoder_sparse_step): Clover's "
            "layers are all MoE or all dense"
        )
    rope = tc.get("rope_parameters") or tc.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        problems.append(f"rope_type {rope_type!r} (Clover implements the default partial RoPE)")
    n_layers = tc.get("num_hidden_layers", 40)
    layer_types = tc.get("layer_types")
    if layer_types is None:
        k = tc.get("full_attention_interval", 4)
        layer_types = [ATTN if (i + 1) % k == 0 else GDN for i in range(n_layers)]
    if set(layer_types) - {ATTN, GDN}:
        problems.append(f"layer types {sorted(set(layer_types) - {ATTN, GDN})}")
    if problems:
        raise ConversionError("cannot convert this checkpoint: " + "; ".join(problems))
    kw = {k: tc[k] for k in SAME_NAMED if k in tc}
    if family in DENSE_FAMILIES:
        kw["num_experts"] = 0
    tie = hf.get("tie_word_embeddings", tc.get("tie_word_embeddings", False))
    try:
        return CloverConfig(
            **kw,
            vocab_size=vocab_size,
            layer_types=layer_types,
            full_attention_interval=tc.get("full_attention_interval", 4),
            tie_word_embeddings=bool(tie),
            partial_rotary_factor=rope.get("partial_rotary_factor", tc.get("partial_rotary_factor", 0.25)),
            rope_theta=float(rope.get("rope_theta", tc.get("rope_theta", 10000.0))),
            mask_token_id=mask_id,
            block_size=block_size,
            max_block_size=max(128, block_size),
            shift_logits=True,  # the AR base predicts the next token
            **specials,
        )
    except (ConfigError, TypeError) as e:
        raise ConversionError(f"the source config does not describe a valid Clover model: {e}") from None
