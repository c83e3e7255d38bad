"""The engine's sampler (``choose_selected``, the selected positions only) against the reference
(``choose``, every position): the same figures at every selected position."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from clover.engine import SamplingParams
from clover.engine.sampler import choose, choose_selected

V, BS, MASK = 50, 8, 3


def _requests(n: int, sampled: set[int]):
    reqs = []
    for r in range(n):
        if r in sampled:
            p = SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=r)
            reqs.append(SimpleNamespace(generator=torch.Generator().manual_seed(r), params=p))
        else:
            reqs.append(SimpleNamespace(generator=None, params=SamplingParams()))
    return reqs


def _case(seed: int, rows: int, density: float):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, BS, V, generator=g) * 3
    sel = torch.rand(rows, BS, generator=g) < density
    x = torch.randint(0, V, (rows, BS), generator=g)
    x[sel] = MASK
    allowed = [{} for _ in range(rows)]
    allowed[0][1] = torch.tensor([5, 7, 11])  # a constrained slot, selected or not
    allowed[-1][BS - 1] = torch.tensor([2])
    return logits, sel, x, allowed


@pytest.mark.parametrize("top", [0, 3])
@pytest.mark.parametrize("density", [0.0, 0.4, 1.0])
@pytest.mark.parametrize("sampled", [set(), {1}, {0, 2}])
def test_selected_positions_equal_the_reference(top, density, sampled):
    for seed in range(3):
        logits, sel, x, allowed = _case(seed, 3, density)
        sel[0, 1] = density > 0  # the constrained slot is selected whenever anything is
        ref = choose(logits.clone(), sel, x, _requests(3, sampled), allowed, MASK, top)
        got = choose_selected(logits.clone(), sel, x, _requests(3, sampled), allowed, MASK, top)
        assert torch.equal(got.tok, ref.tok)  # x wherever nothing is selected
        assert torch.equal(got.conf, ref.conf)  # -1 wherever nothing is selected
        for name in ("cur_p", "logp"):
            assert torch.equal(getattr(got, name)[sel], getattr(ref, name)[sel]), name
        if top:
            assert torch.equal(got.top_ids[sel], ref.top_ids[sel])
            assert torch.equal(got.top_lp[sel], ref.top_lp[sel])
        else:
            assert got.top_ids is None and got.top_lp is None
        if sel[0, 1]:
            assert int(got.tok[0, 1]) in (5, 7, 11)


def test_the_mask_token_is_never_chosen():
    logits = torch.zeros(1, BS, V)
    logits[..., MASK] = 100.0
    sel = torch.ones(1, BS, dtype=torch.bool)
    ch = choose_selected(logits, sel, torch.full((1, BS), MASK), _requests(1, set()), [{}], MASK)
    assert not (ch.tok == MASK).any()
