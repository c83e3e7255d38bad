"""The fla dispatch of the gated delta rule: segment chaining and state assembly against the
chunked PyTorch reference, with CPU stand-ins for fla's kernels (same signatures), and the real
kernels on a GPU where fla is installed."""

import pytest
import torch

from clover.ops import delta_rule as dr
from clover.ops.delta_rule import FLA_RECURRENT_MAX, delta_rule, delta_rule_chunked, delta_rule_recurrent
from tests.ops.test_delta_rule import _inputs


class FakeFla:
    """fla's ``chunk_gated_delta_rule`` and ``fused_recurrent_gated_delta_rule`` on a CPU, built
    from the reference kernels, checking the calls as fla would; records (kernel, length)."""

    def __init__(self):
        self.calls = []

    def _check(self, q, k, v, g, beta, initial_state, use_qk_l2norm_in_kernel, cu_seqlens, head_first):
        B, T, H, dk = q.shape
        assert k.shape == q.shape and v.shape[:3] == (B, T, H) and g.shape == beta.shape == (B, T, H)
        assert initial_state.shape == (B, H, dk, v.shape[-1])
        assert not use_qk_l2norm_in_kernel and cu_seqlens is None and not head_first
        assert q.dtype == k.dtype == v.dtype

    def chunk(
        self,
        q,
        k,
        v,
        g,
        beta,
        scale=None,
        initial_state=None,
        output_final_state=False,
        use_qk_l2norm_in_kernel=False,
        cu_seqlens=None,
        head_first=False,
    ):
        self._check(q, k, v, g, beta, initial_state, use_qk_l2norm_in_kernel, cu_seqlens, head_first)
        assert q.dtype != torch.float32, "fla's chunked kernel refuses fp32"
        self.calls.append(("chunk", q.shape[1]))
        o, st = delta_rule_chunked(q, k, v, g, beta, initial_state, [q.shape[1] - 1], scale)
        return o, (st[:, 0] if output_final_state else None)

    def recurrent(
        self,
        q,
        k,
        v,
        g=None,
        gk=None,
        gv=None,
        beta=None,
        scale=None,
        initial_state=None,
        output_final_state=False,
        use_qk_l2norm_in_kernel=False,
        cu_seqlens=None,
    ):
        self._check(q, k, v, g, beta, initial_state, use_qk_l2norm_in_kernel, cu_seqlens, False)
        assert not (torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, g, beta, initial_state)))
        self.calls.append(("recurrent", q.shape[1]))
        o, st = delta_rule_recurrent(q, k, v, g, beta, initial_state, [q.shape[1] - 1], scale)
        return o, (st[:, 0] if output_final_state else None)


@pytest.fixture
def fake(monkeypatch):
    f = FakeFla()
    monkeypatch.setattr(dr, "_fla_kernels", lambda x: (f.chunk, f.recurrent))
    return f


@pytest.mark.parametrize("output", [True, False])
@pytest.mark.parametrize(
    "T,bounds",
    [
        (40, list(range(7, 40, 8))),  # every block of 8: short segments, recurrent kernel
        (150, [99, 149]),  # a long segment (chunked kernel), then a short one
        (150, [149, 20, 20, 75]),  # unsorted, repeated: states come back in the order asked
        (30, [9]),  # outputs run past the last boundary
        (1, [0]),
        (64, [FLA_RECURRENT_MAX - 1]),
        (65, [64]),
    ],
)
def test_fla_dispatch_equals_the_reference(fake, T, bounds, output):
    q, k, v, g, beta, S0 = _inputs(T=T)
    with torch.no_grad():
        o1, s1 = delta_rule(q, k, v, g, beta, S0, bounds, output=output)
        o2, s2 = delta_rule_chunked(q, k, v, g, beta, S0, bounds, output=output)
    assert fake.calls, "the fla path ran"
    assert s1.shape == s2.shape and s1.dtype == s2.dtype
    torch.testing.assert_close(s1, s2, atol=1e-12, rtol=1e-12)
    if output:
        torch.testing.assert_close(o1, o2, atol=1e-12, rtol=1e-12)
    else:
        assert o1 is None
    for kind, n in fake.calls:  # the kernel choice: short segments recurrent, long ones chunked
        assert kind == ("recurrent" if n <= FLA_RECURRENT_MAX else "chunk")


