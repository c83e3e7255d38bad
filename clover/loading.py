"""Loading a checkpoint: a directory or a cached repo id (default: the bundled model) → the model
and its tokenizer, or an ``Engine`` ready to serve text. ``clover.LLM``, the server and the
command line all load through here; the engine core itself never reads files.

torch and the model are imported on first use, so the command line can read ``PREFIX_CACHE_MB``
for its help text without paying for them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clover.engine import Engine

# the server keeps prompts' committed blocks for prompts that start with them (an agent's next
# turn; clover.engine.prefix_cache), up to this many megabytes
PREFIX_CACHE_MB = 256


def load_checkpoint(model_dir=None, threads: int | None = None):
    """A checkpoint directory or cached repo id (default: the bundled model) → (model, tokenizer
    or None when the directory has no ``tokenizer.json``). A missing directory is a
    FileNotFoundError, a corrupt tokenizer file a ValueError, a bad checkpoint a CheckpointError,
    each naming the path."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    torch.set_flush_denormal(True)  # fast-decaying GDN heads otherwise hit slow denormals
    if model_dir is None:
        from clover.data import default_model_dir

        model_dir = default_model_dir()  # FileNotFoundError with a clear message when absent
    from clover.model.io import load_model, resolve_dir

    path = resolve_dir(model_dir)
    if not path.is_dir():
        what = "a file, not a checkpoint directory" if path.exists() else "no such directory"
        raise FileNotFoundError(f"{path}: {what} (give a Clover checkpoint directory or a cached repo id)")
    model = load_model(path)
    if not (path / "tokenizer.json").exists():
        return model, None
    from clover.data.tokenizer import CloverTokenizer

    return model, CloverTokenizer.load(path)  # a corrupt tokenizer file: ValueError naming it


def load_engine(model_dir: str | Path | None = None, max_batch_size: int = 16, threads: int | None = None,
                prefix_cache_mb: float = PREFIX_CACHE_MB) -> Engine:  # fmt: skip
    """A checkpoint directory (default: the bundled model) → an Engine with its tokenizer."""
    from clover.engine import Engine

    model, tokenizer = load_checkpoint(model_dir, threads)
    if tokenizer is None:
        raise FileNotFoundError(f"{model_dir}: no tokenizer.json; serving text needs the checkpoint's tokenizer")
    return Engine(model, tokenizer, max_batch_size=max_batch_size, prefix_cache_mb=prefix_cache_mb)
