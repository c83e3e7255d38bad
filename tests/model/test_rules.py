"""docs/architecture.md, Exactness rules: each rule holds, and breaking it breaks the invariant (errors of order 1)."""

import pytest
import torch

from clover.model.gdn import GatedDeltaNetMixer
from clover.ops.delta_rule import delta_rule_recurrent
from tests.model.helpers import make_model, noisy


def _setup(bs=4, L=14, P=6, shift=True):
    m = make_model(shift=shift, block_size=bs)
    x0 = torch.randint(0, 96, (2, L), generator=torch.Generator().manual_seed(1))
    xt = noisy(x0, m.config.mask_token_id, P)
    return m, x0, xt, m.forward_train(x0, xt, bs).logits


def test_rule1_prompt_tail_lives_in_the_first_generation_block():
    m, x0, xt, ref = _setup()
    cache, tail = m.prefill(x0[:, :6], 4)
    assert int(cache.lengths[0]) == 4 and tail.shape[1] == 2  # only complete blocks cached
    good = m.step(cache, denoise=xt[:, 4:8], block_size=4)
    assert torch.allclose(good, ref[:, 4:8], atol=1e-10)
    # AR-style prefill: the tail pushed into the caches, then the rest of the block denoised
    bad_cache = m.new_cache(2)
    m.step(bad_cache, commit=x0[:, :4], block_size=4)
    m.step(bad_cache, commit=x0[:, 4:6], block_size=4)
    bad_cache.lengths -= 2  # pretend the position bookkeeping is right; the state is not
    bad_cache.lengths += 2
    try:
        bad = m.step(bad_cache, denoise=xt[:, 6:8], block_size=2)
    except ValueError:
        return  # the API refuses an off-boundary cache: the wrong prefill cannot even be expressed
    assert (bad - ref[:, 6:8]).abs().max() > 1e-3


def test_rule2_conv_context_comes_from_clean_history():
    m, x0, xt, ref = _setup(bs=2, L=10, P=4)  # bs < K-1: the context spans several blocks
    cache, _ = m.prefill(x0[:, :4], 2)
    m.step(cache, commit=x0[:, 4:6], block_size=2)
    assert torch.allclose(m.step(cache, denoise=xt[:, 6:8], block_size=2), ref[:, 6:8], atol=1e-10)
    for c in cache.layers:
        if hasattr(c, "tail"):
            c.tail = torch.zeros_like(c.tail)  # forget the context across the block start
    assert (m.step(cache, denoise=xt[:, 6:8], block_size=2) - ref[:, 6:8]).abs().max() > 1e-3


def test_rule3_only_causal_features_write_the_state():
    torch.manual_seed(0)
    cfg = make_model().config
    mix = GatedDeltaNetMixer(cfg).double()
    x = torch.randn(2, 16, cfg.hidden_size, dtype=torch.float64)
    with torch.no_grad():
        mix.conv_right.normal_()
    cache = type("C", (), {})()
    cache.S = torch.zeros(2, mix.Hv, mix.dk, mix.dv, dtype=torch.float64)
    cache.tail = torch.zeros(2, mix.K - 1, mix.conv_dim, dtype=torch.float64)
    mix.forward_step(x, cache, 16, 4)
    S_trained = cache.S.clone()
    with torch.no_grad():
        mix.conv_right.zero_()
    cache.S.zero_()
    cache.tail.zero_()
    mix.forward_step(x, cache, 16, 4)
    assert torch.allclose(S_trained, cache.S)  # the right branch never touches history


