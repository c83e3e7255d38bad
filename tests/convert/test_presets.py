"""Each Qwen preset has the parameters of the transformers language model built from the same
config (on the meta device: no memory): Clover's count is transformers' plus Clover's own GDN
parameters, with the vision tower and the MTP head left out as conversion leaves them out."""

import pytest
import torch

from clover.convert.qwen import NEW_PARAMS
from clover.model import CloverForBlockDiffusion, preset

FAMILY = {
    "qwen3.5-0.8b": "qwen3_5",
    "qwen3.5-2b": "qwen3_5",
    "qwen3.5-4b": "qwen3_5",
    "qwen3.5-9b": "qwen3_5",
    "qwen3.5-27b": "qwen3_5",
    "qwen3-next-80b-a3b": "qwen3_next",
    "qwen3.6-35b-a3b": "qwen3_5_moe",
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
    import transformers as tf

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
    return sum(p.numel() for p in {id(p): p for p in m.parameters()}.values())


@pytest.mark.parametrize("name", sorted(FAMILY))
def test_preset_parameter_count_equals_the_transformers_model(name):
    with torch.device("meta"):
        ours = CloverForBlockDiffusion(preset(name))
    clover_only = sum(p.numel() for n, p in ours.named_parameters() if n.rsplit(".", 1)[-1] in NEW_PARAMS)
    theirs = unique_numel(hf_causal_lm(name))
    total = ours.num_parameters()["total_params"]
    print(f"\n{name}: Clover {total:,} = transformers {theirs:,} + Clover-only {clover_only:,}")
    assert total == theirs + clover_only


def test_info_gives_the_source_models_count(capsys):
    """``clover info --preset qwen3.5-0.8b``: total less Clover's own parameters is transformers' count."""
    import json

    from clover.cli import main

    with pytest.raises(SystemExit) as e:
        main(["info", "--preset", "qwen3.5-0.8b", "--json"])
    assert e.value.code == 0
    info = json.loads(capsys.readouterr().out)
    assert info["total_params"] - info["clover_params"] == unique_numel(hf_causal_lm("qwen3.5-0.8b")) == 752_393_024
    assert info["num_experts"] == 0 and info["intermediate_size"] == 3584
