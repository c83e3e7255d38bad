"""What is particular to each family: the dense Qwen3.5 and Qwen3-Next conversions report what
they did, Qwen3-Next's fused projections split as transformers splits them, the converted models
take a training step, and what a family cannot express is refused by name.
(Layer-by-layer equivalence and generation for every family: test_equivalence.py.)"""

import json
import shutil

import pytest
import torch

from clover.convert import ConversionError, convert
from clover.model.io import load_model
from tests.convert.helpers import CHAT_TEMPLATE

FAST = dict(dtype="fp32", block_size=4, calib_seqs=2, calib_blocks=4, progress=False)


def test_dense_conversion_says_what_it_left_out(converted):
    _, report = converted["dense_vl"]
    text = report.summary()
    assert report.family == "qwen3_5" and report.experts == "none"
    assert "converted qwen3_5 vision+text checkpoint (dense feed-forward)" in text
    assert "vision tower left out" in text and "multi-token-prediction head dropped" in text
    assert converted["dense"][1].skipped == {}  # transformers' text-only save has neither
    assert "vision tower: none in the source" in converted["dense"][1].summary()
    assert "multi-token-prediction head: none in the source" in converted["dense"][1].summary()
    assert "none in the source" not in text
    c = load_model(converted["dense"][0]).config
    assert c.num_experts == 0 and c.intermediate_size == 48
    assert c.extra["converted_from"]["family"] == "qwen3_5"


def test_qwen3_next_conversion_reports_its_family(converted):
    out, report = converted["next"]
    assert report.family == "qwen3_next" and report.experts in ("packed", "per-expert")
    assert report.summary().startswith("converted qwen3_next text-only checkpoint (experts stored")
    assert (out / "chat_template.jinja").read_text() == CHAT_TEMPLATE  # the checkpoint's own template
    assert load_model(out).config.num_experts == 4


def test_fused_projections_split_as_transformers_splits_them(hf_models, converted):
    """q, k, v, z, b, a of every GDN layer: transformers' fix_query_key_value_ordering against
    Clover's four projections cut from the fused two."""
    hf = hf_models["next"]
    cl = load_model(converted["next"][0], dtype=torch.float32)
    x = torch.randn(2, 5, 32)
    checked = 0
    for i, layer in enumerate(hf.model.layers):
        if not hasattr(layer, "linear_attn"):
            continue
        src, mix = layer.linear_attn, cl.model.layers[i].linear_attn
        with torch.no_grad():
            q, k, v, z, b, a = src.fix_query_key_value_ordering(src.in_proj_qkvz(x), src.in_proj_ba(x))
            qkv = torch.cat([t.reshape(2, 5, -1) for t in (q, k, v)], -1)
            assert torch.equal(mix.in_proj_qkv(x), qkv)
            assert torch.equal(mix.in_proj_z(x), z.reshape(2, 5, -1))
            assert torch.equal(mix.in_proj_b(x), b) and torch.equal(mix.in_proj_a(x), a)
        checked += 1
    assert checked == 3


@pytest.mark.parametrize("kind", ["dense", "next"])
def test_converted_model_takes_a_training_step(converted, kind):
    from clover.train.trainer import TrainConfig, Trainer
    from tests.train.copy_task import copy_source

    m = load_model(converted[kind][0], dtype=torch.float32).train()
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    cfg = TrainConfig(steps=1, lr=1e-3, warmup=0, block_size=4)
    figs = Trainer(m, copy_source(batch=4, vocab=90), cfg, None).train_step(0)
    assert figs["masked"] > 0 and all(torch.isfinite(torch.tensor(float(v))) for v in (figs["loss"], figs["aux"]))
    moved = [n for n, p in m.named_parameters() if not torch.equal(p, before[n])]
    assert any(".mlp." in n for n in moved) and any("linear_attn.mem_key" in n for n in moved)


def test_qwen3_next_with_dense_layers_is_refused(sources, tmp_path):
    src = shutil.copytree(sources["next"], tmp_path / "src")
    cfg = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**cfg, "mlp_only_layers": [0]}))
    with pytest.raises(ConversionError, match="mlp_only_layers"):
        convert(src, tmp_path / "out", **FAST)


def test_a_source_of_another_family_fails_on_its_names(sources, tmp_path):
    """A dense checkpoint whose config claims qwen3_next: its tensors match no rule of that map."""
    src = shutil.copytree(sources["dense"], tmp_path / "src")
    cfg = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(
        json.dumps({**cfg, "model_type": "qwen3_next", "num_experts": 4, "num_experts_per_tok": 2})
    )
    with pytest.raises(ConversionError, match="match no rule of the qwen3_next name map"):
        convert(src, tmp_path / "out", **FAST)


def test_unsupported_model_type_names_the_supported_ones(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_moe"}))
    with pytest.raises(ConversionError, match="qwen3_5_moe.*qwen3_5.*qwen3_next"):
        convert(tmp_path, tmp_path / "out", **FAST)