def test_gdn_state_equals_reference_delta_rule():
    torch.manual_seed(0)
    cfg = make_model().config
    mix = GatedDeltaNetMixer(cfg).double()
    x = torch.randn(1, 11, cfg.hidden_size, dtype=torch.float64)
    cache = type("C", (), {})()
    cache.S = torch.zeros(1, mix.Hv, mix.dk, mix.dv, dtype=torch.float64)
    cache.tail = torch.zeros(1, mix.K - 1, mix.conv_dim, dtype=torch.float64)
    mix.forward_step(x[:, :8], cache, 8, 4)  # two blocks
    mix.forward_step(x[:, 8:], cache, 3, 4)  # a ragged third
    # reference: HF-style causal conv + silu on the whole sequence, token-by-token delta rule
    u = mix.in_proj_qkv(x).transpose(1, 2)
    feat = torch.nn.functional.silu(mix.conv1d(u)[..., :11]).transpose(1, 2)
    q, k, v = mix._heads(feat)
    g, beta = mix._gates(x)
    _, S = delta_rule_recurrent(q, k, v, g, beta, boundaries=[10])
    assert torch.allclose(cache.S, S[:, 0], atol=1e-12)


def test_right_branch_and_memory_params_start_at_design_init():
    from clover.model import CloverForBlockDiffusion, preset

    m = CloverForBlockDiffusion(preset("tiny"))
    for layer in m.model.layers:
        if layer.layer_type == "linear_attention":
            mix = layer.linear_attn
            assert torch.count_nonzero(mix.conv_right) == 0
            assert torch.count_nonzero(mix.mem_key) == 0 and torch.count_nonzero(mix.mem_bias) == 0
            assert torch.all(mix.mem_gamma == 1) and torch.allclose(mix.attn_scale, torch.tensor(mix.dk**0.5))


def test_rule4_first_token_of_a_block_comes_from_the_clean_commit():
    m, x0, xt, ref = _setup(bs=4, L=12, P=4)
    cache, _ = m.prefill(x0[:, :4], 4)
    lg = m.step(cache, denoise=xt[:, 4:8], block_size=4)
    assert torch.allclose(lg[:, 0], cache.last_logits)  # fixed while the block is denoised
    xt2 = xt.clone()
    xt2[:, 4:8] = m.config.mask_token_id
    again = m.step(cache, denoise=xt2[:, 4:8], block_size=4)
    assert torch.allclose(again[:, 0], lg[:, 0])
    # reading the noisy stream at the block start instead is wrong
    h = m.forward_train(x0, xt, 4, return_hidden=True)
    assert (m.head(h.hidden[:, 4]) - ref[:, 4]).abs().max() < 1e-12


def test_block_size_one_is_autoregressive():
    m = make_model(shift=True, block_size=1)
    x = torch.randint(0, 96, (1, 9))
    full = m.forward_train(x, x, 1).logits
    # with B = 1 every row is predicted from the clean stream: corrupting xt changes nothing
    xt = torch.full_like(x, m.config.mask_token_id)
    assert torch.allclose(m.forward_train(x, xt, 1).logits, full, atol=1e-12)


def test_rule7_ragged_block_uses_its_real_token_count():
    m, x0, xt, ref = _setup(bs=8, L=13, P=3)
    cache, _ = m.prefill(x0[:, :3], 8)
    m.step(cache, commit=x0[:, :8], block_size=8)
    good = m.step(cache, denoise=xt[:, 8:13], block_size=8)
    assert torch.allclose(good, ref[:, 8:13], atol=1e-10)
    # padding the ragged block to 8 changes n (and adds keys): the logits move
    padded = torch.cat([xt[:, 8:13], torch.full((2, 3), m.config.mask_token_id)], 1)
    assert (m.step(cache, denoise=padded, block_size=8)[:, :5] - ref[:, 8:13]).abs().max() > 1e-4


def test_block_causality_and_in_block_bidirectionality():
    for all_attention in (False, True):
        m = make_model(block_size=4, all_attention=all_attention)
        x = torch.randint(0, 96, (1, 16))
        xt = noisy(x, m.config.mask_token_id, 0, seed=3)
        a = m.forward_train(x, xt, 4).logits
        x2, xt2 = x.clone(), xt.clone()
        x2[:, 10], xt2[:, 10] = 7, 7  # change a token of block 2
        b = m.forward_train(x2, xt2, 4).logits
        assert torch.allclose(a[:, :8], b[:, :8], atol=1e-12)  # earlier blocks untouched
        assert (a[:, 8:10] - b[:, 8:10]).abs().max() > 1e-6  # earlier positions in the same block move


