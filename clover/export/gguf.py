"""``export_gguf``: a Clover checkpoint → one GGUF file that Clover's llama.cpp back end runs
(``native/llamacpp``, ``clover.backends.llamacpp``; docs/llama-cpp.md).

The file carries the architecture ``clover`` with every hyper-parameter the graph needs
(``clover.*`` keys, plus the whole config as JSON in ``clover.config``), the tokenizer (gguf's
standard token list and merges, and the ``tokenizer.json`` itself as ``tokenizer.huggingface.json``
so it reloads exactly), the chat template, and the weights under llama.cpp-style names
(``blk.N.attn_q.weight`` …, table ``_LAYER_NAMES``). Two conventions of llama.cpp's Qwen3.5 files
are kept: zero-centred RMSNorm weights are stored as ``1 + w`` and the GDN decay as
``ssm_a = -exp(A_log)``.

Types: ``f32``; ``f16``, ``q8_0`` and ``q4_k`` for the weight matrices (norms, gates, router,
convolutions and Clover's per-head parameters stay f32). ``q8_0`` comes from the ``gguf``
package; ``q4_k``, which that package cannot quantize, from ggml's own quantizer in the built
back end (``make llama-cpp``). A matrix whose rows do not split into the type's blocks falls back
to ``q8_0``, else ``f16``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from clover.backends.llamacpp import LlamaCppError, quantize
from clover.data.chat import CLOVER_TEMPLATE
from clover.export.hf_folder import ExportError, checked_source, stop_ids
from clover.model.config import ATTN, CloverConfig
from clover.model.io import CheckpointError, load_model

ARCH = "clover"
GGUF_TYPES = ("f32", "f16", "q8_0", "q4_k")
GGUF_VERSION = 1  # clover.gguf_version: bumped when the layout below changes incompatibly
# values per quantization block of each type (a matrix row must be a whole number of blocks)
BLOCK = {"f32": 1, "f16": 1, "q8_0": 32, "q4_k": 256}

# per-layer Clover name → GGUF name (after ``model.layers.N.`` / before ``blk.N.``)
_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",  # query and output gate, interleaved per head
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "linear_attn.in_proj_qkv.weight": "attn_qkv.weight",
    "linear_attn.in_proj_z.weight": "attn_gate.weight",
    "linear_attn.in_proj_b.weight": "ssm_beta.weight",
    "linear_attn.in_proj_a.weight": "ssm_alpha.weight",
    "linear_attn.conv1d.weight": "ssm_conv1d.weight",
    "linear_attn.conv_right": "ssm_conv_right.weight",
    "linear_attn.dt_bias": "ssm_dt.bias",
    "linear_attn.A_log": "ssm_a",
    "linear_attn.norm.weight": "ssm_norm.weight",
    "linear_attn.out_proj.weight": "ssm_out.weight",
    "linear_attn.attn_scale": "ssm_mix_scale",
    "linear_attn.mem_key": "ssm_mem_key",
    "linear_attn.mem_bias": "ssm_mem_bias",
    "linear_attn.mem_gamma": "ssm_mem_gamma",
    "linear_attn.mem_scale": "ssm_mem_scale",
    "mlp.gate.weight": "ffn_gate_inp.weight",
    "mlp.experts.down_proj": "ffn_down_exps.weight",
    "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
    "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
_GLOBAL_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
# zero-centred RMSNorms: stored as 1 + w
_PLUS_ONE = ("attn_norm.weight", "post_attention_norm.weight", "attn_q_norm.weight", "attn_k_norm.weight")
# the matrices a quantized type applies to (everything else stays f32)
_MATRICES = (
    "token_embd.weight",
    "output.weight",
    "attn_q.weight",
    "attn_k.weight",
    "attn_v.weight",
    "attn_output.weight",
    "attn_qkv.weight",
    "attn_gate.weight",
    "ssm_out.weight",
    "ffn_gate_exps.weight",
    "ffn_up_exps.weight",
    "ffn_down_exps.weight",
    "ffn_gate_shexp.weight",
    "ffn_up_shexp.weight",
    "ffn_down_shexp.weight",
    "ffn_gate.weight",
    "ffn_up.weight",
    "ffn_down.weight",
)


@dataclass
class GGUFReport:
    out: Path
    type: str
    tensors: int
    total_bytes: int
    seconds: float
    types: dict[str, int] = field(default_factory=dict)  # GGML type name → tensor count
    # weight matrices written coarser than --type: fallback type → {row length: count}
    fallbacks: dict[str, dict[int, int]] = field(default_factory=dict)

    def summary(self) -> str:
        kinds = ", ".join(f"{n} {t}" for t, n in sorted(self.types.items()))
        lines = [f"exported {self.tensors} tensors ({self.total_bytes / 2**20:.1f} MiB; {kinds}) → {self.out}"]
        if self.type != "f32" and self.types.get("f32"):
            lines.append(
                f"  {self.types['f32']} f32: norms, router, GDN gates and convolutions, per-head parameters "
                "(always f32)"
            )
        for kind, widths in sorted(self.fallbacks.items()):
            rows = " and ".join(f"{w}" for w in sorted(widths))
            n = sum(widths.values())
            lines.append(
                f"  {n} weight {'matrix' if n == 1 else 'matrices'} in {kind}, not {self.type}: their rows of {rows} "
                f"values are not whole {self.type} blocks of {BLOCK[self.type]}"
            )
        return "\n".join([*lines, f"  {self.seconds:.1f} s"])


def gguf_problems(config: CloverConfig) -> list[str]:
    """Why Clover's llama.cpp graph cannot run this model (empty when it can)."""
    problems = []
    if config.quantization is not None:
        problems.append(
            f"a quantized checkpoint (int{config.quantization['bits']}) cannot be exported to GGUF: "
            "export the checkpoint it was quantized from and pick --type"
        )
    if config.gdn_block_mixing != "bidirectional":
        problems.append(
            f"gdn_block_mixing={config.gdn_block_mixing!r} is not implemented by the llama.cpp graph "
            "(only 'bidirectional')"
        )
    has_gdn = any(t != ATTN for t in config.layer_types)
    if has_gdn and config.linear_key_head_dim != config.linear_value_head_dim:
        problems.append(
            f"linear_key_head_dim={config.linear_key_head_dim} differs from linear_value_head_dim="
            f"{config.linear_value_head_dim}: ggml_gated_delta_net needs square GDN states"
        )
    if config.linear_conv_kernel_dim < 2:
        problems.append(f"linear_conv_kernel_dim={config.linear_conv_kernel_dim}: the graph needs a kernel of >= 2")
    return problems


