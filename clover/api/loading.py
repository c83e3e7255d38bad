"""Loading a checkpoint to serve: a directory or a cached repo id (default: the bundled model) →
the model and its tokenizer, or an ``Engine`` ready to serve text. ``clover.LLM``, the server and
the command line all load through here; the engine core itself never reads files. Which device
and dtype ``auto`` means is ``clover.ops.device``'s (training resolves them there too).

torch and the model are imported on first use (deferred imports below), so the command line can
read ``PREFIX_CACHE_MB`` for its help text without paying for them.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from clover.backends import open_gguf, resolve_backend
from clover.data import default_model_dir
from clover.engine import PREFILL_CHUNK  # the package's face only: no torch yet
from clover.ops.device import resolve_device, resolve_dtype

if TYPE_CHECKING:
    import torch

    from clover.engine import Engine

# the server keeps prompts' committed blocks for prompts that start with them (an agent's next
# turn; clover.engine.prefix_cache), up to this many megabytes
PREFIX_CACHE_MB = 256


def place_model(model, device: torch.device | str, dtype: torch.dtype | None = None):
    """A model built in memory (random weights, a benchmark's preset) onto ``device`` in ``dtype``
    (None: as it is), its rope frequencies kept in at least fp32 as ``load_model`` leaves them."""
    import torch  # deferred: torch, not for clover --help

    if model.config.quantization is not None and torch.device(device).type != "cpu":
        raise ValueError("a quantized model runs on the CPU only (its int8/int4 kernels are CPU ones)")
    rope = model.model.rotary_emb
    inv_freq = rope.inv_freq
    model.to(device)
    if dtype is not None:
        model.to(dtype)  # a quantized model's integer weights and bf16 scales stay as they are
    rope.inv_freq = inv_freq.to(device=device, dtype=torch.promote_types(torch.float32, dtype or inv_freq.dtype))
    return model


def load_gguf(path, threads: int | None = None, device="auto", dtype="auto", compile: bool = False):
    """A GGUF file from ``clover export gguf`` → (``LlamaCppClover``, its tokenizer or None)
    (``clover.backends.open_gguf``: the CPU, ``threads`` threads; what it refuses, a ValueError or
    FileNotFoundError saying why)."""
    model = open_gguf(path, threads, device, dtype, compile)
    try:
        return model, gguf_tokenizer(model)
    except (ValueError, OSError) as e:
        raise ValueError(f"{path}: metadata key tokenizer.huggingface.json: {e}") from None


def gguf_tokenizer(model):
    """The tokenizer a GGUF file carries (``LlamaCppClover.tokenizer_files``), loaded as
    ``CloverTokenizer.load`` loads a checkpoint directory; None when the file has none."""
    from clover.data.tokenizer import CloverTokenizer  # deferred: tokenizers, not for clover --help

    files = model.tokenizer_files()
    if "tokenizer.json" not in files:
        return None
    with tempfile.TemporaryDirectory(prefix="clover-gguf-tokenizer-") as d:
        for name, text in files.items():
            (Path(d) / name).write_text(text, encoding="utf-8")
        return CloverTokenizer.load(d)


def load_model_dir(
    model_dir=None,
    threads: int | None = None,
    device="auto",
    dtype="auto",
    compile: bool = False,
    backend: str = "auto",
):
    """A checkpoint directory or cached repo id (default: the bundled model) → (model, tokenizer
    or None when the directory has no ``tokenizer.json``), the model on ``device`` in ``dtype``
    (``resolve_device``, ``resolve_dtype``; ``auto`` keeps a quantized checkpoint on the CPU,
    where its kernels are). A missing directory is a FileNotFoundError, a corrupt tokenizer file
    or a device torch cannot see a ValueError, a bad checkpoint a CheckpointError, each naming
    the path. ``compile``: decoding passes through torch.compile (``CloverForBlockDiffusion.compile_passes``).
    ``backend`` (``clover.backends.BACKENDS``): a GGUF file loads into llama.cpp instead (``load_gguf``)."""
    import torch  # deferred: torch, not for clover --help

    if resolve_backend(model_dir, backend) == "llama.cpp":
        return load_gguf(model_dir, threads, device, dtype, compile)

    resolve_device(device)  # a GPU asked for and not there: say so before reading anything
    if threads:
        torch.set_num_threads(threads)
    torch.set_flush_denormal(True)  # fast-decaying GDN heads otherwise hit slow denormals
    if model_dir is None:
        model_dir = default_model_dir()  # FileNotFoundError with a clear message when absent
    from clover.model.io import load_config, load_model, resolve_dir  # deferred: loads torch, not for clover --help

    path = resolve_dir(model_dir)
    if not path.is_dir():
        what = "a file, not a checkpoint directory" if path.exists() else "no such directory"
        raise FileNotFoundError(f"{path}: {what} (give a Clover checkpoint directory or a cached repo id)")
    dev = resolve_device(device, cpu_only=load_config(path).quantization is not None)
    model = load_model(path, dev, resolve_dtype(dtype, dev))
    if compile:
        model.compile_passes()
    if not (path / "tokenizer.json").exists():
        return model, None
    from clover.data.tokenizer import CloverTokenizer  # deferred: tokenizers, not for clover --help

    return model, CloverTokenizer.load(path)  # a corrupt tokenizer file: ValueError naming it


def load_engine(
    model_dir: str | Path | None = None,
    max_batch_size: int = 16,
    threads: int | None = None,
    prefix_cache_mb: float = PREFIX_CACHE_MB,
    device="auto",
    dtype="auto",
    compile: bool = False,
    backend: str = "auto",
    prefill_chunk: int = PREFILL_CHUNK,
    cuda_graphs: bool = False,
) -> Engine:
    """A checkpoint directory (default: the bundled model) → an Engine with its tokenizer, the
    model on ``device`` in ``dtype``, its passes compiled or not, on ``backend`` (as ``load_model_dir``),
    prefilling ``prefill_chunk`` prompt tokens per step (0: whole prompts), its decoding passes as
    CUDA graphs or not (``cuda_graphs``: a model on a CUDA device only, else a ValueError)."""
    from clover.engine import Engine  # deferred: loads torch, not for clover --help

    model, tokenizer = load_model_dir(model_dir, threads, device, dtype, compile, backend)
    if tokenizer is None:
        raise FileNotFoundError(f"{model_dir}: no tokenizer.json; serving text needs the checkpoint's tokenizer")
    return Engine(
        model,
        tokenizer,
        max_batch_size=max_batch_size,
        prefix_cache_mb=prefix_cache_mb,
        prefill_chunk=prefill_chunk,
        cuda_graphs=cuda_graphs,
    )
