"""Atomic training checkpoints: model (Clover format), optimizer (safetensors), trainer state (JSON).

Layout: ``run/step-00001000/{config.json, model.safetensors, optimizer.safetensors, state.json}``
and ``run/latest`` naming the newest complete one. A step directory is written under a temporary
name and renamed when complete, and ``latest`` is replaced atomically, so a killed run never
leaves a broken checkpoint behind. No pickle anywhere.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from clover.model.io import CheckpointError, load_model, save_model


def _optim_to_tensors(opt: torch.optim.Optimizer, names: dict[int, str]) -> tuple[dict, dict]:
    tensors, scalars = {}, {}
    for group in opt.param_groups:
        for p in group["params"]:
            st = opt.state.get(p, {})
            for k, v in st.items():
                key = f"{names[id(p)]}::{k}"
                if torch.is_tensor(v):
                    tensors[key] = v.detach().contiguous().cpu()
                else:
                    scalars[key] = v
    return tensors, scalars


def save_checkpoint(
    run_dir: str | Path, step: int, model, opt: torch.optim.Optimizer, state: dict, keep: int = 2
) -> Path:
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    final = run / f"step-{step:08d}"
    tmp = run / f".step-{step:08d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    save_model(model, tmp)
    names = {id(p): n for n, p in model.named_parameters()}
    tensors, scalars = _optim_to_tensors(opt, names)
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    (tmp / "state.json").write_text(json.dumps({**state, "step": step, "optimizer_scalars": scalars}, indent=1))
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


def load_checkpoint(path: Path, model, opt: torch.optim.Optimizer) -> dict:
    """Load weights into ``model`` (must fit its config) and state into ``opt``; returns trainer state."""
    src = load_model(path)
    if src.config.to_dict() != model.config.to_dict():
        diff = sorted(k for k, v in model.config.to_dict().items() if src.config.to_dict().get(k) != v)
        raise CheckpointError(f"{path}: checkpoint config differs from the run's config in {diff}")
    model.load_state_dict(src.state_dict())
    try:
        tensors = load_file(str(path / "optimizer.safetensors"))
        state = json.loads((path / "state.json").read_text())
    except Exception as e:  # noqa: BLE001 - any failure here means an unusable checkpoint
        raise CheckpointError(f"{path}: unreadable optimizer/trainer state ({e})") from None
    scalars = state.pop("optimizer_scalars", {})
    by_name = dict(model.named_parameters())
    for key, v in tensors.items():
        name, k = key.split("::")
        opt.state[by_name[name]][k] = v.to(by_name[name].device)
    for key, v in scalars.items():
        name, k = key.split("::")
        opt.state[by_name[name]][k] = v
    return state
