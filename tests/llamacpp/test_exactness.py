"""At f32 the llama.cpp graph gives the PyTorch model's logits (``CloverForBlockDiffusion.step``
on a ``ModelCache``) within fp32 rounding: denoise passes, commits and fused commit + denoise
passes over several blocks, on the bundled model and on random small models (MoE with the 3:1
GDN/attention layout and partial rotary, a dense feed-forward), at block size 32 and others."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from clover.backends.llamacpp import LlamaCppModel
from clover.bench.exactness import perturbed_tiny
from clover.bench.llamacpp import f32_gguf, max_rel_logit_err
from clover.model.io import load_model

MAX_REL = 1e-4  # max |llama.cpp - torch| over max |torch|, per pass


def compare(model, gguf_path, block_size: int, blocks: int = 4) -> float:
    return max_rel_logit_err(model, LlamaCppModel(str(gguf_path)), block_size, blocks)


def export(model, tmp_path) -> str:
    return str(f32_gguf(model, tmp_path))


@pytest.fixture(scope="module")
def bundled(tmp_path_factory, libclover):
    from clover.data import default_model_dir
    from clover.export.gguf import export_gguf

    out = tmp_path_factory.mktemp("bundled") / "model.gguf"
    export_gguf(default_model_dir(), out, "f32")
    return load_model(default_model_dir(), "cpu", torch.float32).eval(), str(out)


@pytest.mark.parametrize("block_size", [32, 16])
def test_bundled_model(bundled, block_size):
    model, path = bundled
    assert compare(model, path, block_size) < MAX_REL


@pytest.mark.parametrize("block_size", [32, 8, 5])
def test_moe_3_to_1_partial_rotary(libclover, tmp_path, block_size):
    model = perturbed_tiny(1, num_hidden_layers=8, shift_logits=True, partial_rotary_factor=0.25)
    assert model.config.layer_types.count("full_attention") == 2 and model.config.num_experts
    assert compare(model, export(model, tmp_path), block_size) < MAX_REL


@pytest.mark.parametrize("block_size", [32, 6])
def test_dense_feed_forward(libclover, tmp_path, block_size):
    model = perturbed_tiny(2, num_experts=0, intermediate_size=48, shift_logits=False, partial_rotary_factor=0.5)
    assert compare(model, export(model, tmp_path), block_size) < MAX_REL


def test_gdn_heads_without_grouping_and_no_calibration(libclover, tmp_path):
    model = perturbed_tiny(3, linear_num_value_heads=2, gdn_block_calibration=False, gdn_right_conv=False)
    assert compare(model, export(model, tmp_path), 8, blocks=3) < MAX_REL


def test_refusals(bundled):
    model, path = bundled
    lm = LlamaCppModel(path)
    cache = lm.new_cache()
    with pytest.raises(ValueError, match="exceeds this model's max_block_size 64"):
        lm.step(cache, denoise=[3] * 4, block_size=model.config.max_block_size + 1)
    with pytest.raises(ValueError, match="not whole blocks"):
        lm.step(cache, commit=[5] * 12, denoise=[3] * 8, block_size=8)
    with pytest.raises(ValueError, match="exceeds block size"):
        lm.step(cache, denoise=[3] * 9, block_size=8)
    with pytest.raises(ValueError, match="token ids must lie"):
        lm.step(cache, denoise=[model.config.vocab_size], block_size=8)
    lm.step(cache, commit=[5] * 8, block_size=8)
    with pytest.raises(ValueError, match="not a block boundary"):
        lm.step(cache, denoise=[3] * 4, block_size=16)
    assert cache.length == 8  # a refused pass changes nothing


def test_cache_copy_is_independent(bundled):
    _, path = bundled
    lm = LlamaCppModel(path)
    a = lm.new_cache()
    lm.step(a, commit=list(range(10, 42)))
    b = a.copy()
    before = lm.step(b, denoise=[3] * 32)
    lm.step(a, commit=list(range(50, 82)))
    assert b.length == 32 and a.length == 64
    np.testing.assert_array_equal(lm.step(b, denoise=[3] * 32), before)


def test_not_a_gguf_file(libclover, tmp_path):
    from clover.backends.llamacpp import GGUFError

    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(GGUFError, match="bad.gguf: not a readable GGUF file"):
        LlamaCppModel(bad)
    with pytest.raises(FileNotFoundError):
        LlamaCppModel(tmp_path / "missing.gguf")
