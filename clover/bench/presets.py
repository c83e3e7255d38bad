"""The Qwen presets' parameter counts against the transformers language model of the same shape,
both built on the meta device (no memory): Clover's count is transformers' plus Clover's own GDN
parameters, with the vision tower and the MTP head left out as conversion leaves them out. The
transformers model of a Clover config's shape (``hf_text_config``) is also the decode benchmarks'
autoregressive twin. transformers is imported inside the functions (an optional dependency)."""

from __future__ import annotations

import torch

from clover.convert.qwen import SAME_NAMED, clover_only_numel
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


def hf_text_config(c, family: str = "qwen3_5_moe") -> tuple[type, object]:
    """The transformers causal-LM class of ``family`` (a ``model_type``) and its text config with
    the shape of Clover config ``c``: what ``clover convert`` reads, written back (``SAME_NAMED``
    where the family's config has the field, then the fields conversion reads one by one)."""
    import transformers as tf  # optional: transformers (a test dependency)

    cls, cfg_cls = {
        "qwen3_5": (tf.Qwen3_5ForCausalLM, tf.Qwen3_5TextConfig),
        "qwen3_next": (tf.Qwen3NextForCausalLM, tf.Qwen3NextConfig),
        "qwen3_5_moe": (tf.Qwen3_5MoeForCausalLM, tf.Qwen3_5MoeTextConfig),
    }[family]
    known = cfg_cls().to_dict()
    kw = {k: getattr(c, k) for k in SAME_NAMED if k in known}
    rope = {"rope_type": "default", "rope_theta": c.rope_theta, "partial_rotary_factor": c.partial_rotary_factor}
    kw |= {"vocab_size": c.vocab_size, "layer_types": list(c.layer_types), "tie_word_embeddings": c.tie_word_embeddings}
    kw |= {"rope_parameters": rope, "pad_token_id": 0, "eos_token_id": None}
    return cls, cfg_cls(**kw)


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
