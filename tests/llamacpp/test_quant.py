"""Quantized GGUF files: ggml's quantizer (``clover.backends.llamacpp.quantize``, the path of q4_k,
which the gguf package cannot write) against gguf's own dequantizer, and quantized files run by
the library next to f32."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from clover.model.config import preset
from clover.model.io import save_model
from clover.model.model import CloverForBlockDiffusion


@pytest.mark.parametrize("kind, tol", [("q4_k", 0.08), ("q8_0", 0.005)])
def test_ggml_quantizer_round_trips_through_gguf(libclover, kind, tol):
    from gguf import GGMLQuantizationType, quants

    from clover.backends.llamacpp import quantize

    x = np.random.default_rng(0).standard_normal((3, 4, 512)).astype(np.float32)
    q = quantize(x, kind)
    assert q.dtype == np.uint8 and q.shape[:2] == (3, 4)
    back = quants.dequantize(q, GGMLQuantizationType[kind.upper()])
    assert back.shape == x.shape
    assert np.abs(back - x).max() < tol * np.abs(x).max()
    with pytest.raises(ValueError, match="cannot quantize rows of 100 values to q4_k"):
        quantize(x[..., :100], "q4_k")


def test_quantized_files_run_next_to_f32(libclover, tmp_path):
    from clover.backends.llamacpp import LlamaCppModel
    from clover.export.gguf import export_gguf

    torch.manual_seed(0)
    model = CloverForBlockDiffusion(preset("tiny", hidden_size=256, moe_intermediate_size=256)).eval()
    save_model(model, tmp_path / "ckpt")
    commit = torch.randint(0, 96, (1, 16))
    denoise = torch.randint(0, 96, (1, 8))
    out = {}
    for kind in ("f32", "f16", "q8_0", "q4_k"):
        report = export_gguf(tmp_path / "ckpt", tmp_path / f"{kind}.gguf", kind)
        assert kind == "f32" or report.types[kind] > 0
        lm = LlamaCppModel(tmp_path / f"{kind}.gguf")
        out[kind] = lm.step(lm.new_cache(), commit=commit, denoise=denoise, block_size=8)
    scale = np.abs(out["f32"]).max()
    errs = {k: np.abs(v - out["f32"]).max() / scale for k, v in out.items()}
    assert errs["f16"] < 1e-2 and 0 < errs["q8_0"] < errs["q4_k"] < 1.0, errs