def gguf_tensors(config: CloverConfig, state: dict) -> dict[str, np.ndarray]:
    """The state dict (fp32 tensors) under GGUF names, as float32 numpy arrays in the order
    written. Every Clover tensor must be used exactly once."""
    out: dict[str, np.ndarray] = {}
    used = set()

    def put(name: str, key: str, array=None) -> None:
        used.add(key)
        out[name] = np.ascontiguousarray(state[key].float().numpy() if array is None else array, dtype=np.float32)

    for key, name in _GLOBAL_NAMES.items():
        put(name, key, (1.0 + state[key].float()).numpy() if name == "output_norm.weight" else None)
    put("output.weight", "lm_head.weight" if "lm_head.weight" in state else "model.embed_tokens.weight")
    for i in range(config.num_hidden_layers):
        pre = f"model.layers.{i}."
        for key, name in _LAYER_NAMES.items():
            if pre + key not in state:
                continue
            t = state[pre + key].float()
            if name in _PLUS_ONE:
                t = 1.0 + t
            elif name == "ssm_a":  # -exp(A_log), rounded once from float64
                t = -t.double().exp()
            elif name == "ssm_conv1d.weight":
                t = t[:, 0].T  # [C, 1, K] → [K, C]: tap j is the contiguous row j
            elif name == "ssm_conv_right.weight":
                t = t.T  # [C, K-1] → [K-1, C]
            put(f"blk.{i}.{name}", pre + key, t.numpy())
        gate_up = pre + "mlp.experts.gate_up_proj"
        if gate_up in state:
            gate, up = state[gate_up].float().chunk(2, 1)  # [E, 2I, H] → two [E, I, H]
            put(f"blk.{i}.ffn_gate_exps.weight", gate_up, gate.numpy())
            out[f"blk.{i}.ffn_up_exps.weight"] = np.ascontiguousarray(up.numpy())
    left = sorted(set(state) - used - {"lm_head.weight"})
    if left:
        raise ExportError(f"the GGUF layout has no place for tensors {left[:5]}{' …' if len(left) > 5 else ''}")
    return out


