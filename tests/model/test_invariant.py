"""The exactness invariant (docs/architecture.md, Exactness rules): the training forward's noisy logits equal the
engine's denoise logits."""

import pytest
import torch

from tests.model.helpers import incremental_logits, make_model, noisy


def _max_err(model, L=37, P=5, B=3, seed=0):
    bs = model.config.block_size
    g = torch.Generator().manual_seed(seed)
    x0 = torch.randint(0, 96, (B, L), generator=g)
    xt = noisy(x0, model.config.mask_token_id, P, seed=seed)
    ref = model.forward_train(x0, xt, bs).logits
    err = 0.0
    for b, lg in incremental_logits(model, x0, xt, P, bs).items():
        s = b * bs
        lo = 1 if (model.config.shift_logits and s == 0) else 0  # token 0 is never predicted
        err = max(err, (lg[:, lo:] - ref[:, s : s + lg.shape[1]][:, lo:]).abs().max().item())
    return err, ref.abs().max().item()


def _assert_invariant(m):
    # P=5 ends mid-block for bs>1; L=37 gives a ragged last block for most sizes
    for L, P in ((37, 5), (40, 8), (12, 3)):
        err, scale = _max_err(m, L=L, P=P)
        assert scale > 0.5
        assert err < 1e-10, (L, P, err)


@pytest.mark.parametrize("shift", [True, False])
@pytest.mark.parametrize("bs", [1, 2, 4, 8, 32])
@pytest.mark.parametrize("all_attention", [False, True])
def test_training_forward_equals_cached_decoding(shift, bs, all_attention):
    _assert_invariant(make_model(shift=shift, block_size=bs, all_attention=all_attention))


# the GDN ablations of CloverConfig (clover/model/gdn.py)
VARIANTS = {
    "causal": dict(gdn_block_mixing="causal"),
    "no_right_conv": dict(gdn_right_conv=False),
    "no_calibration": dict(gdn_block_calibration=False),
    "neither": dict(gdn_right_conv=False, gdn_block_calibration=False),
}


@pytest.mark.parametrize("shift", [True, False])
@pytest.mark.parametrize("bs", [1, 4, 8])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_ablation_variants_keep_the_invariant(variant, bs, shift):
    _assert_invariant(make_model(shift=shift, block_size=bs, **VARIANTS[variant]))


@pytest.mark.parametrize("variant", ["default", "causal"])
def test_fused_commit_and_denoise_equals_two_passes(variant):
    m = make_model(block_size=4, **VARIANTS.get(variant, {}))
    x = torch.randint(0, 96, (2, 12))
    c1 = m.new_cache(2)
    m.step(c1, commit=x[:, :4], block_size=4)
    m.step(c1, commit=x[:, 4:8], block_size=4)
    a = m.step(c1, denoise=x[:, 8:12], block_size=4)
    c2 = m.new_cache(2)
    m.step(c2, commit=x[:, :4], block_size=4)
    b = m.step(c2, commit=x[:, 4:8], denoise=x[:, 8:12], block_size=4)
    assert torch.allclose(a, b, atol=1e-12)
    for l1, l2 in zip(c1.layers, c2.layers):
        for t1, t2 in zip(vars(l1).values(), vars(l2).values()):
            assert torch.allclose(
                t1[:, : t2.shape[1]] if t1.dim() == 4 and t1.shape[1] != t2.shape[1] else t1,
                t2[:, : t1.shape[1]] if t1.dim() == 4 and t1.shape[1] != t2.shape[1] else t2,
            )


@pytest.mark.parametrize("variant", ["default", "causal"])
def test_denoise_reads_but_never_writes_the_cache(variant):
    from clover.model.cache import AttnCache

    m = make_model(block_size=4, **VARIANTS.get(variant, {}))
    x = torch.randint(0, 96, (1, 8))
    c = m.new_cache(1)
    m.step(c, commit=x[:, :4], block_size=4)
    # the history: GDN state and conv tail, attention k/v up to the committed length (the slots
    # past it are the attention pass's scratch, which nothing reads as history)
    history = lambda: [t[:, :4] if isinstance(l, AttnCache) else t for l in c.layers for t in vars(l).values()]
    before = [t.clone() for t in history()]
    m.step(c, denoise=x[:, 4:8], block_size=4)
    assert all(torch.equal(a, b) for a, b in zip(before, history()))
    assert int(c.lengths[0]) == 4


def test_rows_with_different_history_lengths_in_one_batch():
    """Cache rows of different lengths joined with ModelCache.cat decode like separate rows."""
    from clover.model import ModelCache

    m = make_model(block_size=4)
    xa, xb = torch.randint(0, 96, (1, 12)), torch.randint(0, 96, (1, 4))
    ca, cb = m.new_cache(1), m.new_cache(1)
    m.step(ca, commit=xa[:, :8], block_size=4)
    m.step(cb, commit=xb, block_size=4)
    blk = torch.randint(0, 96, (2, 4))
    la = m.step(ModelCache.cat([ca]).select([0]), denoise=blk[:1], block_size=4)
    lb = m.step(cb.select([0]), denoise=blk[1:], block_size=4)
    both = m.step(ModelCache.cat([ca, cb]), denoise=blk, block_size=4)
    assert torch.allclose(both[0], la[0], atol=1e-10) and torch.allclose(both[1], lb[0], atol=1e-10)


def test_cat_keeps_last_logits_when_a_row_has_none():
    from clover.model import ModelCache

    m = make_model(shift=True, block_size=8)
    a, _ = m.prefill(torch.randint(0, 96, (1, 8)), 8)
    b, _ = m.prefill(torch.randint(0, 96, (1, 3)), 8)  # shorter than a block: no clean logit yet
    blk = torch.full((1, 8), m.config.mask_token_id)
    alone = m.step(a.select([0]), denoise=blk, block_size=8)
    both = m.step(ModelCache.cat([a, b]), denoise=blk.repeat(2, 1), block_size=8)
    assert torch.allclose(alone[0], both[0], atol=1e-10)
