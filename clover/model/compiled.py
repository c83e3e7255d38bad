"""Compiled decoding passes: ``CloverForBlockDiffusion._pass`` through ``torch.compile``.

The whole pass is one graph, embeddings to logits, so nothing runs between operators but the
compiled code. What varies between passes is handled by dynamic shapes: the history length
(the attention caches' used slots) and the batch become symbolic after the first change, and
the pass kinds (denoise, commit, both fused; rows of equal or unequal history) are a handful of
graphs. The pass has no host sync: ``step`` reads the cache lengths once, before it, and hands
them in as ints (``top``, ``same``), grows the attention caches there, and the MoE's grouped GEMM
is an operator the compiler does not look into (``clover::grouped_swiglu``).

Compiled code is cached on disk by torch, in ``TORCHINDUCTOR_CACHE_DIR``: unless it is set,
``~/.cache/clover/torchinductor`` (under ``XDG_CACHE_HOME`` when that is set), which outlives the
temporary directory torch would use, so a later start reuses what an earlier one compiled.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import torch

# graphs per compiled function: pass kinds (3) x equal/unequal rows (2), each static first and
# dynamic after a change, per model loaded in the process; torch's default limit (8) would
# send the rest back to eager
RECOMPILE_LIMIT = 64

# set on import, before anything asks torch for its cache directory (torch then fixes it)
_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "clover" / "torchinductor"
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(_CACHE))


def compile_pass(forward_pass: Callable, mode: str | None = None, backend: str = "inductor") -> Callable:
    """``forward_pass(model, cache, x, n_c, n_d, block_size, top, same)`` compiled (``backend``
    "aot_eager" traces and checks the graphs without generating code: the GPU check's dry run)."""
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    return torch.compile(forward_pass, mode=mode, dynamic=None, backend=backend)