def tensor_type(name: str, shape: tuple[int, ...], want: str) -> str:
    """The type one tensor is written in: ``want`` for a weight matrix whose rows split into
    ``want``'s blocks, a coarser fallback when they do not, f32 for everything else."""
    if want == "f32" or name.rsplit(".", 2)[-2] + "." + name.rsplit(".", 1)[-1] not in _MATRICES or len(shape) < 2:
        return "f32"
    for t in (want, "q8_0", "f16"):
        if t == "f16" or (BLOCK[t] <= BLOCK[want] and shape[-1] % BLOCK[t] == 0):
            return t
    return "f16"


def _encode(array: np.ndarray, kind: str):
    """(data, raw_dtype) for GGUFWriter.add_tensor."""
    from gguf import GGMLQuantizationType, quants  # optional: gguf (clover[llamacpp])

    if kind == "f32":
        return array, None
    if kind == "f16":
        return array.astype(np.float16), None
    if kind == "q8_0":
        return quants.quantize(array, GGMLQuantizationType.Q8_0), GGMLQuantizationType.Q8_0

    try:
        return quantize(array, kind), GGMLQuantizationType.Q4_K
    except LlamaCppError as e:
        raise ExportError(f"--type {kind}: the gguf package cannot quantize it and {e}") from None


def _metadata(w, config: CloverConfig, src: Path, kind: str) -> None:
    c = config
    a = ARCH
    w.add_name(src.resolve().name)
    w.add_uint32(f"{a}.gguf_version", GGUF_VERSION)
    w.add_string(f"{a}.config", json.dumps(c.to_dict()))
    w.add_string("general.clover_type", kind)
    w.add_uint32(f"{a}.block_count", c.num_hidden_layers)
    w.add_uint32(f"{a}.embedding_length", c.hidden_size)
    w.add_uint32(f"{a}.vocab_size", c.vocab_size)
    w.add_uint32(f"{a}.context_length", c.max_position_embeddings)
    w.add_array(f"{a}.layer_types", ["attention" if t == ATTN else "gdn" for t in c.layer_types])
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", c.rms_norm_eps)
    w.add_uint32(f"{a}.attention.head_count", c.num_attention_heads)
    w.add_uint32(f"{a}.attention.head_count_kv", c.num_key_value_heads)
    w.add_uint32(f"{a}.attention.key_length", c.head_dim)
    w.add_uint32(f"{a}.rope.dimension_count", int(c.head_dim * c.partial_rotary_factor))
    w.add_float32(f"{a}.rope.partial_rotary_factor", c.partial_rotary_factor)
    w.add_float32(f"{a}.rope.freq_base", c.rope_theta)
    w.add_uint32(f"{a}.ssm.conv_kernel", c.linear_conv_kernel_dim)
    w.add_uint32(f"{a}.ssm.group_count", c.linear_num_key_heads)
    w.add_uint32(f"{a}.ssm.time_step_rank", c.linear_num_value_heads)
    w.add_uint32(f"{a}.ssm.state_size", c.linear_key_head_dim)
    w.add_uint32(f"{a}.ssm.value_head_dim", c.linear_value_head_dim)
    w.add_uint32(f"{a}.expert_count", c.num_experts)
    w.add_uint32(f"{a}.expert_used_count", c.num_experts_per_tok if c.num_experts else 0)
    w.add_uint32(f"{a}.expert_feed_forward_length", c.moe_intermediate_size)
    w.add_uint32(f"{a}.expert_shared_feed_forward_length", c.shared_expert_intermediate_size)
    w.add_uint32(f"{a}.feed_forward_length", c.intermediate_size)
    w.add_uint32(f"{a}.block_size", c.block_size)
    w.add_uint32(f"{a}.max_block_size", c.max_block_size)
    w.add_bool(f"{a}.shift_logits", c.shift_logits)
    w.add_string(f"{a}.gdn.block_mixing", c.gdn_block_mixing)
    w.add_bool(f"{a}.gdn.right_conv", c.gdn_right_conv)
    w.add_bool(f"{a}.gdn.block_calibration", c.gdn_block_calibration)
    w.add_bool(f"{a}.tie_word_embeddings", c.tie_word_embeddings)
    w.add_uint32(f"{a}.mask_token_id", c.mask_token_id)
    w.add_array(f"{a}.eos_token_ids", c.eos_ids)
    if c.pad_token_id is not None:
        w.add_uint32(f"{a}.pad_token_id", c.pad_token_id)


