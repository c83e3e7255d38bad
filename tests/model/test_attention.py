"""Attention fast paths against their references: grouped heads without repeated K/V, no mask
where every key is seen, and the in-place cache pass against the concatenating one."""

import pytest
import torch

from clover.model import CloverForBlockDiffusion, preset
from clover.model.attention import Attention, attend, attend_reference, step_mask
from clover.model.cache import AttnCache
from clover.model.layers import RotaryEmbedding

DTYPES = {torch.float64: 1e-12, torch.float32: 1e-5}


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("nh,nkv", [(4, 4), (4, 2), (4, 1), (6, 2)])
@pytest.mark.parametrize("Tq,Tk", [(1, 1), (5, 13), (8, 40)])
def test_attend_equals_the_reference(dtype, nh, nkv, Tq, Tk):
    g = torch.Generator().manual_seed(Tq * 100 + Tk)
    B, D = 3, 16
    q = torch.randn(B, nh, Tq, D, generator=g, dtype=dtype)
    k, v = (torch.randn(B, Tk, nkv, D, generator=g, dtype=dtype) for _ in range(2))
    mask = torch.rand(B, Tq, Tk, generator=g) < 0.6
    mask[..., 0] = True  # every query sees a key
    tol = DTYPES[dtype]
    for m in (mask, mask[:1], None):
        torch.testing.assert_close(attend(q, k, v, m), attend_reference(q, k, v, m), atol=tol, rtol=tol)


def test_step_mask_is_the_per_row_block_causal_mask():
    lengths, T, bs = torch.tensor([0, 8, 4, 8]), 12, 4
    width = 8 + T
    got = step_mask(lengths, T, width, bs)
    for b, L in enumerate(lengths.tolist()):
        for i in range(T):
            for j in range(width):
                want = j < L or (L <= j < L + T and (j - L) // bs <= i // bs)
                assert bool(got[b, i, j]) == want, (b, i, j)


def _layer(nh, nkv, dtype, seed=0):
    torch.manual_seed(seed)
    cfg = preset("tiny", num_attention_heads=nh, num_key_value_heads=nkv)
    att = Attention(cfg).to(dtype)
    for p in att.parameters():
        torch.nn.init.normal_(p, std=0.3)
    return att, RotaryEmbedding(cfg)


def _cache_pair(lengths, nkv, dtype, capacity, seed=1):
    """Two identical attention caches with random history up to ``lengths`` and random scratch past it."""
    g = torch.Generator().manual_seed(seed)
    k, v = (torch.randn(len(lengths), capacity, nkv, 16, generator=g, dtype=dtype) for _ in range(2))
    return AttnCache(k.clone(), v.clone()), AttnCache(k, v)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("nh,nkv", [(2, 1), (4, 2), (4, 4)])
@pytest.mark.parametrize(
    "lengths,n_commit,n_denoise",
    [
        ([8, 8], 0, 4),  # denoise over equal histories: no mask at all
        ([8, 8], 0, 3),  # a ragged last block
        ([8, 8], 4, 0),  # a one-block commit
        ([0, 0], 12, 4),  # a prefill of three blocks fused with a denoise pass
        ([8, 0, 4], 0, 4),  # ragged histories
        ([8, 0, 4], 8, 4),
        ([12, 4], 4, 0),
    ],
)
def test_in_place_step_equals_the_concatenating_reference(dtype, nh, nkv, lengths, n_commit, n_denoise):
    att, rope_emb = _layer(nh, nkv, dtype)
    bs, T = 4, n_commit + n_denoise
    L = torch.tensor(lengths)
    for capacity in (max(lengths), max(lengths) + T + 5):  # too small (grows), large enough
        fast, ref = _cache_pair(lengths, nkv, dtype, capacity)
        x = torch.randn(len(lengths), T, 32, dtype=dtype)
        rope = rope_emb(L[:, None] + torch.arange(T), dtype)
        with torch.no_grad():
            a = att.forward_step(x, rope, fast, L, n_commit, bs)
            b = att.forward_step_reference(x, rope, ref, L, n_commit, bs)
        tol = DTYPES[dtype]
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)
        for row, n in enumerate(lengths):  # the history after the pass: same in both
            end = n + n_commit
            torch.testing.assert_close(fast.k[row, :end], ref.k[row, :end], atol=tol, rtol=tol)
            torch.testing.assert_close(fast.v[row, :end], ref.v[row, :end], atol=tol, rtol=tol)


def test_capacity_is_allocated_up_front_and_grows_past_it():
    torch.manual_seed(0)
    m = CloverForBlockDiffusion(preset("tiny", block_size=4)).double().eval()
    x = torch.randint(0, 96, (2, 52))
    outs, caps = [], []
    for capacity in (0, 40, 64):
        c = m.new_cache(2, capacity=capacity)
        assert all(layer.k.shape[1] == capacity for layer in c.layers if isinstance(layer, AttnCache))
        m.step(c, commit=x[:, :8], block_size=4)
        m.step(c, commit=x[:, 8:48], block_size=4)
        outs.append(m.step(c, denoise=x[:, 48:52], block_size=4))
        caps.append({layer.k.shape[1] for layer in c.layers if isinstance(layer, AttnCache)})
    assert caps == [{64}, {80}, {64}]  # 0 → at least 64 slots; 40 doubles when 48 are needed; 64 kept
    for o in outs[1:]:
        torch.testing.assert_close(o, outs[0], atol=1e-12, rtol=1e-12)


def test_a_cache_in_another_dtype_takes_the_reference_pass():
    att, rope_emb = _layer(2, 1, torch.float32)
    fast, ref = _cache_pair([4], 1, torch.float64, 8)
    x = torch.randn(1, 4, 32)
    rope = rope_emb(4 + torch.arange(4)[None], torch.float32)
    a = att.forward_step(x, rope, fast, torch.tensor([4]), 0, 4)
    b = att.forward_step_reference(x, rope, ref, torch.tensor([4]), 0, 4)
    torch.testing.assert_close(a, b, atol=0, rtol=0)
    assert torch.equal(fast.k, ref.k)  # nothing written past the history either
