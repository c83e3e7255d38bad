import pytest
import torch

from clover.ops.delta_rule import delta_rule_chunked, delta_rule_recurrent


def _inputs(B=2, T=150, H=3, dk=8, dv=5, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(B, T, H, dk, generator=g, dtype=dtype), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, dk, generator=g, dtype=dtype), dim=-1)
    v = torch.randn(B, T, H, dv, generator=g, dtype=dtype)
    gg = -torch.rand(B, T, H, generator=g, dtype=dtype) * 2
    beta = torch.rand(B, T, H, generator=g, dtype=dtype)
    S0 = torch.randn(B, H, dk, dv, generator=g, dtype=dtype)
    return q, k, v, gg, beta, S0


@pytest.mark.parametrize("T", [1, 7, 64, 150])
def test_chunked_equals_recurrent(T):
    q, k, v, g, beta, S0 = _inputs(T=T)
    bl = sorted({0, T // 3, T - 1})
    o1, s1 = delta_rule_recurrent(q, k, v, g, beta, S0, bl)
    o2, s2 = delta_rule_chunked(q, k, v, g, beta, S0, bl)
    assert torch.allclose(o1, o2, atol=1e-12)
    assert torch.allclose(s1, s2, atol=1e-12)


@pytest.mark.parametrize("block", [1, 3, 32, 64, 100])
def test_states_at_every_block_boundary(block):
    q, k, v, g, beta, S0 = _inputs(T=130)
    bl = list(range(block - 1, 130, block))
    _, s1 = delta_rule_recurrent(q, k, v, g, beta, S0, bl)
    _, s2 = delta_rule_chunked(q, k, v, g, beta, S0, bl, output=False)
    assert s2.shape[1] == len(bl)
    assert torch.allclose(s1, s2, atol=1e-12)


def test_gradients_match():
    ins = [t.requires_grad_() for t in _inputs(T=70)]
    bl = [10, 69]
    grads = []
    for fn in (delta_rule_recurrent, delta_rule_chunked):
        o, s = fn(*ins, boundaries=bl)
        loss = (o * torch.linspace(-1, 1, o.shape[-1], dtype=o.dtype)).sum() + s.pow(2).sum()
        grads.append(torch.autograd.grad(loss, ins))
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-10)


def test_matches_transformers_qwen3_5():
    hf = pytest.importorskip("transformers.models.qwen3_5_moe.modeling_qwen3_5_moe")
    q, k, v, g, beta, S0 = _inputs(T=100, dtype=torch.float32)
    # transformers normalises q/k itself; ours expects them normalised (they already are)
    o_ref, s_ref = hf.torch_chunk_gated_delta_rule(
        q, k, v, g, beta, initial_state=S0, output_final_state=True, use_qk_l2norm_in_kernel=True
    )
    o, s = delta_rule_chunked(q, k, v, g, beta, S0, [99])
    assert torch.allclose(o, o_ref, atol=1e-4)
    assert torch.allclose(s[:, 0], s_ref, atol=1e-4)
    o_rec, s_rec = hf.torch_recurrent_gated_delta_rule(
        q, k, v, g, beta, initial_state=S0, output_final_state=True, use_qk_l2norm_in_kernel=True
    )
    assert torch.allclose(s[:, 0], s_rec, atol=1e-4)
