"""Qwen3.5/3.6 hybrid MoE (``qwen3_5_moe``) → Clover: the one name map, the config, the plan.

Clover keeps Hugging Face module names, so the map is nearly the identity; what it adds is the
text prefix of each layout, stacking per-expert tensors into the packed layout, the tensors
that are skipped (vision tower, MTP head) and Clover's own parameters with their design init.
Every source tensor is used or skipped by a named rule; anything else is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from clover.convert.shards import ConversionError, SourceCheckpoint
from clover.model.config import ATTN, GDN, CloverConfig, ConfigError
from clover.model.model import CloverForBlockDiffusion

# -- the name map ------------------------------------------------------------------------------
# Source names after the text prefix is removed → Clover names. {i}: layer, {e}: expert.
# The part says where a source tensor lands: the whole tensor, or one expert's slice of a packed
# tensor (gate_up_proj[e] = [gate_e; up_e] along rows, down_proj[e] = down_e).
WHOLE, GATE, UP, DOWN = "whole", "gate", "up", "down"
_SAME_NAME = [
    "embed_tokens.weight",
    "norm.weight",
    "layers.{i}.input_layernorm.weight",
    "layers.{i}.post_attention_layernorm.weight",
    "layers.{i}.linear_attn.in_proj_qkv.weight",
    "layers.{i}.linear_attn.in_proj_z.weight",
    "layers.{i}.linear_attn.in_proj_b.weight",
    "layers.{i}.linear_attn.in_proj_a.weight",
    "layers.{i}.linear_attn.conv1d.weight",
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
    "layers.{i}.mlp.gate.weight",
    "layers.{i}.mlp.shared_expert.gate_proj.weight",
    "layers.{i}.mlp.shared_expert.up_proj.weight",
    "layers.{i}.mlp.shared_expert.down_proj.weight",
    "layers.{i}.mlp.shared_expert_gate.weight",
    "layers.{i}.mlp.experts.gate_up_proj",  # packed experts [E, 2I, H]
    "layers.{i}.mlp.experts.down_proj",  # [E, H, I]
]
NAME_MAP: dict[str, tuple[str, str]] = {
    **{s: ("model." + s, WHOLE) for s in _SAME_NAME},
    # one tensor per expert, stacked into the packed layout
    "layers.{i}.mlp.experts.{e}.gate_proj.weight": ("model.layers.{i}.mlp.experts.gate_up_proj", GATE),
    "layers.{i}.mlp.experts.{e}.up_proj.weight": ("model.layers.{i}.mlp.experts.gate_up_proj", UP),
    "layers.{i}.mlp.experts.{e}.down_proj.weight": ("model.layers.{i}.mlp.experts.down_proj", DOWN),
}
HEAD = "lm_head.weight"  # outside the text prefix in both layouts
TEXT_PREFIXES = {"model.language_model.": "vision+text (Qwen3_5MoeForConditionalGeneration)", "model.": "text-only"}
SKIP: dict[str, str] = {  # full source names
    r"^model\.visual\.": "vision tower (Clover is text-only)",
    r"^mtp\.": "multi-token-prediction head (block diffusion predicts in parallel without it)",
    r"(^|\.)rotary_emb\.inv_freq$": "rotary frequencies (recomputed from the config)",
}
# Clover's own parameters (design §2.2, §2.5 rule 6): how a converted model starts
NEW_PARAMS = {
    "conv_right": "zeros: the right-context conv starts off, the causal conv is the base's",
    "attn_scale": "√dk: in-block logits s_h·q̂·k̂ start as scaled dot products",
    "mem_key": "zeros: memory logit q̂·u_h + c_h + γ_h·ln n starts at γ_h·ln n",
    "mem_bias": "zeros",
    "mem_gamma": "ones: block-size calibration γ_h·ln n",
    "mem_scale": "ρ_h = RMS(v_h)/RMS(Sᵀq̂_h) measured on calibration tokens (1 without calibration)",
}
SUPPORTED = ("qwen3_5_moe", "qwen3_5_moe_text")


def _compile(template: str) -> re.Pattern:
    pat = re.escape(template).replace(r"\{i\}", r"(?P<i>\d+)").replace(r"\{e\}", r"(?P<e>\d+)")
    return re.compile(pat + "$")


_RULES = [(_compile(s), dst, part) for s, (dst, part) in NAME_MAP.items()]
_SKIPS = [(re.compile(p), why) for p, why in SKIP.items()]


# -- config ------------------------------------------------------------------------------------
def text_config(hf: dict) -> dict:
    """The text config of either layout, with a clear error for anything else."""
    mt = hf.get("model_type")
    if mt not in SUPPORTED:
        arch = hf.get("architectures")
        raise ConversionError(
            f"unsupported architecture: model_type {mt!r} {arch or ''}; clover convert reads the Qwen3.5/3.6 "
            f"hybrid MoE family ({' / '.join(SUPPORTED)})"
        )
    tc = hf.get("text_config") if mt == "qwen3_5_moe" else hf
    if not isinstance(tc, dict):
        raise ConversionError("config.json of a qwen3_5_moe model has no text_config")
    return tc


def clover_config(hf: dict, mask_id: int, vocab_size: int, block_size: int, specials: dict) -> CloverConfig:
    tc = text_config(hf)
    problems = []
    if hf.get("quantization_config") or tc.get("quantization_config"):
        problems.append("quantized checkpoints are not supported (convert the bf16 release)")
    if tc.get("hidden_act", "silu") != "silu":
        problems.append(f"hidden_act {tc['hidden_act']!r} (Clover uses silu)")
    if tc.get("attention_bias"):
        problems.append("attention_bias=true (Clover's attention has no biases)")
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
    keys = [
        "hidden_size", "num_hidden_layers", "rms_norm_eps", "initializer_range", "max_position_embeddings",
        "num_attention_heads", "num_key_value_heads", "head_dim", "linear_num_key_heads", "linear_num_value_heads",
        "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim", "num_experts",
        "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size", "router_aux_loss_coef",
    ]  # fmt: skip
    kw = {k: tc[k] for k in keys if k in tc}
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


# -- the plan ----------------------------------------------------------------------------------
@dataclass
class Target:
    """One Clover tensor and where it comes from: ``parts[(expert or None, part)] = source key``."""

    name: str
    shape: tuple[int, ...]
    parts: dict[tuple[int | None, str], str] = field(default_factory=dict)
    new: str | None = None  # a Clover-only parameter: its leaf name in NEW_PARAMS


@dataclass
class Plan:
    targets: list[Target]
    skipped: dict[str, list[str]]  # reason → source keys
    layout: str
    experts: str  # how the source stores experts: "packed" | "per-expert"
    grow: int = 0


def plan(config: CloverConfig, src: SourceCheckpoint, grow: int = 0) -> Plan:
    """Map every source tensor to its Clover tensor (or a skip rule) and check completeness and shapes."""
    with torch.device("meta"):
        model = CloverForBlockDiffusion(config)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if config.tie_word_embeddings:
        shapes.pop(HEAD)
    targets = {k: Target(k, s) for k, s in shapes.items()}
    prefix = "model.language_model." if any(k.startswith("model.language_model.") for k in src.keys()) else "model."
    skipped: dict[str, list[str]] = {}
    unmapped, unknown, dup = [], [], []
    experts = set()
    for key in src.keys():
        why = next((w for p, w in _SKIPS if p.search(key)), None)
        if why is None and key == HEAD and config.tie_word_embeddings:
            why = "lm_head tied to embed_tokens (tie_word_embeddings)"
        if why is not None:
            skipped.setdefault(why, []).append(key)
            continue
        rel = key[len(prefix) :] if key.startswith(prefix) else None
        hit = (HEAD, WHOLE, None) if key == HEAD else _match(rel) if rel is not None else None
        if hit is None:
            unmapped.append(key)
            continue
        name, part, e = hit
        if name not in targets:
            unknown.append(f"{key} → {name}")
            continue
        slot = (e, part)
        if slot in targets[name].parts:
            dup.append(key)
        targets[name].parts[slot] = key
        if ".mlp.experts." in name:
            experts.add("packed" if part == WHOLE else "per-expert")
    problems = []
    if unmapped:
        problems.append(f"{len(unmapped)} source tensors match no rule of the name map: {unmapped[:6]}")
    if unknown:
        problems.append(
            f"{len(unknown)} source tensors map to tensors this config does not have "
            f"(layer_types / num_hidden_layers disagree with the weights?): {unknown[:4]}"
        )
    if dup:
        problems.append(f"{len(dup)} source tensors map to an already-filled place: {dup[:4]}")
    for t in targets.values():
        leaf = t.name.rsplit(".", 1)[-1]
        if leaf in NEW_PARAMS and ".linear_attn." in t.name:
            t.new = leaf
            continue
        problems += _check(t, src, grow)
    if problems:
        raise ConversionError(f"{src.path}: " + "\n  ".join(["cannot convert:", *problems]))
    layout = TEXT_PREFIXES[prefix]
    return Plan(list(targets.values()), skipped, layout, "/".join(sorted(experts)) or "none", grow)


def _match(rel: str):
    for pat, dst, part in _RULES:
        m = pat.match(rel)
        if m:
            g = m.groupdict()
            return dst.format(i=g.get("i")), part, int(g["e"]) if "e" in g else None
    return None


def _check(t: Target, src: SourceCheckpoint, grow: int) -> list[str]:
    """Missing parts and shape mismatches of one target."""
    if not t.parts:
        return [f"no source tensor for {t.name}"]
    if (None, WHOLE) in t.parts:
        if len(t.parts) > 1:
            return [f"{t.name}: both a packed tensor and per-expert tensors in the source"]
        want = t.shape
        if grow and t.name in ("model.embed_tokens.weight", HEAD):
            want = (t.shape[0] - grow, *t.shape[1:])
        key = t.parts[(None, WHOLE)]
        got = src.shapes[key]
        return [] if got == want else [f"shape mismatch: {key} is {got}, the config implies {want} ({t.name})"]
    E, rows = t.shape[0], t.shape[1]
    need = (GATE, UP) if t.name.endswith("gate_up_proj") else (DOWN,)
    want = (rows // len(need), *t.shape[2:])
    missing = [f"{p}_proj of expert {e}" for e in range(E) for p in need if (e, p) not in t.parts]
    extra = sorted({e for e, _ in t.parts if e >= E})
    out = []
    if missing:
        out.append(f"{t.name}: missing {len(missing)} per-expert tensors ({missing[:3]})")
    if extra:
        out.append(f"{t.name}: experts {extra[:4]} beyond num_experts={E}")
    bad = [(k, src.shapes[k]) for k in t.parts.values() if src.shapes[k] != want]
    if bad:
        out.append(f"shape mismatch: {bad[0][0]} is {bad[0][1]}, the config implies {want} ({len(bad)} such)")
    return out
