"""Rows of very different history lengths attend in groups (``attention.row_groups``): the same
logits and caches as every row attending over the longest history with a mask."""

import torch

from clover.model import CloverForBlockDiffusion, ModelCache, preset
from clover.model.attention import row_groups
from clover.model.cache import AttnCache


def test_groups_split_where_a_row_needs_half_the_slots_or_less():
    groups = row_groups([288] * 8 + [3968], 32)
    assert [(rows.tolist(), w) for rows, w in groups] == [([8], 4000), (list(range(8)), 320)]
    assert row_groups([0, 32, 64], 32) is None  # little to save: one mask over all
    assert row_groups([64, 64], 32) is None
    assert [w for _, w in row_groups([0, 0, 0, 0, 512, 96], 8)] == [520, 104, 8]


def _model():
    torch.manual_seed(0)
    return CloverForBlockDiffusion(preset("tiny", block_size=8)).to(torch.float64).eval()


def _cache(model, lengths):
    g = torch.Generator().manual_seed(1)
    rows = [model.prefill(torch.randint(0, 90, (1, n), generator=g), 8)[0] for n in lengths]
    return ModelCache.cat(rows)


def _copy(cache):
    return cache.select(torch.arange(cache.batch_size))


@torch.inference_mode()
def test_grouped_passes_equal_the_padded_pass():
    model = _model()
    lengths = [8, 0, 160, 16, 8]
    assert row_groups(lengths, 16) is not None and row_groups(lengths, 8) is not None
    g = torch.Generator().manual_seed(2)
    commit = torch.randint(0, 90, (5, 8), generator=g)
    denoise = torch.full((5, 8), model.config.mask_token_id)
    denoise[:, :3] = torch.randint(0, 90, (5, 3), generator=g)
    for kw in ({"denoise": denoise}, {"commit": commit, "denoise": denoise}, {"commit": commit}):
        a, b = _cache(model, lengths), _cache(model, lengths)
        T = sum(t.shape[1] for t in kw.values())
        grouped = model.step(a, block_size=8, **kw)  # step groups the rows
        top = max(lengths)
        for c in b.layers:
            if isinstance(c, AttnCache):
                c.reserve(top + T)
        n_c, n_d = (kw[k].shape[1] if k in kw else 0 for k in ("commit", "denoise"))
        x = torch.cat(list(kw.values()), 1)
        padded = CloverForBlockDiffusion._pass(model, b, x, n_c, n_d, 8, top, False, None)  # one mask over all
        if grouped is not None:
            torch.testing.assert_close(grouped, padded, rtol=0, atol=1e-12)
        assert torch.equal(a.lengths, b.lengths)
        for ca, cb in zip(a.layers, b.layers):
            for name, t in vars(ca).items():
                n = max(a.lengths.tolist())
                ta, tb = (t[:, :n], getattr(cb, name)[:, :n]) if isinstance(ca, AttnCache) else (t, getattr(cb, name))
                torch.testing.assert_close(ta, tb, rtol=0, atol=1e-12)
