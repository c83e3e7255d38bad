"""The Qwen presets' parameter counts against the transformers language model of the same shape,
both built on the meta device (no memory): Clover's count is transformers' plus Clover's own GDN
parameters, with the vision tower and the MTP head left out as conversion leaves them out. The
transformers model of a Clover config's shape (``hf_text_config``) is also the decode benchmarks'
autoregressive twin. transformers is imported inside the functions (an optional dependency)."""

from __future__ import annotations

import torch

from clover.convert.qwen import clover_only_numel
from clover.model import CloverForBlockDiffusion, preset

# each Qwen preset and the transformers family (``model_type``) its text model comes from
FAMILY = {
    "qwen3.5-0.8b": "qwen3_5",
    "qwen3.5-2b": "qwen3_5",
    "qwen3.5-4b": "qwen3_5",
    "qwen3.5-9b": "qwen3_5",
    "qwen3.5-27b": "qwen3_5",
    "qwen3.6-35b-a3b": "qwen3_5_moe",
    "qwen3-next-80b-a3b": "qwen3_next",
}
SHARED = (
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
    "tie_word_embeddings",
    "layer_types",
    "max_position_embeddings",
)
MOE = ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size")


def hf_text_config(c, family: str = "qwen3_5_moe") -> tuple[type, object]:
    """The transformers causal-LM class of ``family`` (a ``model_type``) and its text config with
    the shape of Clover config ``c``."""
    import transformers as tf  # optional: transformers (a test dependency)

    kw = {k: getattr(c, k) for k in SHARED} | {"layer_types": list(c.layer_types)}
    rope = {"rope_type": "default", "rope_theta": c.rope_theta, "partial_rotary_factor": c.partial_rotary_factor}
    kw |= {"rms_norm_eps": c.rms_norm_eps, "rope_parameters": rope, "pad_token_id": 0, "eos_token_id": None}
    if family == "qwen3_5":
        return tf.Qwen3_5ForCausalLM, tf.Qwen3_5TextConfig(**kw, intermediate_size=c.intermediate_size)
    moe = {k: getattr(c, k) for k in MOE}
    if family == "qwen3_next":
        return tf.Qwen3NextForCausalLM, tf.Qwen3NextConfig(**kw, **moe)
    return tf.Qwen3_5MoeForCausalLM, tf.Qwen3_5MoeTextConfig(**kw, **moe)


def hf_causal_lm(name: str):
    """The transformers causal LM (language model + head) of a preset's shape, on the meta device."""
    cls, cfg = hf_text_config(preset(name), FAMILY[name])
    with torch.device("meta"):
        return cls(cfg)


def unique_numel(m) -> int:
    """Parameters of a module, a tied tensor counted once."""
    return sum(p.numel() for p in {id(p): p for p in m.parameters()}.values())


def preset_counts(name: str) -> dict:
    """A preset's counts: Clover's total, Clover's own GDN parameters, and the transformers model's."""
    with torch.device("meta"):
        ours = CloverForBlockDiffusion(preset(name))
    return {
        "clover": ours.num_parameters()["total_params"],
        "clover_only": clover_only_numel(ours),
        "transformers": unique_numel(hf_causal_lm(name)),
    }
