"""``clover export gguf``: the file reads back with gguf's own reader, every tensor equal to the
checkpoint's at f32 under its llama.cpp-style name, the metadata and tokenizer present; quantized
types; checkpoints the llama.cpp graph cannot run are refused with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from clover.data import default_model_dir
from clover.export import ExportError
from clover.model.config import preset
from clover.model.io import load_model, save_model
from clover.model.model import CloverForBlockDiffusion

gguf = pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from clover.export.gguf import export_gguf

    out = tmp_path_factory.mktemp("gguf") / "model.gguf"
    report = export_gguf(default_model_dir(), out, "f32")
    return report, gguf.GGUFReader(out)


def field(reader, key):
    f = reader.fields[key]
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        if f.types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode() for i in f.data]
        return [f.parts[i][0].item() for i in f.data]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode()
    return f.parts[f.data[0]][0].item()


def expected_tensors(model) -> dict[str, np.ndarray]:
    """The GGUF tensors written out by hand from the Clover state dict (numpy shapes)."""
    s = {k: v.float().numpy() for k, v in model.state_dict().items()}
    out = {
        "token_embd.weight": s["model.embed_tokens.weight"],
        "output_norm.weight": 1 + s["model.norm.weight"],
        "output.weight": s["lm_head.weight"],
    }
    for i, t in enumerate(model.config.layer_types):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        out[b + "attn_norm.weight"] = 1 + s[p + "input_layernorm.weight"]
        out[b + "post_attention_norm.weight"] = 1 + s[p + "post_attention_layernorm.weight"]
        if t == "full_attention":
            a = p + "self_attn."
            for src, dst in (
                ("q_proj", "attn_q"),
                ("k_proj", "attn_k"),
                ("v_proj", "attn_v"),
                ("o_proj", "attn_output"),
            ):
                out[f"{b}{dst}.weight"] = s[f"{a}{src}.weight"]
            out[b + "attn_q_norm.weight"] = 1 + s[a + "q_norm.weight"]
            out[b + "attn_k_norm.weight"] = 1 + s[a + "k_norm.weight"]
        else:
            g = p + "linear_attn."
            out[b + "attn_qkv.weight"] = s[g + "in_proj_qkv.weight"]
            out[b + "attn_gate.weight"] = s[g + "in_proj_z.weight"]
            out[b + "ssm_beta.weight"] = s[g + "in_proj_b.weight"]
            out[b + "ssm_alpha.weight"] = s[g + "in_proj_a.weight"]
            out[b + "ssm_conv1d.weight"] = s[g + "conv1d.weight"][:, 0].T
            out[b + "ssm_conv_right.weight"] = s[g + "conv_right"].T
            out[b + "ssm_dt.bias"] = s[g + "dt_bias"]
            out[b + "ssm_a"] = -np.exp(s[g + "A_log"].astype(np.float64))
            out[b + "ssm_norm.weight"] = s[g + "norm.weight"]
            out[b + "ssm_out.weight"] = s[g + "out_proj.weight"]
            for src, dst in (("attn_scale", "mix_scale"), ("mem_key", "mem_key"), ("mem_bias", "mem_bias")):
                out[f"{b}ssm_{dst}"] = s[g + src]
            out[b + "ssm_mem_gamma"], out[b + "ssm_mem_scale"] = s[g + "mem_gamma"], s[g + "mem_scale"]
        m = p + "mlp."
        if model.config.num_experts:
            gate_up = s[m + "experts.gate_up_proj"]
            half = gate_up.shape[1] // 2
            out[b + "ffn_gate_inp.weight"] = s[m + "gate.weight"]
            out[b + "ffn_gate_exps.weight"], out[b + "ffn_up_exps.weight"] = gate_up[:, :half], gate_up[:, half:]
            out[b + "ffn_down_exps.weight"] = s[m + "experts.down_proj"]
            for proj in ("gate", "up", "down"):
                out[f"{b}ffn_{proj}_shexp.weight"] = s[f"{m}shared_expert.{proj}_proj.weight"]
            out[b + "ffn_gate_inp_shexp.weight"] = s[m + "shared_expert_gate.weight"]
        else:
            for proj in ("gate", "up", "down"):
                out[f"{b}ffn_{proj}.weight"] = s[f"{m}{proj}_proj.weight"]
    return out


def test_every_tensor_round_trips_at_f32(exported):
    report, reader = exported
    model = load_model(default_model_dir(), "cpu", torch.float32)
    want = expected_tensors(model)
    got = {t.name: t for t in reader.tensors}
    assert set(got) == set(want) and report.tensors == len(want)
    for name, ref in want.items():
        t = got[name]
        assert t.tensor_type == gguf.GGMLQuantizationType.F32, name
        data = np.asarray(t.data).reshape(ref.shape)
        if name.endswith("ssm_a"):
            np.testing.assert_allclose(data, ref, rtol=1e-7, err_msg=name)
        else:
            np.testing.assert_array_equal(data, ref.astype(np.float32), err_msg=name)


def test_metadata_and_tokenizer(exported):
    from clover.data.tokenizer import CloverTokenizer

    _, reader = exported
    cfg = json.loads((default_model_dir() / "config.json").read_text())
    assert field(reader, "general.architecture") == "clover"
    assert json.loads(field(reader, "clover.config"))["layer_types"] == cfg["layer_types"]
    types = ["attention" if t == "full_attention" else "gdn" for t in cfg["layer_types"]]
    assert field(reader, "clover.layer_types") == types
    for key, value in {
        "clover.block_size": cfg["block_size"],
        "clover.max_block_size": cfg["max_block_size"],
        "clover.shift_logits": cfg["shift_logits"],
        "clover.mask_token_id": cfg["mask_token_id"],
        "clover.expert_count": cfg["num_experts"],
        "clover.expert_used_count": cfg["num_experts_per_tok"],
        "clover.attention.head_count_kv": cfg["num_key_value_heads"],
        "clover.rope.dimension_count": int(cfg["head_dim"] * cfg["partial_rotary_factor"]),
        "clover.ssm.time_step_rank": cfg["linear_num_value_heads"],
        "clover.gdn.block_mixing": "bidirectional",
        "clover.gdn.right_conv": True,
        "clover.gdn.block_calibration": True,
        "tokenizer.ggml.mask_token_id": cfg["mask_token_id"],
        "tokenizer.ggml.eos_token_id": cfg["eos_token_id"],
    }.items():
        assert field(reader, key) == value, key
    assert field(reader, "clover.rope.freq_base") == pytest.approx(cfg["rope_theta"])
    # the tokenizer reloads from the file exactly, and gguf's token list agrees with it
    raw = field(reader, "tokenizer.huggingface.json")
    assert raw == (default_model_dir() / "tokenizer.json").read_text()
    tok = CloverTokenizer.load(default_model_dir())
    tokens = field(reader, "tokenizer.ggml.tokens")
    assert len(tokens) == cfg["vocab_size"] and tokens[cfg["mask_token_id"]] == "<|mask|>"
    from tokenizers import Tokenizer

    reloaded = Tokenizer.from_str(raw)
    text = "Create a no-fly zone named Alpha"
    ids = tok.encode(text)
    assert reloaded.encode(text, add_special_tokens=False).ids == ids
    assert [tokens[i] for i in ids] == [reloaded.id_to_token(i) for i in ids]
    assert "<|im_start|>" in field(reader, "tokenizer.chat_template")


@pytest.mark.parametrize("kind", ["f16", "q8_0"])
def test_quantized_types(tmp_path, kind):
    from clover.export.gguf import export_gguf

    report = export_gguf(default_model_dir(), tmp_path / "m.gguf", kind)
    reader = gguf.GGUFReader(tmp_path / "m.gguf")
    got = {t.name: t.tensor_type.name for t in reader.tensors}
    assert got["blk.0.attn_qkv.weight"] == kind.upper() and got["blk.1.ffn_down_exps.weight"] == kind.upper()
    assert got["blk.0.ssm_conv1d.weight"] == "F32" and got["blk.0.ffn_gate_inp.weight"] == "F32"
    assert report.types[kind] > 0
    if kind == "q8_0":  # dequantized, close to the checkpoint
        t = next(t for t in reader.tensors if t.name == "blk.0.attn_qkv.weight")
        ref = (
            load_model(default_model_dir(), "cpu", torch.float32)
            .model.layers[0]
            .linear_attn.in_proj_qkv.weight.detach()
        )
        deq = gguf.quants.dequantize(t.data, t.tensor_type).reshape(ref.shape)
        assert np.abs(deq - ref.numpy()).max() < 0.01 * np.abs(ref.numpy()).max()


def test_q4_k_falls_back_by_row_length(tmp_path):
    """Rows of 128 values (the bundled model's hidden size) do not split into Q4_K's 256-value
    blocks: those matrices are written as q8_0; no q4_k quantizer is needed then."""
    from clover.export.gguf import export_gguf, tensor_type

    assert tensor_type("blk.3.attn_qkv.weight", (256, 128), "q4_k") == "q8_0"
    assert tensor_type("blk.3.attn_qkv.weight", (256, 512), "q4_k") == "q4_k"
    assert tensor_type("blk.3.attn_qkv.weight", (256, 48), "q4_k") == "f16"
    assert tensor_type("blk.3.ssm_alpha.weight", (4, 512), "q4_k") == "f32"
    report = export_gguf(default_model_dir(), tmp_path / "m.gguf", "q4_k")
    assert "q4_k" not in report.types and report.types["q8_0"] > 0
    assert sum(report.fallbacks["q8_0"].values()) == report.types["q8_0"]


def test_q4_k_fallback_is_counted_and_explained_by_the_command(tmp_path, capsys):
    """The command's own output says how many matrices fell back, to what, and why (the bundled
    model's rows are shorter than q4_k's 256-value blocks), and which tensors are f32 by design."""
    from clover.cli import main

    with pytest.raises(SystemExit) as e:
        main(["export", "gguf", "--out", str(tmp_path / "m.gguf"), "--type", "q4_k"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    report = gguf.GGUFReader(str(tmp_path / "m.gguf"))
    q8 = sum(t.tensor_type.name == "Q8_0" for t in report.tensors)
    f32 = sum(t.tensor_type.name == "F32" for t in report.tensors)
    assert q8 > 0 and f"{q8} weight matrices in q8_0, not q4_k" in out, out
    assert "are not whole q4_k blocks of 256" in out and f"{f32} f32: norms" in out, out


def test_fallback_lines_name_each_row_length():
    from clover.export.gguf import GGUFReport

    r = GGUFReport(
        Path("m.gguf"),
        "q4_k",
        10,
        1 << 20,
        0.5,
        {"f32": 4, "q4_k": 3, "q8_0": 2, "f16": 1},
        {"q8_0": {128: 1, 96: 1}, "f16": {48: 1}},
    )
    lines = r.summary().splitlines()
    assert (
        "  2 weight matrices in q8_0, not q4_k: their rows of 96 and 128 values are not whole q4_k blocks of 256"
        in lines
        and any(line.startswith("  1 weight matrix in f16, not q4_k: their rows of 48") for line in lines)
    )
    assert "weight matri" not in GGUFReport(Path("m.gguf"), "q8_0", 1, 1, 0.1, {"q8_0": 1}).summary()


def test_q4_k_without_the_library_says_so(tmp_path, monkeypatch):
    from clover.backends import llamacpp
    from clover.export.gguf import export_gguf

    torch.manual_seed(0)
    save_model(CloverForBlockDiffusion(preset("tiny", hidden_size=256, num_hidden_layers=1)), tmp_path / "ckpt")
    monkeypatch.setenv("CLOVER_LLAMACPP_LIB", str(tmp_path / "absent.so"))
    llamacpp.load_library.cache_clear()
    try:
        with pytest.raises(ExportError, match="q4_k.*make llama-cpp"):
            export_gguf(tmp_path / "ckpt", tmp_path / "m.gguf", "q4_k")
    finally:
        llamacpp.load_library.cache_clear()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"gdn_block_mixing": "causal"}, "gdn_block_mixing='causal' is not implemented"),
        ({"linear_value_head_dim": 16}, "linear_key_head_dim=8 differs from linear_value_head_dim=16"),
    ],
)
def test_unsupported_configs_are_refused(tmp_path, overrides, message):
    from clover.export.gguf import export_gguf

    save_model(CloverForBlockDiffusion(preset("tiny", **overrides)), tmp_path / "ckpt")
    with pytest.raises(ExportError, match=message):
        export_gguf(tmp_path / "ckpt", tmp_path / "m.gguf")
    assert not (tmp_path / "m.gguf").exists()


def test_bad_inputs(tmp_path):
    from clover.export.gguf import export_gguf

    with pytest.raises(ExportError, match="choose one of f32, f16, q8_0, q4_k"):
        export_gguf(default_model_dir(), tmp_path / "m.gguf", "q5_1")
    with pytest.raises(ExportError, match="no config.json"):
        export_gguf(tmp_path, tmp_path / "m.gguf")


def test_command_line(tmp_path, capsys):
    from clover.cli import main

    def run(*argv) -> int:
        with pytest.raises(SystemExit) as e:
            main(["export", "gguf", *argv])
        return e.value.code

    assert run("--out", str(tmp_path / "m.gguf"), "--type", "q8_0", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["type"] == "q8_0" and (tmp_path / "m.gguf").exists()
    assert run("--model", str(tmp_path), "--out", str(tmp_path / "x.gguf")) == 2
    assert "no config.json" in capsys.readouterr().err