@pytest.mark.parametrize("shift", [True, False])
def test_selected_noisy_blocks_equal_the_full_forward(shift):
    """The training call on a subset of noisy blocks (a row may appear twice, with two masks)
    gives exactly the full-sequence forward's outputs for those blocks."""
    m = make_model(shift=shift, block_size=4)
    g = torch.Generator().manual_seed(3)
    x0 = torch.randint(0, 96, (2, 14), generator=g)
    valid = torch.ones(2, 14, dtype=torch.bool)
    valid[1, 11:] = False  # row 1 is shorter: padding at its end
    xa, xb = noisy(x0, m.config.mask_token_id, 2, seed=1), noisy(x0, m.config.mask_token_id, 2, seed=2)
    fa = m.forward_train(x0, xa, 4, valid).logits
    fb = m.forward_train(x0, xb, 4, valid).logits
    rows, blks = torch.tensor([1, 0, 0, 1]), torch.tensor([2, 3, 1, 0])
    src = [xa, xa, xb, xb]
    xt = torch.stack([torch.nn.functional.pad(s, (0, 2))[r, b * 4 : b * 4 + 4] for s, r, b in zip(src, rows, blks)])
    out = m.forward_blocks(x0, valid, xt, rows, blks, 4).logits  # [4, 4, V]
    for n, (full, r, b) in enumerate(zip([fa, fa, fb, fb], rows, blks)):
        ref = full[r, b * 4 : b * 4 + 4]
        keep = valid[r, b * 4 : b * 4 + 4][: ref.shape[0]]
        assert (out[n, : ref.shape[0]][keep] - ref[keep]).abs().max() < 1e-12


def test_forward_blocks_refuses_bad_indices():
    m = make_model(block_size=4)
    x0 = torch.randint(0, 96, (1, 8))
    with pytest.raises(ValueError, match="out of range"):
        m.forward_blocks(x0, None, x0[:, :4], torch.tensor([0]), torch.tensor([2]), 4)
    with pytest.raises(ValueError, match="noisy blocks"):
        m.forward_blocks(x0, None, x0[:, :3], torch.tensor([0]), torch.tensor([0]), 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dense_experts_equal_the_grouped_reference(dtype):
    """The dense expert path (few experts, few tokens) == one matmul per expert, incl. gradients."""
    from clover.model.layers import DENSE_MAX_EXPERT_RATIO

    model = make_model()
    moe = next(m for m in model.modules() if m.__class__.__name__ == "MoE").to(dtype)
    assert moe.num_experts <= DENSE_MAX_EXPERT_RATIO * moe.gate.top_k  # the test model takes the dense path
    torch.manual_seed(0)
    for p in moe.parameters():
        torch.nn.init.normal_(p, std=0.2)
    for n in (1, 7, 64):
        h = torch.randn(n, moe.gate.weight.shape[1], dtype=dtype, requires_grad=True)
        w, i = torch.nn.functional.linear(h, moe.gate.weight).float().softmax(-1).topk(moe.gate.top_k, -1)
        w = (w / w.sum(-1, keepdim=True)).to(dtype)
        a, b = moe._dense(h, w, i), moe._grouped(h, w, i)
        tol = 1e-5 if dtype == torch.float32 else 3e-2
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)
        (ga,) = torch.autograd.grad(a.float().square().sum(), h, retain_graph=True)
        (gb,) = torch.autograd.grad(b.float().square().sum(), h)
        torch.testing.assert_close(ga, gb, atol=10 * tol, rtol=10 * tol)
