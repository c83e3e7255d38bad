"""What a conversion writes and refuses: the name map's bookkeeping, Clover's new parameters,
the [MASK] token, tokenizer files, clear errors, the CLI."""

import json
import math
import shutil

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from clover.convert import ConversionError, convert
from clover.convert.calibrate import calibration_tokens
from clover.convert.tokens import TokenizerInfo, pick_mask
from clover.model.io import load_model, read_weights
from clover.ops.delta_rule import delta_rule_recurrent
from tests.convert.helpers import CHAT_TEMPLATE, save_packed

FAST = dict(dtype="fp32", block_size=4, calib_seqs=2, calib_blocks=4, progress=False)


def _source_keys(d):
    keys = []
    for f in sorted(d.glob("*.safetensors")):
        with safe_open(str(f), "pt") as h:
            keys += list(h.keys())
    return keys


def test_every_source_tensor_is_used_or_skipped(sources, converted):
    for kind, (out, report) in converted.items():
        keys = _source_keys(sources[kind])
        assert report.source_tensors == len(keys) == report.used + sum(report.skipped.values()), kind
        assert report.written == len(read_weights(out)), kind
    assert converted["text"][1].skipped == {}
    ((why, n),) = converted["vl"][1].skipped.items()
    assert "vision" in why and n == sum(k.startswith("model.visual.") for k in _source_keys(sources["vl"]))
    ((why, n),) = converted["packed"][1].skipped.items()
    assert "multi-token" in why and n == 2
    assert converted["text"][1].experts == "per-expert" and converted["packed"][1].experts == "packed"
    assert len(list(sources["text"].glob("*.safetensors"))) > 3  # the source really is sharded


def test_packed_and_per_expert_sources_give_the_same_checkpoint(converted):
    a, b = read_weights(converted["text"][0]), read_weights(converted["packed"][0])
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_new_parameters_start_where_the_design_says(converted):
    out, report = converted["text"]
    m = load_model(out)
    assert sorted(report.rho) == [i for i, t in enumerate(m.config.layer_types) if t == "linear_attention"]
    for i, layer in enumerate(m.model.layers):
        if layer.layer_type != "linear_attention":
            continue
        mix = layer.linear_attn
        assert torch.count_nonzero(mix.conv_right) == 0  # right branch off: the base's causal conv
        assert torch.count_nonzero(mix.mem_key) == 0 and torch.count_nonzero(mix.mem_bias) == 0
        assert torch.all(mix.mem_gamma == 1)
        assert torch.allclose(mix.attn_scale, torch.tensor(math.sqrt(mix.dk)))
        assert mix.mem_scale.tolist() == report.rho[i]
        assert all(r > 0 and math.isfinite(r) for r in report.rho[i]) and any(r != 1 for r in report.rho[i])


