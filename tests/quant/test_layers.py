"""Each quantized layer equals its reference (dequantize, then matmul); the stored layout."""

import pytest
import torch

from clover.model import quant as Q
from tests.quant.helpers import kernel_model


@pytest.mark.parametrize("bits,group", [(8, 0), (8, 32), (4, 32), (4, 0)])
def test_every_quantized_layer_equals_its_reference(bits, group):
    m = Q.quantize_model(kernel_model(), bits, group)
    assert len(m.config.quantization["modules"]) == len(Q.quantizable(m)) > 0
    g = torch.Generator().manual_seed(0)
    on_kernel = 0
    for name in m.config.quantization["modules"]:
        qw = m.get_submodule(name)
        on_kernel += qw._kernel is not None
        for e in range(qw.n_weights) if qw.lead else [None]:
            x = torch.randn(5, qw.in_features, generator=g)
            y = qw.linear(x, e)
            # the kernels take bf16 activations, accumulate in fp32 and round the result to bf16
            ref = qw.reference(x.bfloat16().float(), e)
            assert y.dtype == torch.float32 and y.shape == (5, qw.out_features)
            assert (y - ref).abs().max() <= 8e-3 * ref.abs().max() + 1e-6, (name, e)
            with Q.reference_only():
                assert torch.equal(qw.linear(x, e), qw.reference(x, e))
    # int4 per row (group 0) has groups of 64/32 here: kernel too; a group the kernel refuses falls back
    assert on_kernel == len(m.config.quantization["modules"])


@pytest.mark.parametrize("bits", [8, 4])
def test_quantization_error_is_within_half_a_step(bits):
    w = torch.randn(48, 256) * torch.rand(48, 1)
    qw = Q.QuantWeight.from_float(w, bits, 64)
    s = qw.scales.float().repeat_interleave(64, 1)
    assert ((qw.dequantize() - w).abs() <= 0.5 * s + 1e-6).all()


@pytest.mark.parametrize("bits,group", [(8, 0), (8, 32), (4, 32)])
def test_stored_layout_survives_the_kernel_layout(bits, group):
    """prepare() may drop the stored qweight (the kernel holds its own copy); state_dict rebuilds
    it bit for bit."""
    w = torch.randn(3, 64, 96)
    direct = Q.quantize_tensor(w, bits, group or 96)
    qw = Q.QuantWeight.from_float(w, bits, group or 96)
    assert qw._dropped == (bits == 4 or group == 32)
    sd = qw.state_dict()
    assert set(sd) == set(direct)
    for k, v in direct.items():
        assert sd[k].dtype == v.dtype and torch.equal(sd[k], v), k
    # the stored int4 layout: low nibble = even column, values 0..15, w = (q - 8) * scale + zero
    if bits == 4:
        q = torch.stack([sd["qweight"] & 15, sd["qweight"] >> 4], -1).reshape(3, 64, 96).float()
        manual = (q - 8).reshape(3, 64, 3, 32) * sd["scales"].float()[..., None] + sd["zeros"].float()[..., None]
        assert torch.equal(manual.reshape(3, 64, 96), qw.dequantize())


def test_group_size_must_divide_the_input_dim_and_small_rows_are_one_group():
    assert Q.layer_group(64, 32) == 32
    assert Q.layer_group(16, 32) == 16  # a row no longer than the group: per-channel
    assert Q.layer_group(64, 0) == 64
    with pytest.raises(Q.QuantError, match="group size 24 does not divide its input dim 64"):
        Q.layer_group(64, 24, "x")
    with pytest.raises(Q.QuantError, match="in_proj_qkv: group size 48 does not divide"):
        Q.quantize_model(kernel_model(), 4, 48)


def test_a_shape_the_int4_kernel_refuses_runs_the_reference():
    w = torch.randn(8, 64)  # 8 output rows: not a multiple of 16
    qw = Q.QuantWeight.from_float(w, 4, 32)
    assert qw._kernel is None and not qw._dropped
    x = torch.randn(2, 64)
    assert torch.equal(qw(x), qw.reference(x))


def test_gates_router_embeddings_and_small_parameters_stay_full_precision():
    m = Q.quantize_model(kernel_model(), 4, 32)
    floats = {n for n, p in m.named_parameters()}
    for keep in (
        "embed_tokens.weight",
        "lm_head.weight",
        "mlp.gate.weight",
        "shared_expert_gate.weight",
        "in_proj_a.weight",
        "in_proj_b.weight",
        "conv1d.weight",
        "mem_key",
        "A_log",
        "input_layernorm",
    ):
        assert any(keep in n for n in floats), keep
    assert not any(
        n.endswith(("q_proj.weight", "out_proj.weight", "gate_up_proj", "experts.down_proj")) for n in floats
    )
