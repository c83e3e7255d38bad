"""The Qwen presets' parameter counts against the transformers language model of the same shape,
both built on the meta device (no memory): Clover's count is transformers' plus Clover's own GDN
parameters, with the vision tower and the MTP head left out as conversion leaves them out.
transformers is imported inside the functions (an optional dependency)."""

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


def hf_causal_lm(name: str):
    """The transformers causal LM (language model + head) of a preset's shape, on the meta device."""
    import transformers as tf  # optional: transformers (a test dependency)

    c = preset(name)
    kw = {k: getattr(c, k) for k in SHARED}
    family = FAMILY[name]
    if family == "qwen3_5":
        cls, cfg = tf.Qwen3_5ForCausalLM, tf.Qwen3_5TextConfig(**kw, intermediate_size=c.intermediate_size)
    elif family == "qwen3_next":
        cls, cfg = tf.Qwen3NextForCausalLM, tf.Qwen3NextConfig(**kw, **{k: getattr(c, k) for k in MOE})
    else:
        cls, cfg = tf.Qwen3_5MoeForCausalLM, tf.Qwen3_5MoeTextConfig(**kw, **{k: getattr(c, k) for k in MOE})
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
