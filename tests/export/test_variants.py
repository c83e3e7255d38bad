"""The modeling file against Clover's model for every config variant it implements (GDN block
mixing, right conv and calibration switched off, a dense feed-forward, a tied head), in this
process: the training forward's logits, and cached decoding (commit, then denoise) against
Clover's ``step``."""

from __future__ import annotations

import pytest
import torch

from clover.bench.exactness import perturbed_tiny, rel_err
from clover.bench.hf_export import TINY_IDS

VARIANTS = {
    "causal mixing": dict(gdn_block_mixing="causal"),
    "no right conv": dict(gdn_right_conv=False),
    "no calibration": dict(gdn_block_calibration=False),
    "dense": dict(num_experts=0, intermediate_size=24),
    "tied, no shift": dict(tie_word_embeddings=True, shift_logits=False),
}


def twin(clover_model):
    """The modeling file's model with the Clover model's config and weights."""
    from clover.export.hf_modeling.configuration_clover import CloverConfig as HFConfig
    from clover.export.hf_modeling.modeling_clover import CloverForCausalLM

    d = {k: v for k, v in clover_model.config.to_dict().items() if k != "model_type"}
    hf = CloverForCausalLM(HFConfig(**d)).eval()
    missing, unexpected = hf.load_state_dict(clover_model.state_dict(), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}
    return hf


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_matches_clover(name):
    from clover.model import CloverForBlockDiffusion

    base = perturbed_tiny(0, **TINY_IDS)
    torch.manual_seed(0)
    model = CloverForBlockDiffusion(base.config.replace(**VARIANTS[name])).eval()
    own = model.state_dict()
    model.load_state_dict(
        {k: v for k, v in base.state_dict().items() if k in own and v.shape == own[k].shape}, strict=False
    )
    hf = twin(model)
    bs = model.config.block_size
    g = torch.Generator().manual_seed(2)
    x0 = torch.randint(0, 96, (2, 3 * bs + 3), generator=g)
    xt = x0.masked_fill(torch.rand(x0.shape, generator=g) < 0.4, 96)
    with torch.no_grad():
        assert rel_err(hf(x0, noisy_input_ids=xt).logits, model.forward_train(x0, xt).logits) <= 1e-5
        # decoding: two blocks committed, a masked block denoised, as the engine runs it
        c_cache, h_cache = model.new_cache(2), hf.new_cache(2)
        for cache, step in ((c_cache, model.step), (h_cache, hf.step)):
            step(cache, commit=x0[:, :bs])
        want = model.step(c_cache, commit=x0[:, bs : 2 * bs], denoise=xt[:, 2 * bs : 3 * bs])
        got = hf.step(h_cache, commit=x0[:, bs : 2 * bs], denoise=xt[:, 2 * bs : 3 * bs])
    assert rel_err(got, want) <= 1e-5


def test_padded_batch_decodes_each_row_as_alone():
    hf = twin(perturbed_tiny(0, **TINY_IDS))
    g = torch.Generator().manual_seed(3)
    rows = [torch.randint(0, 96, (n,), generator=g) for n in (5, 11, 8)]
    ids = torch.zeros(3, 11, dtype=torch.long)
    mask = torch.zeros(3, 11, dtype=torch.long)
    for i, r in enumerate(rows):  # left padding
        ids[i, 11 - len(r) :], mask[i, 11 - len(r) :] = r, 1
    out = hf.generate(ids, attention_mask=mask, max_new_tokens=12, pad_token_id=0)
    for i, r in enumerate(rows):
        alone = hf.generate(r[None], max_new_tokens=12)[0, len(r) :].tolist()
        got = out[i, 11:].tolist()
        assert got[: len(alone)] == alone and set(got[len(alone) :]) <= {0}
