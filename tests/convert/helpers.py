"""Tiny random checkpoints to convert: Qwen3.5-MoE (both layouts, packed or per-expert experts),
dense Qwen3.5 (both layouts) and Qwen3-Next (fused GDN projections)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

TEXT = dict(
    vocab_size=128,
    hidden_size=32,
    num_hidden_layers=4,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=8,
    linear_value_head_dim=8,
    linear_conv_kernel_dim=4,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=16,
    shared_expert_intermediate_size=16,
    max_position_embeddings=512,
    initializer_range=0.2,  # large enough that every mechanism shows in the outputs
)
DENSE = {k: v for k, v in TEXT.items() if "expert" not in k and "moe" not in k} | dict(
    intermediate_size=48
)  # dense Qwen3.5
VISION = dict(
    depth=1,
    hidden_size=16,
    intermediate_size=32,
    num_heads=2,
    patch_size=4,
    out_hidden_size=32,
    num_position_embeddings=16,
    spatial_merge_size=2,
    temporal_patch_size=2,
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 96, 97, 98: the tokenizer uses 99 of 128 rows
CHAT_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


def hf_model(kind: str, seed: int = 0):
    """A random model, eval, fp32: ``Qwen3_5MoeForCausalLM`` ("text"), ``Qwen3_5MoeForConditionalGeneration``
    ("vl"), ``Qwen3_5ForCausalLM`` ("dense"), ``Qwen3_5ForConditionalGeneration`` ("dense_vl") or
    ``Qwen3NextForCausalLM`` ("next")."""
    import transformers as tf

    torch.manual_seed(seed)
    m = {
        "text": lambda: tf.Qwen3_5MoeForCausalLM(tf.Qwen3_5MoeTextConfig(**TEXT)),
        "vl": lambda: tf.Qwen3_5MoeForConditionalGeneration(
            tf.Qwen3_5MoeConfig(text_config=TEXT, vision_config=VISION)
        ),
        "dense": lambda: tf.Qwen3_5ForCausalLM(tf.Qwen3_5TextConfig(**DENSE)),
        "dense_vl": lambda: tf.Qwen3_5ForConditionalGeneration(
            tf.Qwen3_5Config(text_config=DENSE, vision_config=VISION)
        ),
        "next": lambda: tf.Qwen3NextForCausalLM(tf.Qwen3NextConfig(**TEXT)),
    }[kind]()
    with torch.no_grad():  # HF zero-inits norms and the router: perturb so that each one matters
        for n, p in m.named_parameters():
            if n.endswith(("norm.weight", "mlp.gate.weight", "dt_bias")):
                p.normal_(0, 0.3)
    return m.eval()


def text_model(m):
    """The language model (``...TextModel`` / ``Qwen3NextModel``) inside any layout."""
    return m.model.language_model if hasattr(m.model, "language_model") else m.model


def write_tokenizer(d: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(96)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(SPECIALS)
    tok.save(str(d / "tokenizer.json"))
    decoder = {
        str(96 + i): {
            "content": s,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for i, s in enumerate(SPECIALS)
    }
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "added_tokens_decoder": decoder}
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    (d / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [98, 96], "pad_token_id": 96}))


def save_hf(m, d: Path, max_shard_size: str | None = None) -> Path:
    """``save_pretrained`` (transformers writes experts one tensor per expert) + tokenizer files."""
    m.save_pretrained(d, **({"max_shard_size": max_shard_size} if max_shard_size else {}))
    write_tokenizer(d)
    return d


def save_packed(m, d: Path, n_shards: int = 3, extra: dict | None = None) -> Path:
    """The in-memory layout (packed experts ``gate_up_proj [E, 2I, H]``) in ``n_shards`` shards with an
    index, plus ``extra`` tensors (e.g. an MTP head), written by hand as a hub checkpoint would be."""
    d.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in m.state_dict().items()}
    state.update(extra or {})
    keys = list(state)
    files, weight_map = [], {}
    for i in range(n_shards):
        name = f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors"
        part = {k: state[k] for k in keys[i::n_shards]}
        save_file(part, d / name, metadata={"format": "pt"})
        files.append(name)
        weight_map.update({k: name for k in part})
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    m.config.save_pretrained(d)
    write_tokenizer(d)
    return d


def capture(m, ids: torch.Tensor):
    """Run the HF model with a cache; capture every layer's mixer and feed-forward input/output.

    Returns (cache, {layer: {"mixer": (x, y), "mlp": (x, y), "rope": (cos, sin) for attention}}, logits).
    """
    layers = text_model(m).layers
    seen: dict[int, dict] = {i: {} for i in range(len(layers))}
    hooks = []
    for i, layer in enumerate(layers):
        mixer = layer.linear_attn if hasattr(layer, "linear_attn") else layer.self_attn

        def on_mixer(mod, args, kwargs, out, i=i):
            x = kwargs.get("hidden_states", args[0] if args else None)
            seen[i]["mixer"] = (x.detach().clone(), (out[0] if isinstance(out, tuple) else out).detach().clone())
            if "position_embeddings" in kwargs:
                seen[i]["rope"] = kwargs["position_embeddings"]

        def on_mlp(mod, args, out, i=i):
            seen[i]["mlp"] = (args[0].detach().clone(), (out[0] if isinstance(out, tuple) else out).detach().clone())

        hooks.append(mixer.register_forward_hook(on_mixer, with_kwargs=True))
        hooks.append(layer.mlp.register_forward_hook(on_mlp))
    try:
        with torch.no_grad():
            out = m(input_ids=ids, use_cache=True)
    finally:
        for h in hooks:
            h.remove()
    return out.cache if hasattr(out, "cache") else out.past_key_values, seen, out.logits
