"""What runs a Clover model: its back ends, each behind the contract the engine drives
(``contract``: ``new_cache``, ``prefill``, a ``step`` that commits whole blocks and denoises one
read-only; docs/architecture.md, The engine contract).

* **PyTorch**, the reference: ``clover.model.CloverForBlockDiffusion`` is the contract itself.
* **llama.cpp** (``llamacpp``): Clover's graph in a pinned llama.cpp (``llamacpp.pin``, the one
  place the pin is written; ``native/llamacpp`` builds it), driven through ctypes; it runs GGUF
  files from ``clover export gguf`` (docs/llama-cpp.md).
* **SGLang**: an out-of-tree model and Clover's decoding algorithms registered through SGLang's
  plugin seams. Its Python side is the separately installed package in ``integrations/sglang``
  (``clover_sglang``), since it runs in SGLang's own environment; it serves the folders
  ``clover export hf`` writes, and ``clover.bench.sglang`` drives it (docs/sglang.md).

Choosing one: ``BACKENDS``, ``resolve_backend`` (a ``.gguf`` file means llama.cpp), and
``open_gguf``. Imports stay light here (``clover --help`` reads ``BACKENDS``): the library and
torch load with ``llamacpp``, on first use.
"""

from __future__ import annotations

import os
from pathlib import Path

# the engines a model runs on: Clover's PyTorch model, or Clover's graph in llama.cpp's ggml
# (docs/llama-cpp.md), which takes a GGUF file from `clover export gguf`; auto: a .gguf file → llama.cpp
BACKENDS = ("auto", "torch", "llama.cpp")


def is_gguf(model) -> bool:
    """A path to a GGUF file (by its name: ``clover export gguf`` writes ``.gguf``)."""
    return model is not None and str(model).lower().endswith(".gguf")


def resolve_backend(model, backend: str = "auto") -> str:
    """``torch`` or ``llama.cpp`` for ``model`` (``auto``: llama.cpp for a .gguf file); a model
    the backend cannot take is a ValueError that says what to give instead."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
    if backend == "auto":
        return "llama.cpp" if is_gguf(model) else "torch"
    if backend == "torch" and is_gguf(model):
        raise ValueError(f"{model}: a GGUF file runs on the llama.cpp back end (--backend llama.cpp), not torch")
    if backend == "llama.cpp" and not is_gguf(model):
        what = "the bundled model" if model is None else f"{model}"
        raise ValueError(
            f"--backend llama.cpp takes a GGUF file (--model FILE.gguf), not {what}: "
            "write one with `clover export gguf --model DIR --out FILE.gguf`"
        )
    return backend


def open_gguf(path, threads: int | None = None, device="auto", dtype="auto", compile: bool = False):
    """A GGUF file from ``clover export gguf`` → ``LlamaCppClover``, on the CPU with ``threads``
    threads (default: every core). The library not built, a missing file, ``compile``, a GPU or a
    dtype asked for: a ValueError or FileNotFoundError saying why."""
    if compile:
        raise ValueError("--compile applies to the torch backend only (llama.cpp runs its own graph)")
    if device not in ("auto", "cpu"):
        raise ValueError(f"the llama.cpp back end runs on the CPU only (got --device {device})")
    if dtype != "auto":
        raise ValueError(f"the GGUF file's types set the llama.cpp back end's precision (drop --dtype {dtype})")
    from clover.backends.llamacpp import LlamaCppClover, LlamaCppError, available  # deferred: loads torch

    if not Path(path).is_file():
        what = "a directory, not a GGUF file" if Path(path).exists() else "no such file"
        raise FileNotFoundError(f"{path}: {what}")
    problem = available()
    if problem is not None:
        raise ValueError(f"{path}: {problem}")
    try:  # the file is checked whole here, before any pass: a bad one is a ValueError naming it
        return LlamaCppClover(path, threads=threads or os.cpu_count() or 1)
    except LlamaCppError as e:
        raise ValueError(f"{path}: {e}") from None
