"""Atomic training checkpoints gathered to rank 0: model (Clover format, or Hugging Face format
for the AR base), optimizer (safetensors), trainer state (JSON). A Clover model sharded by FSDP2
is checkpointed shard by shard instead (``sharded_checkpoint``); ``write_checkpoint`` and
``load_checkpoint`` pick the format with ``layout.checkpoint_format``.

Layout: ``run/step-00001000/{config.json, model.safetensors, optimizer.safetensors, state.json}``
and ``run/latest`` naming the newest complete one. A step directory is written under a temporary
name and renamed when complete, and ``latest`` is replaced atomically, so a killed run never
leaves a broken checkpoint behind. No pickle anywhere.

torch.distributed.checkpoint takes about a second to import, so the functions that need it
import it (deferred on purpose).

The ``torch.distributed`` modules (checkpoint, FSDP, DTensor) are imported inside the functions: they
are slow to import, and this module is loaded wherever a recipe is (evaluation, the benchmarks),
which never shards or writes a checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file

from clover.model.io import CheckpointError, load_model, save_model
from clover.train.hf_checkpoint import load_hf_state, save_hf
from clover.train.layout import HF, SHARDED, checkpoint_format, publish
from clover.train.sharded_checkpoint import load_sharded_checkpoint, save_sharded_checkpoint


def _opts(gather_to_rank0: bool = True):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=gather_to_rank0)


def gather_model_state(model) -> dict:
    """The model's weights as full CPU tensors (FSDP2: every rank calls, rank 0 receives them)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model, options=_opts())


def gather_state(model, opt: torch.optim.Optimizer) -> tuple[dict, dict]:
    """Model and optimizer state as full CPU tensors keyed by parameter name. Under FSDP2 this
    gathers the shards (every rank must call it; rank 0 receives the tensors)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    msd, osd = get_state_dict(model, opt, options=_opts())
    return msd, osd.get("state", {})


def write_checkpoint(
    run_dir: str | Path, step: int, model, opt: torch.optim.Optimizer, state: dict, tokenizer=None
) -> None:
    """Checkpoint a run in its model's format; every rank calls it. Sharded: every rank writes its
    shards; otherwise the state is gathered and rank 0 writes it, and no rank goes on before the
    checkpoint is complete."""
    if checkpoint_format(model) == SHARDED:
        save_sharded_checkpoint(run_dir, step, model, opt, state, tokenizer=tokenizer)
        return
    gathered = gather_state(model, opt)
    if not dist.is_initialized() or dist.get_rank() == 0:
        save_checkpoint(run_dir, step, model, opt, state, tokenizer=tokenizer, gathered=gathered)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    model,
    opt: torch.optim.Optimizer,
    state: dict,
    keep: int = 2,
    tokenizer=None,
    gathered: tuple[dict, dict] | None = None,
) -> Path:
    """Write ``run/step-N`` atomically. With ``tokenizer`` the step directory is also a complete
    model directory (``clover eval|serve --model run/step-N`` load it as it is). ``gathered``
    is ``gather_state``'s result when the caller already collected it (FSDP2: rank 0 writes)."""
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    final = run / f"step-{step:08d}"
    tmp = run / f".step-{step:08d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    msd, osd = gathered if gathered is not None else gather_state(model, opt)
    if checkpoint_format(model) == HF:
        save_hf(model, tokenizer, tmp, state=msd)
    else:
        save_model(model, tmp, state=msd)
        if tokenizer is not None:
            tokenizer.save(tmp)
    tensors, scalars = {}, {}
    for name, st in osd.items():
        for k, v in st.items():
            if torch.is_tensor(v):
                tensors[f"{name}::{k}"] = v.detach().contiguous().cpu()
            else:
                scalars[f"{name}::{k}"] = v
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    return publish(tmp, final, {**state, "step": step, "optimizer_scalars": scalars}, keep)


def load_checkpoint(path: Path, model, opt: torch.optim.Optimizer) -> dict:
    """Load weights into ``model`` (must fit its config) and state into ``opt``; returns trainer
    state. Works on a plain or an FSDP2-sharded model (every rank reads the files)."""
    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    fmt = checkpoint_format(model, path)
    if fmt == SHARDED:
        return load_sharded_checkpoint(path, model, opt)
    if fmt == HF:
        weights = load_hf_state(path, model)
    else:
        src = load_model(path)
        if src.config.to_dict() != model.config.to_dict():
            diff = sorted(k for k, v in model.config.to_dict().items() if src.config.to_dict().get(k) != v)
            raise CheckpointError(f"{path}: checkpoint config differs from the run's config in {diff}")
        weights = src.state_dict()
    try:
        tensors = load_file(str(path / "optimizer.safetensors"))
        state = json.loads((path / "state.json").read_text())
    except Exception as e:
        raise CheckpointError(f"{path}: unreadable optimizer/trainer state ({e})") from None
    per_param: dict[str, dict] = {}
    for key, v in list(tensors.items()) + list(state.pop("optimizer_scalars", {}).items()):
        name, k = key.split("::")
        per_param.setdefault(name, {})[k] = v
    opts = _opts(gather_to_rank0=False)  # every rank holds the full state it read
    groups = get_optimizer_state_dict(model, opt, options=opts)["param_groups"]  # parameter names per group
    set_model_state_dict(model, weights, options=opts)  # every weight, strictly
    # not strict: a parameter that never had a gradient (an ablation switch leaves it unused) had
    # no optimizer state when the checkpoint was written, and resumes with none
    loose = dataclasses.replace(opts, strict=False)
    set_optimizer_state_dict(model, opt, {"state": per_param, "param_groups": groups}, options=loose)
    return state
