"""The MoE expert paths: the grouped GEMM against the per-expert loop it replaces."""

import pytest
import torch

from clover.model import preset
from clover.model.layers import MoE


def _moe(dtype, E=8, k=2, seed=0):
    torch.manual_seed(seed)
    moe = MoE(preset("tiny", num_experts=E, num_experts_per_tok=k)).to(dtype)
    for p in moe.parameters():
        torch.nn.init.normal_(p, std=0.2)
    return moe


def _route(moe, h):
    w, i = torch.nn.functional.linear(h, moe.gate.weight).float().softmax(-1).topk(moe.gate.top_k, -1)
    return (w / w.sum(-1, keepdim=True)).to(h.dtype), i


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n", [1, 5, 64, 300])
def test_grouped_gemm_equals_the_per_expert_loop(dtype, n):
    """Random routing, gradients included (the grouped GEMM's backward runs on a CPU too)."""
    moe = _moe(dtype, seed=n)
    h = torch.randn(n, 32, dtype=dtype, requires_grad=True)
    w, i = _route(moe, h)
    a, b = moe._grouped_mm(h, w, i), moe._grouped(h, w, i)
    tol = 1e-6 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(a, b, atol=tol, rtol=tol)
    params = [h, moe.experts.gate_up_proj, moe.experts.down_proj]
    ga = torch.autograd.grad(a.float().square().sum(), params, retain_graph=True)
    gb = torch.autograd.grad(b.float().square().sum(), params)
    for x, y in zip(ga, gb):
        torch.testing.assert_close(x, y, atol=10 * tol, rtol=10 * tol)


def test_experts_with_no_tokens():
    """Experts 0, 3 and the last get nothing; expert 1 gets every token's first choice."""
    moe = _moe(torch.float32)
    n = 40
    h = torch.randn(n, 32)
    i = torch.stack([torch.full((n,), 1), torch.randint(4, 7, (n,)).where(torch.arange(n) % 3 > 0, 2)], 1)
    w = torch.rand(n, 2).softmax(-1)
    torch.testing.assert_close(moe._grouped_mm(h, w, i), moe._grouped(h, w, i), atol=1e-6, rtol=1e-6)
    # every token on one expert, the others empty
    i1 = torch.full((n, 2), 5).scatter(1, torch.ones(n, 1, dtype=torch.long), 6)
    torch.testing.assert_close(moe._grouped_mm(h, w, i1), moe._grouped(h, w, i1), atol=1e-6, rtol=1e-6)


def test_dispatch():
    """Grouped GEMM for plain fp32/bf16 experts past the dense range; the loop for fp64."""
    moe = _moe(torch.float32)
    h = torch.randn(64, 32)
    assert moe._grouped_mm_ok(h)
    assert not _moe(torch.float64)._grouped_mm_ok(h.double())
    calls = []
    moe._grouped = lambda *a: calls.append("loop")  # never taken for fp32
    moe._grouped_mm = lambda h, w, i: calls.append("mm") or torch.zeros_like(h)
    moe(h)
    assert calls == ["mm"]


def test_quantized_experts_keep_the_loop():
    """``QuantExperts`` has no grouped GEMM: its MoE runs the per-expert loop."""
    from clover.model import CloverForBlockDiffusion
    from clover.model.quant import quantize_model

    torch.manual_seed(0)
    m = CloverForBlockDiffusion(preset("tiny", num_experts=8)).eval()
    moe = m.model.layers[0].mlp
    h = torch.randn(64, 32)
    ref = moe(h)[0]
    quantize_model(m, 8)
    assert moe.experts.__class__.__name__ == "QuantExperts"
    assert not moe._grouped_mm_ok(h)
    with torch.no_grad():
        y = moe(h)[0]
    assert (y - ref).abs().max() < 0.05 * ref.abs().max()


def test_routing_stats_count_real_tokens_only():
    moe = _moe(torch.float32)
    h = torch.randn(3, 7, 32)
    real = torch.rand(3, 7) < 0.6
    _, stats = moe(h, real)
    flat = h.reshape(-1, 32)[real.reshape(-1)]
    probs = torch.nn.functional.linear(flat, moe.gate.weight).float().softmax(-1)
    counts = torch.bincount(probs.topk(2, -1).indices.reshape(-1), minlength=8).float()
    torch.testing.assert_close(stats[0], counts, atol=0, rtol=0)
    torch.testing.assert_close(stats[1], probs.sum(0), atol=1e-5, rtol=1e-5)
