"""``LlamaCppClover``: the library behind ``CloverForBlockDiffusion``'s incremental API (new_cache,
prefill, step on torch tensors, a batch of rows with their own histories), the contract Clover's
engine drives; and the engine itself decoding through it, given one seam (below)."""

from __future__ import annotations

import pytest
import torch

from clover.model import ModelCache
from clover.model.io import load_model


@pytest.fixture(scope="module")
def pair(tmp_path_factory, libclover):
    from clover.backends.llamacpp import LlamaCppClover
    from clover.data import default_model_dir
    from clover.export.gguf import export_gguf

    out = tmp_path_factory.mktemp("contract") / "model.gguf"
    export_gguf(default_model_dir(), out, "f32")
    return load_model(default_model_dir(), "cpu", torch.float32).eval(), LlamaCppClover(out)


def test_config_comes_from_the_file(pair):
    model, lm = pair
    assert lm.config == model.config and lm.eval() is lm


def test_batch_with_rows_of_their_own_lengths(pair):
    """Two prompts of different lengths prefilled alone, joined, then a fused commit + denoise
    pass and a denoise pass over both rows: PyTorch's logits within fp32 rounding."""
    model, lm = pair
    g = torch.Generator().manual_seed(0)
    V, bs = model.config.vocab_size, 16
    prompts = [torch.randint(4, V, (1, n), generator=g) for n in (40, 70)]
    caches = {"torch": [], "llama.cpp": []}
    for p in prompts:
        for name, m in (("torch", model), ("llama.cpp", lm)):
            caches[name].append(m.prefill(p, bs)[0])
    tc, lc = ModelCache.cat(caches["torch"]), type(caches["llama.cpp"][0]).cat(caches["llama.cpp"])
    assert lc.lengths.tolist() == tc.lengths.tolist() == [32, 64]
    commit, den = torch.randint(4, V, (2, bs), generator=g), torch.randint(4, V, (2, bs), generator=g)
    with torch.no_grad():
        for c, d in ((commit, den), (None, den)):
            ref = model.step(tc, commit=c, denoise=d, block_size=bs)
            got = lm.step(lc, commit=c, denoise=d, block_size=bs)
            assert got.shape == ref.shape
            assert float((got - ref).abs().max() / ref.abs().max()) < 1e-4
    sub = lc.select([1])
    lm.step(sub, commit=commit[1:], block_size=bs)
    assert sub.lengths.tolist() == [96] and lc.lengths.tolist() == [48, 80]  # select copies
    kept = lc.keep([1])  # keep hands the row itself over (a batch's requests leaving)
    assert kept.rows == [lc.rows[1]] and kept.rows[0] is lc.rows[1]
    with pytest.raises(ValueError, match="not block boundaries of 32"):
        lm.step(lc, denoise=den, block_size=32)


def _chat_prompts(tok, texts):
    from clover.data.chat import render_chat

    return [tok.encode(render_chat([{"role": "user", "content": t}], None, True)) for t in texts]


TEXTS = ["Create a no-fly zone named Alpha at 47.1, 8.5 with radius 500 m.", "Recall drone D-12.", "Hello!"]


@pytest.mark.parametrize("policy", ["ar", None])
def test_engine_decodes_the_same_tokens(pair, policy):
    """Clover's engine, greedy under ``ar`` and under the default policy, commits the same tokens
    through the library as through PyTorch, one request at a time and as one batch (rows joining,
    committing alone and leaving)."""
    from clover.data import default_model_dir
    from clover.data.tokenizer import CloverTokenizer
    from clover.engine import Engine, SamplingParams

    model, lm = pair
    tok = CloverTokenizer.load(default_model_dir())
    prompts = _chat_prompts(tok, TEXTS)
    params = SamplingParams(max_tokens=48, **({"policy": policy} if policy else {}))
    out = {}
    for name, m in (("torch", model), ("llama.cpp", lm)):
        engine = Engine(m, tok)
        alone = [list(engine.generate(p, params).token_ids) for p in prompts]
        batch = [list(o.token_ids) for o in engine.generate_batch(prompts, params)]
        out[name] = (alone, batch)
    assert out["llama.cpp"] == out["torch"]
    assert all(len(t) > 3 for t in out["torch"][0])


def test_the_tokenizer_comes_from_the_file(pair):
    """The GGUF file's tokenizer encodes, decodes and renders chats as the checkpoint's does."""
    from clover.api.loading import gguf_tokenizer
    from clover.data import default_model_dir
    from clover.data.tokenizer import CloverTokenizer

    _, lm = pair
    ref, got = CloverTokenizer.load(default_model_dir()), gguf_tokenizer(lm)
    assert _chat_prompts(got, TEXTS) == _chat_prompts(ref, TEXTS)
    for attr in ("mask_token_id", "eos_token_id", "eos_token_ids", "pad_token_id", "vocab_size"):
        assert getattr(got, attr) == getattr(ref, attr), attr
    assert got.decode(ref.encode("Recall drone 17.")) == "Recall drone 17."


def test_native_caches_count_their_bytes(pair):
    """The prefix cache sizes a native cache by the bytes the library holds."""
    from clover.engine.prefix_cache import _nbytes

    model, lm = pair
    prompt = torch.arange(4, 68)[None]
    tc, lc = model.prefill(prompt, 16)[0], lm.prefill(prompt, 16)[0]
    assert _nbytes(lc) > 0 and lc.nbytes() == _nbytes(lc)
    assert _nbytes(lc) >= tc.nbytes()
