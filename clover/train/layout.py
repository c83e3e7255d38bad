"""A run directory's checkpoints, whatever their format: ``run/step-NNNNNNNN/`` directories and
``run/latest`` naming the newest complete one (``publish`` makes a finished one visible,
``latest_checkpoint`` finds it), and which of the three formats a checkpoint has
(``checkpoint_format``): ``plain`` (gathered to rank 0: ``checkpoint``), ``sharded`` (every rank
writes its rows: ``sharded_checkpoint``) or ``hf`` (a transformers model, the autoregressive
base, in its own format: ``hf``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from clover.model.io import CheckpointError
from clover.train.fsdp import is_sharded

PLAIN, SHARDED, HF = "plain", "sharded", "hf"
OPTIM = "optimizer"  # a sharded checkpoint's folder of per-rank optimizer shards


def checkpoint_format(model, path: str | Path | None = None) -> str:
    """The format of ``model``'s checkpoints, or with ``path`` the format of that checkpoint as
    ``model`` reads it: ``hf`` for a transformers model (it has ``save_pretrained``); ``sharded``
    for a checkpoint written shard by shard (any model resumes it: the rows are resharded), or
    with no ``path`` for a Clover model sharded by FSDP2; else ``plain``."""
    if path is not None and (Path(path) / OPTIM).is_dir():
        return SHARDED
    if hasattr(model, "save_pretrained"):
        return HF
    return SHARDED if path is None and is_sharded(model) else PLAIN


def publish(tmp: Path, final: Path, state: dict, keep: int) -> Path:
    """Finish a checkpoint written under ``tmp``: its ``state.json``, the rename to ``final``,
    ``latest`` replaced atomically, then all but the newest ``keep`` step directories removed."""
    run = final.parent
    (tmp / "state.json").write_text(json.dumps(state, indent=1))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    latest_tmp = run / ".latest.tmp"
    latest_tmp.write_text(final.name)
    os.replace(latest_tmp, run / "latest")
    for old in sorted(run.glob("step-*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    run = Path(run_dir)
    f = run / "latest"
    if not f.exists():
        return None
    p = run / f.read_text().strip()
    if not (p / "state.json").exists():
        raise CheckpointError(f"{f} points to {p}, which is not a complete checkpoint")
    return p
