"""Loading a checkpoint: a directory or a cached repo id (default: the bundled model) → the model
and its tokenizer, or an ``Engine`` ready to serve text. ``clover.LLM``, the server and the
command line all load through here; the engine core itself never reads files. Here too: which
device and dtype ``auto`` means (a GPU in bfloat16 when torch sees one, else the CPU in the
checkpoint's own dtype).

torch and the model are imported on first use, so the command line can read ``PREFIX_CACHE_MB``
for its help text without paying for them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from clover.engine import Engine

# the server keeps prompts' committed blocks for prompts that start with them (an agent's next
# turn; clover.engine.prefix_cache), up to this many megabytes
PREFIX_CACHE_MB = 256
DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16", "float16")


def resolve_device(device: str | torch.device | None = "auto", cpu_only: bool = False) -> torch.device:
    """``auto`` (or None): cuda when torch sees a GPU (and the model is not ``cpu_only``), else cpu.
    Any other name or ``torch.device`` as given; a CUDA device that torch cannot see is a
    ValueError that says so, before anything is loaded."""
    import torch

    if device is None or device == "auto":
        return torch.device("cuda" if not cpu_only and torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"unknown device {device!r}; use one of {list(DEVICES)} (or e.g. cuda:1)") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                "no CUDA GPU is visible to torch (torch.cuda.is_available() is False: no GPU, no driver, "
                f"or a CPU-only torch {torch.__version__}); use cpu"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"{dev}: torch sees {torch.cuda.device_count()} CUDA device(s)")
    return dev


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype | None:
    """``auto`` (or None): bfloat16 on a GPU, None (the checkpoint's stored dtype) on the CPU;
    else the named float dtype."""
    import torch

    if dtype is None or dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else None
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {list(DTYPES)}")
    return getattr(torch, dtype)


def place_model(model, device: torch.device | str, dtype: torch.dtype | None = None):
    """A model built in memory (random weights, a benchmark's preset) onto ``device`` in ``dtype``
    (None: as it is), its rope frequencies kept in at least fp32 as ``load_model`` leaves them."""
    import torch

    if model.config.quantization is not None and torch.device(device).type != "cpu":
        raise ValueError("a quantized model runs on the CPU only (its int8/int4 kernels are CPU ones)")
    rope = model.model.rotary_emb
    inv_freq = rope.inv_freq
    model.to(device)
    if dtype is not None:
        model.to(dtype)  # a quantized model's integer weights and bf16 scales stay as they are
    rope.inv_freq = inv_freq.to(device=device, dtype=torch.promote_types(torch.float32, dtype or inv_freq.dtype))
    return model


def load_checkpoint(model_dir=None, threads: int | None = None, device="auto", dtype="auto"):
    """A checkpoint directory or cached repo id (default: the bundled model) → (model, tokenizer
    or None when the directory has no ``tokenizer.json``), the model on ``device`` in ``dtype``
    (``resolve_device``, ``resolve_dtype``; ``auto`` keeps a quantized checkpoint on the CPU,
    where its kernels are). A missing directory is a FileNotFoundError, a corrupt tokenizer file
    or a device torch cannot see a ValueError, a bad checkpoint a CheckpointError, each naming
    the path."""
    import torch

    resolve_device(device)  # a GPU asked for and not there: say so before reading anything
    if threads:
        torch.set_num_threads(threads)
    torch.set_flush_denormal(True)  # fast-decaying GDN heads otherwise hit slow denormals
    if model_dir is None:
        from clover.data import default_model_dir

        model_dir = default_model_dir()  # FileNotFoundError with a clear message when absent
    from clover.model.io import load_config, load_model, resolve_dir

    path = resolve_dir(model_dir)
    if not path.is_dir():
        what = "a file, not a checkpoint directory" if path.exists() else "no such directory"
        raise FileNotFoundError(f"{path}: {what} (give a Clover checkpoint directory or a cached repo id)")
    dev = resolve_device(device, cpu_only=load_config(path).quantization is not None)
    model = load_model(path, dev, resolve_dtype(dtype, dev))
    if not (path / "tokenizer.json").exists():
        return model, None
    from clover.data.tokenizer import CloverTokenizer

    return model, CloverTokenizer.load(path)  # a corrupt tokenizer file: ValueError naming it


def load_engine(model_dir: str | Path | None = None, max_batch_size: int = 16, threads: int | None = None,
                prefix_cache_mb: float = PREFIX_CACHE_MB, device="auto", dtype="auto") -> Engine:  # fmt: skip
    """A checkpoint directory (default: the bundled model) → an Engine with its tokenizer, the
    model on ``device`` in ``dtype`` (as ``load_checkpoint``)."""
    from clover.engine import Engine

    model, tokenizer = load_checkpoint(model_dir, threads, device, dtype)
    if tokenizer is None:
        raise FileNotFoundError(f"{model_dir}: no tokenizer.json; serving text needs the checkpoint's tokenizer")
    return Engine(model, tokenizer, max_batch_size=max_batch_size, prefix_cache_mb=prefix_cache_mb)
