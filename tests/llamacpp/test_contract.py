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
    from clover.data import default_model_dir
    from clover.export.gguf import export_gguf
    from clover.model.llamacpp import LlamaCppClover

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
    with pytest.raises(ValueError, match="not block boundaries of 32"):
        lm.step(lc, denoise=den, block_size=32)


def test_engine_decodes_the_same_tokens_under_ar(pair, monkeypatch):
    """Clover's engine, greedy under ``ar``, commits the same tokens through the library as through
    PyTorch. The seam: ``Batch.join`` calls ``ModelCache.cat``; here it is pointed at the cache's
    own ``cat`` (the engine change the llama.cpp back end needs)."""
    import clover.engine.batch as batch_mod
    from clover.data import default_model_dir
    from clover.data.tokenizer import CloverTokenizer
    from clover.engine import Engine, SamplingParams

    model, lm = pair
    real_cat = ModelCache.cat

    class Caches:
        @staticmethod
        def cat(caches):
            return real_cat(caches) if isinstance(caches[0], ModelCache) else type(caches[0]).cat(caches)

    monkeypatch.setattr(batch_mod, "ModelCache", Caches)
    tok = CloverTokenizer.load(default_model_dir())
    from clover.data.chat import render_chat

    texts = ["Create a no-fly zone named Alpha at 47.1, 8.5 with radius 500 m.", "Recall drone D-12.", "Hello!"]
    prompts = [tok.encode(render_chat([{"role": "user", "content": t}], None, True)) for t in texts]
    out = {}
    for name, m in (("torch", model), ("llama.cpp", lm)):
        engine = Engine(m, tok)
        params = SamplingParams(max_tokens=48, policy="ar")
        out[name] = [list(engine.generate(p, params).token_ids) for p in prompts]
    assert out["llama.cpp"] == out["torch"]
    assert all(len(t) > 3 for t in out["torch"])
