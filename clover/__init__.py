"""Clover: block-diffusion language models (the model, training, an inference engine, a server).

``from clover import LLM, SamplingParams`` is the in-process way in (``clover.api.llm``, as vLLM's
pair); they are imported on first use,
so ``clover --help`` does not pay for importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["LLM", "RequestError", "SamplingParams"]

if TYPE_CHECKING:
    from clover.api.llm import LLM, RequestError
    from clover.engine.params import SamplingParams


def __getattr__(name: str):
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version  # deferred: only for __version__

        try:
            return version("clover")
        except PackageNotFoundError:  # a source tree that was never installed
            return "unknown"
    if name == "SamplingParams":  # vLLM's pair: from clover import LLM, SamplingParams
        from clover.engine.params import SamplingParams  # deferred: loads torch, not for clover --help

        return SamplingParams
    if name in __all__:
        from clover.api import llm  # deferred: loads torch, not for clover --help

        return getattr(llm, name)
    raise AttributeError(f"module 'clover' has no attribute {name!r}")
