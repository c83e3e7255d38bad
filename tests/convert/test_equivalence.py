"""A converted checkpoint computes what its source computes, piece by piece, for every family
(Qwen3.5-MoE, dense Qwen3.5, Qwen3-Next).

Every comparison feeds both models the same inputs: embedding, final norm and head; each
feed-forward block (MoE or dense); each attention layer run causally (block size 1); and each GDN
layer's history state against the recurrent state transformers leaves in its cache (for
Qwen3-Next this checks the split of its fused projections).
"""

import copy

import pytest
import torch

from clover.model.cache import GDNCache
from clover.model.io import load_model
from tests.convert.helpers import capture, text_model

# converted source → the transformers model it was saved from
KINDS = {"text": "text", "vl": "vl", "packed": "text", "dense": "dense", "dense_vl": "dense_vl", "next": "next"}


@pytest.fixture(scope="module", params=list(KINDS))
def pair(request, hf_models, converted):
    """(source, Clover) models in fp64, the same random prompt run through the source with a cache."""
    kind = request.param
    hf = copy.deepcopy(hf_models[KINDS[kind]]).double()
    for c in {id(hf.config): hf.config, id(text_model(hf).config): text_model(hf).config}.values():
        c._experts_implementation = "eager"  # the reference loop (grouped_mm has no fp64)
    cl = load_model(converted[kind][0], dtype=torch.float64)
    ids = torch.randint(0, 99, (2, 11), generator=torch.Generator().manual_seed(3))
    cache, seen, logits = capture(hf, ids)
    return kind, hf, cl, ids, cache, seen


def test_embedding_final_norm_and_head_are_identical(pair):
    _, hf, cl, ids, _, _ = pair
    tm = text_model(hf)
    V = tm.embed_tokens.weight.shape[0]
    all_ids = torch.arange(V)
    assert torch.equal(cl.model.embed_tokens(all_ids), tm.embed_tokens(all_ids))
    x = torch.randn(2, 5, tm.config.hidden_size, dtype=torch.float64)
    assert torch.equal(cl.model.norm(x), tm.norm(x))
    assert torch.equal(cl.lm_head(x)[..., :V], hf.lm_head(x))


def test_each_feed_forward_block_matches_the_source(pair):
    _, hf, cl, _, _, seen = pair
    for i, layer in enumerate(text_model(hf).layers):
        x, y = seen[i]["mlp"]  # the source's own input to this block
        ours, _ = cl.model.layers[i].mlp(x)
        assert torch.allclose(ours, y, rtol=0, atol=1e-12), f"layer {i}"
        z = torch.randn_like(x)  # and on fresh input
        assert torch.allclose(cl.model.layers[i].mlp(z)[0], layer.mlp(z), rtol=0, atol=1e-12), f"layer {i}"


def test_each_attention_layer_run_causally_matches_the_source(pair):
    """Same input hidden states, rope positions 0..T-1, block size 1 (causal)."""
    _, hf, cl, ids, _, seen = pair
    B, T = ids.shape
    valid = torch.ones(B, T, dtype=torch.bool)
    ours_rope = cl.model.rotary_emb(torch.arange(T)[None].expand(B, T), torch.float64)
    checked = 0
    for i, layer in enumerate(cl.model.layers):
        if layer.layer_type != "full_attention":
            continue
        x, y = seen[i]["mixer"]
        # the source's cos/sin [B or 1, T, rotary_dim], computed in fp32 there
        hf_rope = tuple(t.expand(B, -1, -1) for t in seen[i]["rope"])
        for a, b in zip(ours_rope, hf_rope):
            assert a.shape == b.shape and torch.allclose(a, b, rtol=0, atol=1e-6)
        ours, _ = layer.self_attn.forward_train(x, hf_rope, valid, 1)
        assert torch.allclose(ours, y, rtol=0, atol=1e-12), f"layer {i}"  # the weights map exactly
        ours, _ = layer.self_attn.forward_train(x, ours_rope, valid, 1)
        assert torch.allclose(ours, y, rtol=0, atol=1e-6), f"layer {i}"  # with Clover's own (fp64) rope
        checked += 1
    assert checked == 1


@pytest.mark.parametrize("block_size", [1, 4, 8])
def test_history_state_equals_the_source_cache(pair, block_size):
    """Fed the source layer's input, each GDN layer's history state after committing all T
    tokens (in blocks, the last one ragged) equals transformers' recurrent state, and the
    conv tail equals its conv state."""
    _, hf, cl, ids, cache, seen = pair
    B, T = ids.shape
    checked = 0
    for i, layer in enumerate(cl.model.layers):
        if layer.layer_type != "linear_attention":
            continue
        mix = layer.linear_attn
        x, _ = seen[i]["mixer"]
        ours = GDNCache(
            torch.zeros(B, mix.Hv, mix.dk, mix.dv, dtype=torch.float64),
            torch.zeros(B, mix.K - 1, mix.conv_dim, dtype=torch.float64),
        )
        with torch.no_grad():
            mix.forward_step(x, ours, n_commit=T, block_size=block_size)
        S_ref = cache.layers[i].recurrent_states[0]  # [B, Hv, dk, dv], fp32 inside transformers' kernel
        conv_ref = cache.layers[i].conv_states[0]  # [B, conv_dim, K]: the last K inputs
        assert S_ref.shape == ours.S.shape
        err = (ours.S - S_ref.double()).abs().max() / S_ref.abs().max()
        assert err < 1e-5, f"layer {i}: relative state error {err:.2e}"
        assert torch.allclose(ours.tail, conv_ref[..., 1:].transpose(1, 2).double(), rtol=0, atol=1e-12)
        checked += 1
    assert checked == 3


def test_converted_model_decodes_with_prefill_step_and_the_engine(pair, converted):
    kind = pair[0]
    m = load_model(converted[kind][0])
    c = m.config
    prompt = torch.randint(0, 99, (1, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        cache, tail = m.prefill(prompt, 4)
        block = torch.cat([tail, torch.full((1, 4 - tail.shape[1]), c.mask_token_id)], 1)
        logits = m.step(cache, denoise=block, block_size=4)
    assert logits.shape == (1, 4, c.vocab_size) and torch.isfinite(logits).all()
    try:
        from clover.engine import Engine, SamplingParams
    except ImportError:
        pytest.skip("clover.engine not available")
    from clover.data.tokenizer import CloverTokenizer

    tok = CloverTokenizer.load(converted[kind][0])
    out = Engine(m, tok).generate(prompt[0].tolist(), SamplingParams(max_tokens=8, block_size=4))
    assert 0 < len(out.token_ids) <= 8 and all(0 <= t < c.vocab_size for t in out.token_ids)
    assert c.mask_token_id not in out.token_ids


def test_converted_checkpoint_serves(converted):
    """``clover serve`` loads the converted directory (weights + tokenizer) and completes text."""
    try:
        from fastapi.testclient import TestClient

        from clover.server import create_app
    except ImportError:
        pytest.skip("clover.server not available")
    app = create_app(converted["vl"][0], default_max_tokens=8)
    with TestClient(app) as client:
        r = client.post("/v1/completions", json={"model": "clover", "prompt": "w1 w2 w3 w4 w5", "max_tokens": 6})
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] in ("stop", "length") and isinstance(choice["text"], str)
        assert client.get("/v1/models").status_code == 200
