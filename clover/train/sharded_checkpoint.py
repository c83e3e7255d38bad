"""Checkpoints of an FSDP2-sharded run, written by every rank in parallel with
``torch.distributed.checkpoint`` (DCP) in safetensors (``HuggingFaceStorageWriter``): no rank
gathers the model, and nothing is pickled (DCP's default writer pickles its ``.metadata``; the
safetensors writer keeps each shard's offsets in its own header instead).

Layout of ``run/step-00001000/`` (written as ``.step-00001000.tmp``, renamed when complete)::

    config.json, tokenizer files         a Clover model directory: ``clover eval|serve --model``
    model.safetensors.index.json         load it as it is
    model-000II-of-000NN.safetensors     the weights, consolidated from the ranks' shards (one
                                         file per decoder layer, one for the rest)
    optimizer/shard-000RR-model-000II-of-000NN.safetensors
                                         rank RR's rows of the AdamW state, one tensor per key
                                         ``optim.state.<parameter>.<exp_avg|exp_avg_sq|step>``
                                         with its offsets in the file's header
    state.json                           the trainer's scalars and the step

Resuming reads each rank's rows of every tensor (``get_slice``), at any number of processes,
sharded or not: DCP reshards on load.

torch.distributed.checkpoint takes about a second to import, so the functions that need it
import it (deferred on purpose).

The ``torch.distributed`` modules (checkpoint, FSDP, DTensor) are imported inside the functions: they
are slow to import, and this module is loaded wherever a recipe is (evaluation, the benchmarks),
which never shards or writes a checkpoint.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
import torch.distributed as dist

from clover.model.io import INDEX, CheckpointError, load_config
from clover.train.layout import OPTIM, publish

_PREFIX = "optim.state."


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def _file_of(fqn: str) -> int:
    """Which output file a parameter goes to: 1 for the embeddings, norm and head, 2 + i for
    decoder layer i (files of one layer each keep every write and read bounded)."""
    if fqn.startswith("model.layers."):
        return 2 + int(fqn.split(".")[2])
    return 1


def _model_state(model) -> dict[str, torch.Tensor]:
    """The weights as this rank holds them (DTensor shards, or plain tensors), the tied head
    left out (stored once, as the embedding, as Clover model directories do)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    state = get_model_state_dict(model)
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    return state


def write_model_dir(model, out: Path) -> None:
    """Write ``model`` as a Clover model directory (config + weights) into ``out``. Every rank
    writes its shards, then rank 0 consolidates them one tensor at a time into the directory's
    weight files and drops the shards. Every rank must call it."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageWriter

    out = Path(out)
    state = _model_state(model)
    if _rank() == 0:
        out.mkdir(parents=True, exist_ok=True)
        for old in list(out.glob("model*.safetensors")) + [out / INDEX]:
            old.unlink(missing_ok=True)
        shutil.rmtree(out / "sharded", ignore_errors=True)
    _barrier()
    mapping = {k: _file_of(k) for k in state}
    writer = HuggingFaceStorageWriter(
        str(out), fqn_to_index_mapping=mapping, save_distributed=True, enable_consolidation=True
    )
    dcp.save(state, storage_writer=writer)
    _barrier()  # rank 0 consolidates in DCP's finish step; the others wait for it
    if _rank() == 0:
        shutil.rmtree(out / "sharded", ignore_errors=True)
        model.config.save(out / "config.json")


def _flat_optimizer(model, opt) -> tuple[dict[str, torch.Tensor], dict]:
    """AdamW state as this rank holds it: ``optim.state.<param>.<key>`` → tensor (DTensor shards
    of a sharded model); any non-tensor entries apart, for state.json."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    tensors, scalars = {}, {}
    for fqn, st in get_optimizer_state_dict(model, opt)["state"].items():
        for k, v in st.items():
            (tensors if torch.is_tensor(v) else scalars)[f"{_PREFIX}{fqn}.{k}"] = v
    return tensors, scalars


def save_sharded_checkpoint(
    run_dir: str | Path, step: int, model, opt, state: dict, keep: int = 2, tokenizer=None
) -> Path:
    """Write ``run/step-N`` atomically (see the module's layout). Every rank must call it."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageWriter

    run = Path(run_dir)
    final, tmp = run / f"step-{step:08d}", run / f".step-{step:08d}.tmp"
    if _rank() == 0:
        run.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    _barrier()
    write_model_dir(model, tmp)
    tensors, scalars = _flat_optimizer(model, opt)
    mapping = {k: _file_of(k[len(_PREFIX) :]) for k in tensors}
    writer = HuggingFaceStorageWriter(str(tmp / OPTIM), fqn_to_index_mapping=mapping, save_distributed=True)
    dcp.save(tensors, storage_writer=writer)
    _barrier()
    if _rank() == 0:
        if tokenizer is not None:
            tokenizer.save(tmp)
        publish(tmp, final, {**state, "step": step, "optimizer_scalars": scalars}, keep)
    _barrier()  # nobody resumes or exits before the checkpoint is complete
    return final


def load_sharded_checkpoint(path: Path, model, opt) -> dict:
    """Load a sharded checkpoint into ``model`` (plain or FSDP2, any number of ranks) and
    ``opt``; returns the trainer state. Each rank reads only the rows it holds."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageReader
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    path = Path(path)
    ours, theirs = model.config.to_dict(), load_config(path).to_dict()
    if ours != theirs:
        diff = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))
        raise CheckpointError(f"{path}: checkpoint config differs from the run's config in {diff}")
    try:
        weights = _model_state(model)
        dcp.load(weights, storage_reader=HuggingFaceStorageReader(str(path)))
        reader = HuggingFaceStorageReader(str(path / OPTIM))
        target = {}
        for key, md in reader.read_metadata().state_dict_metadata.items():
            fqn, k = key[len(_PREFIX) :].rsplit(".", 1)
            p = model.get_parameter(fqn)
            like = tuple(md.size) == tuple(p.shape)  # moments: sharded like their parameter
            target[key] = (
                torch.zeros_like(p, dtype=md.properties.dtype)
                if like
                else torch.zeros(md.size, dtype=md.properties.dtype)
            )
        dcp.load(target, storage_reader=reader)
        state = json.loads((path / "state.json").read_text())
    except Exception as e:
        raise CheckpointError(f"{path}: unreadable sharded checkpoint ({type(e).__name__}: {e})") from None
    set_model_state_dict(model, weights, options=StateDictOptions(strict=not model.config.tie_word_embeddings))
    per_param: dict[str, dict] = {}
    for key, v in list(target.items()) + list(state.pop("optimizer_scalars", {}).items()):
        fqn, k = key[len(_PREFIX) :].rsplit(".", 1)
        per_param.setdefault(fqn, {})[k] = v
    groups = get_optimizer_state_dict(model, opt)["param_groups"]  # parameter names per group
    # a parameter that never had a gradient (left unused by an ablation switch) has no state to load
    set_optimizer_state_dict(
        model, opt, {"state": per_param, "param_groups": groups}, options=StateDictOptions(strict=False)
    )
    return state
