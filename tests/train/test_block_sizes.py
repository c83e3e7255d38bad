"""Training for parallel decoding: block sizes drawn per step (``TrainConfig.block_size_range``),
the same size in the data source and the loop, and the exactness invariant at every size a run
may draw."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from clover.model import CloverForBlockDiffusion, preset
from clover.train.objective import MaskingConfig
from clover.train.trainer import TrainConfig, Trainer
from tests.model.helpers import incremental_logits, make_model, noisy


def test_block_size_at_is_a_pure_function_of_seed_and_step_spread_over_the_range():
    cfg = TrainConfig(seed=3, block_size_range=[1, 64])
    sizes = [cfg.block_size_at(s) for s in range(3000)]
    assert sizes == [TrainConfig(seed=3, block_size_range=[1, 64]).block_size_at(s) for s in range(3000)]
    assert sizes != [TrainConfig(seed=4, block_size_range=[1, 64]).block_size_at(s) for s in range(3000)]
    assert min(sizes) == 1 and max(sizes) == 64 and len(set(sizes)) == 64
    # log-uniform: about as many steps at 1-7 (ln 8 / ln 65 = 50 %) as at 8-64
    small = sum(s < 8 for s in sizes) / len(sizes)
    assert 0.45 < small < 0.55
    assert Counter(sizes)[1] > Counter(sizes)[64]
    assert TrainConfig(block_size=16).block_size_at(7) == 16
    with pytest.raises(ValueError, match="block_size_range"):
        TrainConfig(block_size_range=[0, 8]).block_size_at(0)


@pytest.mark.parametrize("bs", [3, 16, 24, 48, 64])
@pytest.mark.parametrize("shift", [True, False])
def test_the_invariant_holds_at_sizes_a_run_draws(bs, shift):
    """Training-forward logits of masked blocks equal the engine's denoise logits, as in
    tests/model/test_invariant.py, at sizes that test does not cover (up to the bundled model's
    max_block_size of 64), with prompts ending mid-block and ragged last blocks."""
    m = make_model(shift=shift, block_size=bs, max_block_size=64)
    for L, P in ((150, 5), (150, 70), (2 * bs + 3, bs + 1)):
        g = torch.Generator().manual_seed(L + P)
        x0 = torch.randint(0, 96, (2, L), generator=g)
        xt = noisy(x0, m.config.mask_token_id, P, seed=P)
        ref = m.forward_train(x0, xt, bs).logits
        for b, lg in incremental_logits(m, x0, xt, P, bs).items():
            s = b * bs
            lo = 1 if (shift and s == 0) else 0
            assert (lg[:, lo:] - ref[:, s : s + lg.shape[1]][:, lo:]).abs().max().item() < 1e-10, (bs, L, P, b)


def _source(pad: int, cfg: TrainConfig):
    """Rows whose answer is filled with pad to the step's block size, as a recipe's source does."""

    def source(step: int) -> dict[str, torch.Tensor]:
        bs = cfg.block_size_at(step)
        g = torch.Generator().manual_seed(step)
        rows, T = [], 0
        for _ in range(4):
            p, a = int(torch.randint(3, 9, (1,), generator=g)), int(torch.randint(2, 12, (1,), generator=g))
            n = p + a + (-(p + a) % bs)
            rows.append((torch.randint(1, 60, (n,), generator=g), p))
            T = max(T, n)
        x0 = torch.full((4, T), pad)
        target, valid = torch.zeros(4, T, dtype=torch.bool), torch.zeros(4, T, dtype=torch.bool)
        for i, (ids, p) in enumerate(rows):
            x0[i, : len(ids)], valid[i, : len(ids)], target[i, p : len(ids)] = ids, True, True
        return {"x0": x0, "target": target, "valid": valid}

    return source


def test_a_run_with_drawn_block_sizes_trains_at_each_and_resumes_bit_exactly(tmp_path):
    def run(until=None, resume=False):
        torch.manual_seed(0)
        m = CloverForBlockDiffusion(preset("tiny", block_size=8, max_block_size=64, shift_logits=False))
        cfg = TrainConfig(
            steps=12,
            lr=3e-3,
            warmup=2,
            block_size=8,
            ckpt_every=100,
            log_every=100,
            seed=1,
            block_size_range=[1, 64],
            masking=MaskingConfig(samples=1),
        )
        t = Trainer(m, _source(0, cfg), cfg, tmp_path)
        if resume:
            t.resume()
        return t.fit(progress=False, until=until)

    full = run()
    assert len({f["block_size"] for f in full}) >= 6 and all(torch.isfinite(torch.tensor(f["loss"])) for f in full)
    run(until=5)
    rest = run(resume=True)
    assert [f["loss"] for f in rest] == [f["loss"] for f in full[5:]]


def test_the_recipe_option_is_set_and_turned_off_by_config():
    from clover.airspace.diffusion_recipe import Airspace2Recipe
    from clover.train.setup import SetupError, apply_overrides

    r = Airspace2Recipe()
    assert r.train.block_size_range == [1, 64]  # the airspace2 recipe trains at every size
    apply_overrides(r, {"train": {"block_size_range": [2, 8]}}, "cfg.json")
    assert r.train.block_size_range == [2, 8] and {r.train.block_size_at(s) for s in range(200)} == set(range(2, 9))
    apply_overrides(r, {"train": {"block_size_range": None}}, "cfg.json")
    assert r.train.block_size_range is None and r.train.block_size_at(5) == 32
    with pytest.raises(SetupError, match="train field 'lr' must be float"):
        apply_overrides(r, {"train": {"lr": None}}, "cfg.json")


def test_a_masking_override_changes_only_the_fields_it_names():
    from clover.airspace.diffusion_recipe import Airspace2Recipe
    from clover.train.setup import SetupError, apply_overrides

    r = Airspace2Recipe()
    before = r.train.masking
    assert before.samples == 2 and before.confidence == 0.0  # the recipe's own, not MaskingConfig's defaults
    apply_overrides(r, {"train": {"masking": {"confidence": 1.0}}}, "cfg.json")
    m = r.train.masking
    assert m.confidence == 1.0 and (m.samples, m.t_min, m.weighting, m.complementary) == (2, 0.05, "elbo", True)
    with pytest.raises(SetupError, match="unknown masking field"):
        apply_overrides(r, {"train": {"masking": {"lambda": 1.0}}}, "cfg.json")
    with pytest.raises(SetupError, match="samples must be >= 1"):
        apply_overrides(r, {"train": {"masking": {"samples": 0}}}, "cfg.json")
