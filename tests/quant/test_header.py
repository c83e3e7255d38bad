"""A corrupt or inconsistent quantization header (or tensors that do not fit it) is refused,
with a message that names it."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from clover.model import quant as Q
from clover.model.io import CheckpointError, load_model, save_model
from tests.quant.helpers import kernel_model


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    d = tmp_path_factory.mktemp("q4")
    save_model(Q.quantize_model(kernel_model(), 4, 32), d)
    return d


def _with_header(saved, tmp_path, change):
    d = tmp_path / "bad"
    d.mkdir()
    cfg = json.loads((saved / "config.json").read_text())
    change(cfg["quantization"]) if callable(change) else cfg.update(quantization=change)
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "model.safetensors").write_bytes((saved / "model.safetensors").read_bytes())
    return d


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda q: q.update(bits=3), "quantization bits must be 8 or 4, got 3"),
        (lambda q: q.update(bits="4"), "quantization bits must be 8 or 4"),
        (lambda q: q.update(scheme="symmetric"), "scheme for 4-bit weights must be 'asymmetric'"),
        (lambda q: q.update(group_size=-1), "group_size must be an integer >= 0"),
        (lambda q: q.update(group_size=24), "group size 24 does not divide its input dim 64"),
        (lambda q: q.pop("modules"), r"quantization header lacks \['modules'\]"),
        (lambda q: q.update(extra=1), "quantization header has unknown keys"),
        (lambda q: q["modules"].append("model.layers.0.mlp.gate"), "names 1 modules this model cannot quantize"),
        (lambda q: q["modules"].append(q["modules"][0]), "lists a module twice"),
        (lambda q: q["modules"].remove("model.layers.1.mlp.experts.down_proj"), "experts go together"),
        ("int4", "quantization header must be an object"),
    ],
)
def test_a_bad_header_is_refused_by_name(saved, tmp_path, change, match):
    with pytest.raises(CheckpointError, match=match) as e:
        load_model(_with_header(saved, tmp_path, change))
    assert "config.json" in str(e.value)


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda q: q.update(bits=8, scheme="symmetric"), r"quantization header \(bits 8, group_size 32\)"),
        (lambda q: q.update(group_size=64), r"quantization header \(bits 4, group_size 64\).*scales"),
        (lambda q: q["modules"].remove("model.layers.0.linear_attn.out_proj"), "unexpected 3 tensors"),
        (lambda q: q.update(modules=[]), "missing"),
    ],
)
def test_tensors_that_do_not_fit_the_header_are_refused(saved, tmp_path, change, match):
    with pytest.raises(CheckpointError, match=match):
        load_model(_with_header(saved, tmp_path, change))


def test_a_tensor_of_the_wrong_dtype_is_refused(saved, tmp_path):
    d = _with_header(saved, tmp_path, lambda q: None)
    state = load_file(saved / "model.safetensors")
    state["model.layers.0.linear_attn.out_proj.scales"] = state["model.layers.0.linear_attn.out_proj.scales"].float()
    save_file(state, d / "model.safetensors")
    with pytest.raises(
        CheckpointError, match=r"out_proj.scales: checkpoint \(64, 1\) float32 vs config \(64, 1\) bfloat16"
    ):
        load_model(d)


def test_the_header_is_readable_json(saved):
    q = json.loads((saved / "config.json").read_text())["quantization"]
    assert q["bits"] == 4 and q["group_size"] == 32 and q["scheme"] == "asymmetric"
    state = load_file(saved / "model.safetensors")
    for name in q["modules"]:
        assert state[f"{name}.qweight"].dtype == torch.uint8
        assert state[f"{name}.scales"].dtype == state[f"{name}.zeros"].dtype == torch.bfloat16
        assert f"{name}.weight" not in state and name not in state
