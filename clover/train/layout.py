"""A run directory's checkpoints, whatever their format: ``run/step-NNNNNNNN/`` directories and
``run/latest`` naming the newest complete one (``publish`` makes a finished one visible, durably;
``latest_checkpoint`` finds the newest intact one, passing over one cut short or half written),
and which of the three formats a checkpoint has
(``checkpoint_format``): ``plain`` (gathered to rank 0: ``checkpoint``), ``sharded`` (every rank
writes its rows: ``sharded_checkpoint``) or ``hf`` (a transformers model, the autoregressive
base, in its own format: ``hf_checkpoint``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from safetensors import safe_open

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


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(tmp: Path, final: Path, state: dict, keep: int) -> Path:
    """Finish a checkpoint written under ``tmp``: its ``state.json``, every file and folder of it
    flushed to disk (fsync), the rename to ``final``, ``latest`` replaced atomically, then all but
    the newest ``keep`` step directories removed. A crash at any point leaves either the old
    checkpoint or the new one complete, never a renamed one whose data the disk had not yet kept."""
    run = final.parent
    (tmp / "state.json").write_text(json.dumps(state, indent=1))
    for p in sorted(tmp.rglob("*"), key=lambda p: -len(p.parts)):  # files, then the folders that hold them
        _fsync(p)
    _fsync(tmp)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    latest_tmp = run / ".latest.tmp"
    latest_tmp.write_text(final.name)
    _fsync(latest_tmp)
    os.replace(latest_tmp, run / "latest")
    _fsync(run)
    for old in sorted(run.glob("step-*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def damage(path: Path) -> str | None:
    """Why the checkpoint ``path`` cannot be resumed (None: it is intact): its ``state.json``
    missing or unreadable (a save cut before it finished), or a weights or optimizer file cut short
    or corrupt, found from the files' headers (safetensors checks that each file holds every
    tensor its header lists) without reading the tensors."""
    try:
        state = json.loads((path / "state.json").read_text())
        if not isinstance(state, dict) or not isinstance(state.get("step"), int):
            return "state.json has no step"
        if (path / "config.json").exists():
            json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as e:
        return f"unreadable state.json or config.json ({e})"
    files = sorted(path.rglob("*.safetensors"))
    if not any(f.parent == path and f.name.startswith("model") for f in files):
        return "no model weights"
    if not ((path / "optimizer.safetensors").exists() or (path / OPTIM).is_dir()):
        return "no optimizer state"
    index = path / "model.safetensors.index.json"
    if index.exists():
        try:
            listed = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            return f"{index.name}: unreadable ({e})"
        missing = sorted(listed - {f.name for f in files})
        if missing:
            return f"weight files missing: {missing[:3]}"
    for f in files:
        try:
            with safe_open(f, framework="pt"):
                pass
        except Exception as e:
            return f"{f.relative_to(path)}: {e}"
    return None


def latest_checkpoint(run_dir: str | Path, skipped: list[str] | None = None) -> Path | None:
    """The newest intact checkpoint of a run: the one ``latest`` names, else (it is damaged, or
    ``latest`` is missing or names nothing) the newest intact ``step-N`` directory; None when the
    run has no checkpoint. Each damaged one passed over adds ``"step-N: why"`` to ``skipped``; a
    run whose checkpoints are all damaged is a CheckpointError."""
    run = Path(run_dir)
    f = run / "latest"
    name = f.read_text().strip() if f.exists() else ""
    named = run / name if name.startswith("step-") else None
    steps = sorted((p for p in run.glob("step-*") if p.is_dir()), reverse=True)
    order = ([named] if named is not None else []) + [p for p in steps if p != named]
    if not order:
        return None
    reasons = []
    for p in order:
        why = damage(p) if p.is_dir() else "no such directory"
        if why is None:
            if skipped is not None:
                skipped.extend(reasons)
            return p
        reasons.append(f"{p.name}: {why}")
    raise CheckpointError(f"{run}: no intact checkpoint to resume ({'; '.join(reasons)})")