def test_segments_are_cut_at_the_boundaries(fake):
    q, k, v, g, beta, S0 = _inputs(T=100)
    with torch.no_grad():
        delta_rule(q, k, v, g, beta, S0, [9, 89], output=True)
    assert fake.calls == [("recurrent", 10), ("chunk", 80), ("recurrent", 10)]


def test_under_autograd_every_segment_takes_the_chunked_kernel(fake):
    ins = [t.requires_grad_() for t in _inputs(T=70)]
    bl = [10, 40, 69]
    grads = []
    for fn in (delta_rule, delta_rule_chunked):
        o, s = fn(*ins, boundaries=bl)
        loss = (o * torch.linspace(-1, 1, o.shape[-1], dtype=o.dtype)).sum() + s.pow(2).sum()
        grads.append(torch.autograd.grad(loss, ins))
    assert {kind for kind, _ in fake.calls} == {"chunk"}
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)


def test_fp32_goes_to_the_chunked_kernel_in_bf16(fake):
    q, k, v, g, beta, S0 = _inputs(T=100, dtype=torch.float32)
    with torch.no_grad():
        o1, s1 = delta_rule(q, k, v, g, beta, S0, [99])
        o2, s2 = delta_rule_chunked(q, k, v, g, beta, S0, [99])
    assert fake.calls == [("chunk", 100)]
    assert o1.dtype == torch.float32 and s1.dtype == torch.float32
    torch.testing.assert_close(o1, o2, atol=5e-2, rtol=5e-2)
    torch.testing.assert_close(s1, s2, atol=5e-2, rtol=5e-2)


def test_the_model_keeps_its_invariant_through_the_fla_path(fake):
    """Training forward and cached decoding both through the (stand-in) fla kernels."""
    from tests.model.helpers import make_model
    from tests.model.test_invariant import _assert_invariant

    m = make_model(block_size=4)
    _assert_invariant(m)  # parameters need grad: every segment chunked
    assert {kind for kind, _ in fake.calls} == {"chunk"}
    fake.calls.clear()
    with torch.no_grad():
        _assert_invariant(m)  # blocks of 4 are short: recurrent
    assert {kind for kind, _ in fake.calls} == {"recurrent"}


def test_no_fla_off_cuda():
    assert dr._fla_kernels(torch.zeros(1)) is None


def _fla_importable() -> bool:
    try:
        import fla.ops.gated_delta_rule  # noqa: F401
    except Exception:
        return False
    return True


gpu = pytest.mark.skipif(
    not torch.cuda.is_available() or not _fla_importable(), reason="needs CUDA and flash-linear-attention"
)


@gpu
@pytest.mark.parametrize("T,bounds", [(32, [31]), (256, list(range(31, 256, 32))), (300, [63, 299])])
def test_real_fla_equals_the_reference(T, bounds):
    q, k, v, g, beta, S0 = (t.float().cuda() for t in _inputs(B=2, T=T, H=4, dk=64, dv=64))
    assert dr._fla_kernels(q) is not None
    with torch.no_grad():
        o1, s1 = delta_rule(q, k, v, g, beta, S0, bounds)
        o2, s2 = delta_rule_chunked(q, k, v, g, beta, S0, bounds)
    tol = dict(atol=3e-2, rtol=3e-2)  # the chunked kernel reads q/k/v in bf16
    torch.testing.assert_close(s1, s2, **tol)
    torch.testing.assert_close(o1, o2, **tol)


@gpu
def test_real_fla_gradients():
    ins = [t.float().cuda().requires_grad_() for t in _inputs(B=1, T=128, H=4, dk=64, dv=64)]
    grads = []
    for fn in (delta_rule, delta_rule_chunked):
        o, s = fn(*ins, boundaries=[63, 127])
        grads.append(torch.autograd.grad(o.square().sum() + s.square().sum(), ins))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=5e-2 * b.abs().max().item(), rtol=5e-2)