def test_readout_scale_puts_the_memory_value_on_the_scale_of_the_block_values(converted):
    """Layer 0, recomputed with the slow reference delta rule: RMS(ρ_h·Sᵀq̂) = RMS(v_h)."""
    out, _ = converted["text"]
    m = load_model(out, dtype=torch.float64)
    cal = m.config.extra["converted_from"]["readout_calibration"]
    bs = cal["block_size"]
    ids = calibration_tokens(cal["ids_below"], cal["seqs"], cal["blocks"], bs, cal["seed"], m.config.mask_token_id)
    layer = m.model.layers[0]
    mix = layer.linear_attn
    x = layer.input_layernorm(m.model.embed_tokens(ids))
    with torch.no_grad():
        u = mix.in_proj_qkv(x).transpose(1, 2)
        feat = torch.nn.functional.silu(mix.conv1d(u)[..., : ids.shape[1]]).transpose(1, 2)
        q, k, v = mix._heads(feat)
        g, beta = mix._gates(x)
        L = ids.shape[1]
        _, S = delta_rule_recurrent(q, k, v, g, beta, boundaries=[b * bs - 1 for b in range(1, L // bs)])
    r = torch.einsum("bnhkv,bnihk->bnihv", S, q[:, bs:].reshape(len(ids), -1, bs, mix.Hv, mix.dk))
    rms = lambda t: t.pow(2).mean((0, 1, 3)).sqrt()
    ratio = rms(mix.mem_scale[:, None] * r.reshape(len(ids), -1, mix.Hv, mix.dv)) / rms(v[:, bs:])
    assert torch.allclose(ratio, torch.ones_like(ratio), atol=1e-5)


def test_without_calibration_the_readout_scale_is_one(sources, tmp_path):
    convert(sources["packed"], tmp_path, **{**FAST, "calib_seqs": 0})
    m = load_model(tmp_path)
    assert all(torch.all(l.linear_attn.mem_scale == 1) for l in m.model.layers if hasattr(l, "linear_attn"))


def test_mask_token_tokenizer_files_and_special_ids(sources, converted):
    from clover.data.tokenizer import CloverTokenizer

    out, report = converted["vl"]
    c = load_model(out).config
    assert c.mask_token_id == report.mask_token_id == 99  # the first id the tokenizer does not use
    assert c.vocab_size == 128  # a spare row: nothing grown
    assert CloverTokenizer.load(out).mask_token_id == 99  # added to the copied tokenizer
    tc = json.loads((out / "tokenizer_config.json").read_text())
    assert tc["mask_token"] == "<|mask|>" and tc["added_tokens_decoder"]["99"]["special"]
    assert (out / "chat_template.jinja").read_text() == CHAT_TEMPLATE
    assert (out / "generation_config.json").read_bytes() == (sources["vl"] / "generation_config.json").read_bytes()
    assert c.eos_token_id == [98, 96] and c.pad_token_id == 96  # from generation_config
    assert c.block_size == 4 and c.shift_logits and c.model_type == "clover"
    assert c.extra["converted_from"]["model_type"] == "qwen3_5_moe"
    assert (sources["vl"] / "tokenizer.json").read_text().count("<|mask|>") == 0  # the source is untouched


def test_pick_mask_rules():
    existing = pick_mask(TokenizerInfo(99, {"<|mask|>": 42}), 128)
    assert (existing.token_id, existing.grow, existing.added) == (42, 0, False)
    field = pick_mask(TokenizerInfo(99, {"<MASKY>": 7}, mask_field="<MASKY>"), 128)
    assert field.token_id == 7
    spare = pick_mask(TokenizerInfo(99, {}), 128)
    assert (spare.token_id, spare.vocab_size, spare.grow, spare.added) == (99, 128, 0, True)
    full = pick_mask(TokenizerInfo(128, {}), 128)
    assert (full.token_id, full.vocab_size, full.grow, full.added) == (128, 129, 1, True)
    none = pick_mask(TokenizerInfo(None, {}), 128)
    assert (none.token_id, none.grow, none.added) == (128, 1, False)
    with pytest.raises(ConversionError, match="outside"):
        pick_mask(TokenizerInfo(200, {"[MASK]": 150}), 128)
    with pytest.raises(ConversionError, match="only 128 rows"):
        pick_mask(TokenizerInfo(130, {}), 128)


def test_existing_mask_token_is_reused(sources, tmp_path):
    src = shutil.copytree(sources["packed"], tmp_path / "src")
    tj = json.loads((src / "tokenizer.json").read_text())
    tj["added_tokens"].append({**tj["added_tokens"][-1], "id": 99, "content": "[MASK]"})
    (src / "tokenizer.json").write_text(json.dumps(tj))
    report = convert(src, tmp_path / "out", **FAST)
    assert report.mask_token_id == 99 and "existing" in report.mask_note
    assert (tmp_path / "out" / "tokenizer.json").read_bytes() == (src / "tokenizer.json").read_bytes()


def test_no_spare_row_grows_embedding_and_head_by_one(sources, hf_models, tmp_path):
    src = shutil.copytree(sources["packed"], tmp_path / "src")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (src / f).unlink()  # no tokenizer: no row is known to be free
    report = convert(src, tmp_path / "out", **FAST)
    m = load_model(tmp_path / "out")
    assert m.config.vocab_size == 129 and m.config.mask_token_id == 128 == report.mask_token_id
    hf = hf_models["text"]
    E, W = m.model.embed_tokens.weight, m.lm_head.weight
    assert torch.equal(E[:128], hf.model.embed_tokens.weight) and torch.equal(W[:128], hf.lm_head.weight)
    assert torch.allclose(E[128], hf.model.embed_tokens.weight.mean(0))  # the new row: mean init
    assert torch.allclose(W[128], hf.lm_head.weight.mean(0))


def test_sharded_output_loads_and_equals_the_single_file(sources, converted, tmp_path):
    report = convert(sources["packed"], tmp_path, **{**FAST, "max_shard_bytes": 40_000})
    assert len(report.files) > 2 and (tmp_path / "model.safetensors.index.json").exists()
    a, b = read_weights(tmp_path), read_weights(converted["packed"][0])
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    load_model(tmp_path)


# -- clear errors -------------------------------------------------------------------------------
def test_unsupported_architecture_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(ConversionError, match="unsupported architecture.*llama"):
        convert(tmp_path, tmp_path / "out", **FAST)


def test_missing_shard_is_an_error(sources, tmp_path):
    src = shutil.copytree(sources["text"], tmp_path / "src")
    sorted(src.glob("model-*.safetensors"))[2].unlink()
    with pytest.raises(ConversionError, match="missing"):
        convert(src, tmp_path / "out", **FAST)


def test_truncated_shard_is_an_error(sources, tmp_path):
    src = shutil.copytree(sources["text"], tmp_path / "src")
    f = sorted(src.glob("model-*.safetensors"))[1]
    f.write_bytes(f.read_bytes()[:-100])
    with pytest.raises(ConversionError, match="corrupt or truncated"):
        convert(src, tmp_path / "out", **FAST)


def test_tied_head_is_skipped_and_stays_tied(sources, tmp_path):
    src = shutil.copytree(sources["packed"], tmp_path / "src")
    cfg = json.loads((src / "config.json").read_text())
    cfg["tie_word_embeddings"] = True
    (src / "config.json").write_text(json.dumps(cfg))
    report = convert(src, tmp_path / "out", **FAST)
    assert any("tied" in why for why in report.skipped)
    m = load_model(tmp_path / "out")
    assert m.config.tie_word_embeddings and m.lm_head.weight is m.model.embed_tokens.weight


def test_unmapped_tensor_is_an_error_never_dropped(sources, tmp_path):
    src = shutil.copytree(sources["packed"], tmp_path / "src")
    save_file({"model.layers.0.mlp.mystery.weight": torch.zeros(2)}, src / "extra.safetensors")
    idx = json.loads((src / "model.safetensors.index.json").read_text())
    idx["weight_map"]["model.layers.0.mlp.mystery.weight"] = "extra.safetensors"
    (src / "model.safetensors.index.json").write_text(json.dumps(idx))
    with pytest.raises(ConversionError, match=r"match no rule.*mystery"):
        convert(src, tmp_path / "out", **FAST)
    assert not list(tmp_path.glob("out/*.safetensors"))  # refused before anything is written


def test_shape_mismatch_is_an_error(sources, tmp_path):
    src = shutil.copytree(sources["packed"], tmp_path / "src")
    cfg = json.loads((src / "config.json").read_text())
    cfg["moe_intermediate_size"] = 8
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConversionError, match="shape mismatch.*experts"):
        convert(src, tmp_path / "out", **FAST)


def test_missing_expert_is_an_error(hf_models, tmp_path):
    gu = hf_models["text"].state_dict()["model.layers.1.mlp.experts.gate_up_proj"]
    extra = {
        f"model.layers.1.mlp.experts.{e}.{p}_proj.weight": gu[e, i * 16 : (i + 1) * 16].clone()
        for e in range(4)
        for i, p in enumerate(["gate", "up"])
        if (e, p) != (2, "up")
    }
    d = save_packed(hf_models["text"], tmp_path / "src", extra=extra)
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    name = idx["weight_map"].pop("model.layers.1.mlp.experts.gate_up_proj")
    shard = {k: v for k, v in load_file(d / name).items() if k != "model.layers.1.mlp.experts.gate_up_proj"}
    save_file(shard, d / name)
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    with pytest.raises(ConversionError, match=r"missing 1 per-expert tensors.*up_proj of expert 2"):
        convert(d, tmp_path / "out", **FAST)


# -- the command line ---------------------------------------------------------------------------
def test_cli_reports_conversion_errors(tmp_path, capsys):
    from clover.cli import main

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(SystemExit) as e:
        main(["convert", "--from", str(tmp_path), "--out", str(tmp_path / "out"), "--quiet"])
    assert e.value.code == 2 and "unsupported architecture" in capsys.readouterr().err


def test_a_hub_id_that_is_not_cached_says_how_to_fetch_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConversionError, match="never downloads.*hf download Qwen/Qwen3.6-35B-A3B"):
        convert("Qwen/Qwen3.6-35B-A3B", tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()
