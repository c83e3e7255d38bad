"""A converted random Qwen3.5-MoE-shaped model (``clover convert`` of a tiny transformers
``Qwen3_5MoeForCausalLM``, then ``clover export hf``) served by SGLang: the same committed tokens
as Clover's engine, under the default policy. Converted models predict each token from the one
before (``shift_logits``), so this covers the plugin's carry of the last committed hidden state
from block to block."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
MAX_TOKENS = 40


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    import torch

    from clover.convert.pipeline import convert
    from clover.export.hf_folder import export_hf
    from clover.model.io import load_model

    sys.path.insert(0, str(ROOT))  # the project's tiny random checkpoints (tests/convert/helpers.py)
    from tests.convert.helpers import hf_model, save_hf

    root = tmp_path_factory.mktemp("converted")
    save_hf(hf_model("text"), root / "qwen")
    convert(root / "qwen", root / "clover", dtype=torch.float32, block_size=8, progress=False)
    export_hf(root / "clover", root / "hf")
    return root / "hf", load_model(root / "clover", "cpu", torch.float32).eval()


def test_converted_qwen_same_tokens_as_clover_engine(converted, tmp_path):
    import torch

    from clover.bench.sglang import SGLangServer
    from clover.engine import Engine, SamplingParams

    hf, model = converted
    assert model.config.shift_logits
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 96, (int(n),), generator=g).tolist() for n in torch.randint(3, 30, (12,), generator=g)]
    want = [o.token_ids for o in Engine(model).generate_batch(prompts, SamplingParams(max_tokens=MAX_TOKENS))]
    with SGLangServer(hf, "prefix", log=tmp_path / "server.log") as s:
        got, _ = s.generate(prompts, MAX_TOKENS, concurrency=12)
    assert sum(len(w) for w in want) >= 10 * len(prompts)
    assert got == want