def _tokenizer(w, config: CloverConfig, src: Path) -> None:
    """gguf's token list and merges, the raw ``tokenizer.json``, the ids and the chat template."""
    from gguf import TokenType  # optional: gguf (clover[llamacpp])

    w.add_uint32("tokenizer.ggml.mask_token_id", config.mask_token_id)
    stops = stop_ids(config, src)  # the config's EOS ids and those the tokenizer declares
    w.add_array(f"{ARCH}.stop_token_ids", stops)
    if stops:
        w.add_eos_token_id(config.eos_ids[0] if config.eos_ids else stops[0])
    if config.pad_token_id is not None:
        w.add_pad_token_id(config.pad_token_id)
    tok_file = src / "tokenizer.json"
    if not tok_file.exists():
        return
    raw = tok_file.read_text()
    w.add_string("tokenizer.huggingface.json", raw)
    tok = json.loads(raw)
    model = tok.get("model", {})
    vocab = dict(model.get("vocab", {}))
    added = {t["id"]: t for t in tok.get("added_tokens", [])}
    for i, t in added.items():
        vocab[t["content"]] = i
    n = max(config.vocab_size, max(vocab.values(), default=-1) + 1)
    tokens = [f"[PAD{i}]" for i in range(n)]
    types = [int(TokenType.UNUSED)] * n
    for text, i in vocab.items():
        tokens[i] = text
        types[i] = int(TokenType.NORMAL)
    for i, t in added.items():
        types[i] = int(TokenType.CONTROL if t.get("special") else TokenType.USER_DEFINED)
    if model.get("type") == "BPE":
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("clover")
        merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
        w.add_token_merges(merges)
    else:
        w.add_tokenizer_model("none")
    w.add_token_list(tokens)
    w.add_token_types(types)
    cfg = src / "tokenizer_config.json"
    if cfg.exists():  # its eos / pad / mask token names, so the tokenizer reloads as from the directory
        w.add_string(f"{ARCH}.tokenizer_config", cfg.read_text())
    template = json.loads(cfg.read_text()).get("chat_template") if cfg.exists() else None
    if template is None:
        path = src / "chat_template.jinja"
        template = (path if path.exists() else CLOVER_TEMPLATE).read_text()
    w.add_chat_template(template)


def export_gguf(model_dir: str | Path, out: str | Path, type: str = "f32") -> GGUFReport:
    """Export the Clover checkpoint ``model_dir`` (a directory or a cached repo id) as the GGUF
    file ``out`` with weight matrices of ``type`` (``GGUF_TYPES``)."""
    from gguf import GGUFWriter  # optional: gguf (clover[llamacpp])

    t0 = time.time()
    if type not in GGUF_TYPES:
        raise ExportError(f"--type {type!r}: choose one of {', '.join(GGUF_TYPES)}")
    src, config = checked_source(model_dir, gguf_problems)
    try:
        model = load_model(src, "cpu", torch.float32)
    except CheckpointError as e:
        raise ExportError(str(e)) from None
    with torch.no_grad():
        tensors = gguf_tensors(config, model.state_dict())
    del model
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    w = GGUFWriter(tmp, ARCH)
    _metadata(w, config, src, type)
    _tokenizer(w, config, src)
    counts: dict[str, int] = {}
    fallbacks: dict[str, dict[int, int]] = {}
    for name, array in tensors.items():
        kind = tensor_type(name, array.shape, type)
        data, raw = _encode(array, kind)
        w.add_tensor(name, data, raw_dtype=raw)
        counts[kind] = counts.get(kind, 0) + 1
        if kind not in (type, "f32"):
            by_width = fallbacks.setdefault(kind, {})
            by_width[array.shape[-1]] = by_width.get(array.shape[-1], 0) + 1
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(out)
    return GGUFReport(out, type, len(tensors), out.stat().st_size, time.time() - t0, counts, fallbacks)
