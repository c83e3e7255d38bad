"""Dense feed-forward layers (``num_experts = 0``, the dense Qwen3.5 models): validated, named as
transformers names them, exact (training forward == cached decoding), trainable, quantizable and
saved / loaded like every other model."""

import pytest
import torch

from clover.model import CloverConfig, ConfigError, preset
from clover.model import quant as Q
from clover.model.io import load_model, save_model
from clover.model.layers import DenseMLP, MoE
from tests.model.helpers import make_model
from tests.model.test_invariant import _assert_invariant
from tests.quant.helpers import rel

DENSE = dict(num_experts=0, intermediate_size=24)


def test_config_validates_the_dense_fields():
    with pytest.raises(ConfigError, match="intermediate_size must be a positive integer, got 0"):
        CloverConfig(num_experts=0)
    with pytest.raises(ConfigError, match=r"num_experts must be an integer >= 0 \(0: dense feed-forward\), got -1"):
        CloverConfig(num_experts=-1)
    c = CloverConfig(num_experts=0, intermediate_size=64, num_experts_per_tok=0, moe_intermediate_size=0)
    assert c.num_experts == 0  # the MoE fields are not checked without experts
    assert CloverConfig().intermediate_size == 0  # an MoE config needs none


def test_every_layer_is_a_dense_mlp_with_hugging_face_names():
    m = make_model(**DENSE)
    assert all(isinstance(layer.mlp, DenseMLP) for layer in m.model.layers)
    names = {k for k in m.state_dict() if k.startswith("model.layers.0.mlp.")}
    assert names == {f"model.layers.0.mlp.{p}_proj.weight" for p in ("gate", "up", "down")}
    assert isinstance(make_model().model.layers[0].mlp, MoE)
    counts = m.num_parameters()
    assert counts["total_params"] == counts["active_params"] == sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("shift", [True, False])
@pytest.mark.parametrize("bs", [1, 4, 8])
def test_dense_model_keeps_the_invariant(bs, shift):
    _assert_invariant(make_model(shift=shift, block_size=bs, **DENSE))


def test_training_forward_has_no_balance_loss_and_trains():
    m = make_model(**DENSE).float().train()
    x0 = torch.randint(0, 96, (2, 16), generator=torch.Generator().manual_seed(0))
    xt = x0.masked_fill(torch.rand(x0.shape, generator=torch.Generator().manual_seed(1)) < 0.5, 96)
    out = m.forward_train(x0, xt)
    assert out.router_stats.shape == (4, 2, 0) and out.aux_loss.item() == 0
    loss = torch.nn.functional.cross_entropy(out.logits.reshape(-1, 97), x0.reshape(-1)) + out.aux_loss
    loss.backward()
    assert torch.isfinite(loss) and m.model.layers[0].mlp.down_proj.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("bits,group", [(8, 0), (4, 8)])
def test_dense_model_quantizes_saves_and_loads(tmp_path, bits, group):
    m = make_model(**DENSE).float().eval()
    Q.quantize_model(m, bits, group)
    mods = m.config.quantization["modules"]
    assert "model.layers.0.mlp.down_proj" in mods and not any("experts" in n for n in mods)
    assert isinstance(m.model.layers[0].mlp.gate_proj, Q.QuantWeight)
    save_model(m, tmp_path / "q")
    m2 = load_model(tmp_path / "q")
    x = torch.randint(0, 96, (2, 16))
    with torch.no_grad():
        a, b = m.forward_train(x, x).logits, m2.forward_train(x, x).logits
        twin = Q.dequantize_model(m2).forward_train(x, x).logits
    assert torch.equal(a, b) and rel(b, twin) < 0.02, rel(b, twin)  # bf16 activations in the kernels
    w = Q.weight_bytes(m.config.replace(quantization=None), bits, group)
    assert w["experts"] == 0 and w["quantized"] > 0


def test_dense_presets_build_and_count():
    for name in ("qwen3.5-0.8b", "qwen3.5-2b", "qwen3.5-4b", "qwen3.5-9b", "qwen3.5-27b"):
        c = preset(name)
        assert c.num_experts == 0 and c.intermediate_size > 0 and c.vocab_size == 248320
