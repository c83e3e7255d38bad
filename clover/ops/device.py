"""Where tensors live: the device and dtype names every front end takes (``auto``, ``cpu``,
``cuda``; ``auto``, ``float32``, ``bfloat16``, ``float16``) resolved once, for serving
(``clover.api.loading``) and training (``clover.train.trainer.train_device``) alike.

torch is imported inside the functions, so the command line reads the names for its flags
without paying for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16", "float16")


def resolve_device(device: str | torch.device | None = "auto", cpu_only: bool = False) -> torch.device:
    """``auto`` (or None): cuda when torch sees a GPU (and the model is not ``cpu_only``), else cpu.
    Any other name or ``torch.device`` as given; a CUDA device that torch cannot see is a
    ValueError that says so, before anything is loaded."""
    import torch  # deferred: torch, not for clover --help

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
    import torch  # deferred: torch, not for clover --help

    if dtype is None or dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else None
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {list(DTYPES)}")
    return getattr(torch, dtype)
