"""The contract a back end implements so that Clover's engine can drive it (docs/architecture.md,
The engine contract): the model and the caches of a running batch, as ``typing.Protocol`` classes.

PyTorch's ``CloverForBlockDiffusion`` (with ``ModelCache``) is the reference, and the contract
is its incremental API; ``clover.backends.llamacpp.LlamaCppClover`` (with ``LlamaCppRows``) is
the second implementation. A cache holds, per row, complete committed blocks only (Rule 1).

Beyond the contract, a back end may offer ``denoise_blocks`` (and a ``native_loop`` switch): a
block decoded to its end in one call, which the engine uses for the requests
``clover.engine.native_loop`` says it covers (``LlamaCppClover.denoise_blocks``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

    from clover.model.config import CloverConfig


@runtime_checkable
class BlockCache(Protocol):
    """The caches of a batch, one row per request."""

    lengths: torch.Tensor  # [B] committed tokens per row, each a block boundary
    last_logits: torch.Tensor | None  # [B, V] the clean logit of each row's last committed position (Rule 4)

    @property
    def batch_size(self) -> int: ...

    def select(self, rows) -> BlockCache:
        """The rows ``rows`` (indices), copied: the engine drops finished requests with it."""
        ...

    @staticmethod
    def cat(caches: list) -> BlockCache:
        """Rows of several caches as one (requests joining a running batch)."""
        ...

    def nbytes(self) -> int:
        """Bytes the rows hold (the prefix cache's budget counts them)."""
        ...


@runtime_checkable
class BlockModel(Protocol):
    """A block-diffusion model as the engine calls it."""

    config: CloverConfig  # block size, mask and EOS ids, vocabulary, shift_logits

    def eval(self) -> BlockModel: ...

    def new_cache(self, batch: int = 1, capacity: int = 0) -> BlockCache:
        """An empty cache of ``batch`` rows."""
        ...

    def prefill(
        self, prompt: torch.Tensor, block_size: int | None = None, cache: BlockCache | None = None
    ) -> tuple[BlockCache, torch.Tensor]:
        """Commit the complete blocks of ``prompt [B, P]`` (onto ``cache``, else a new one); the
        cache and the prompt's tail ``[B, P mod block_size]``, which starts the first block."""
        ...

    def step(
        self,
        cache: BlockCache,
        commit: torch.Tensor | None = None,
        denoise: torch.Tensor | None = None,
        block_size: int | None = None,
    ) -> torch.Tensor | None:
        """One pass: ``commit [B, n_c]`` (clean whole blocks, written into ``cache``), then
        ``denoise [B, n_d]`` (one block, read-only); the denoise logits ``[B, n_d, V]`` aligned so
        row i predicts token i, or None when nothing is denoised."""
        ...
