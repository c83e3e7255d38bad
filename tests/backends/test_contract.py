"""The contract the engine drives (``clover.backends.contract``): PyTorch's model and the
llama.cpp back end both implement it, method for method (no library needed to check the
llama.cpp side's signatures; tests/llamacpp runs it)."""

import inspect

import pytest
import torch

from clover.backends import contract, is_gguf, resolve_backend
from clover.backends.llamacpp import LlamaCppClover, LlamaCppRows
from clover.model import CloverForBlockDiffusion, ModelCache, preset

MODEL_METHODS = ("eval", "new_cache", "prefill", "step")
CACHE_METHODS = ("select", "cat", "nbytes")


def _params(fn) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if p != "self"]


@pytest.mark.parametrize("impl", [CloverForBlockDiffusion, LlamaCppClover])
def test_each_model_takes_the_contracts_arguments(impl):
    for name in MODEL_METHODS:
        assert _params(getattr(impl, name)) == _params(getattr(contract.BlockModel, name)), (impl, name)


@pytest.mark.parametrize("impl", [ModelCache, LlamaCppRows])
def test_each_cache_has_the_contracts_members(impl):
    for name in CACHE_METHODS:
        assert _params(getattr(impl, name)) == _params(getattr(contract.BlockCache, name)), (impl, name)
    assert isinstance(inspect.getattr_static(impl, "batch_size"), property)


def test_the_pytorch_model_is_the_reference_implementation():
    torch.manual_seed(0)
    model = CloverForBlockDiffusion(preset("tiny")).eval()
    assert isinstance(model, contract.BlockModel)
    bs = model.config.block_size
    cache, tail = model.prefill(torch.randint(4, 50, (1, bs + 3)), bs)
    assert isinstance(cache, contract.BlockCache) and cache.lengths.tolist() == [bs] and tail.shape == (1, 3)
    assert not isinstance(object(), contract.BlockModel)


def test_a_gguf_file_picks_llama_cpp():
    assert is_gguf("m.GGUF") and not is_gguf(None) and resolve_backend("m.gguf") == "llama.cpp"
    assert resolve_backend(None) == "torch"
    with pytest.raises(ValueError, match="clover export gguf"):
        resolve_backend(None, "llama.cpp")
    with pytest.raises(ValueError, match="unknown backend"):
        resolve_backend("m.gguf", "vllm")
