"""Building a model for training at scale with PyTorch FSDP2: on the meta device, sharded, then
each rank materialises and initialises only its own rows.

``build_sharded`` is the path for models that do not fit one device: the model is built under
``torch.device("meta")`` (shapes only), each decoder layer and then the root are ``fully_shard``-ed
(dim 0 of every parameter split over the ranks), ``to_empty`` allocates the local shards, and
``init_local`` fills them. Optional per-layer activation checkpointing and bf16 mixed precision
(fp32 master weights, gradients reduced in fp32) are applied on the way.

``init_local`` draws every parameter from the distribution of the model's own init
(``CloverForBlockDiffusion.reset_parameters`` and the GDN mixer's constructor), in blocks of
rows each drawn from its own seeded generator: a rank draws only the blocks its rows fall in, and
the values do not depend on the number of ranks (one process and two give the same model).

torch.distributed's FSDP, device-mesh and tensor modules take about a second to import, so
the functions that shard import them (deferred on purpose).

The ``torch.distributed`` modules (checkpoint, FSDP, DTensor) are imported inside the functions: they
are slow to import, and this module is loaded wherever a recipe is (evaluation, the benchmarks),
which never shards or writes a checkpoint.
"""

from __future__ import annotations

import math
import zlib

import torch
import torch.distributed as dist
from torch import nn

from clover.model import CloverConfig, CloverForBlockDiffusion
from clover.model.layers import RotaryEmbedding

_BLOCK_ELEMENTS = 1 << 16  # values drawn per seeded generator (whole rows, at least one)


def single_process_group(device: torch.device | None = None) -> None:
    """A process group of one (in-memory store; nccl for a GPU, else gloo, as under torchrun),
    so FSDP2 runs without torchrun too."""
    if not dist.is_initialized():
        cuda = device is not None and device.type == "cuda"
        if cuda:
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if cuda else "gloo", store=dist.HashStore(), rank=0, world_size=1)


def is_sharded(model: nn.Module) -> bool:
    """Whether ``model``'s parameters are FSDP2 shards (DTensors)."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def local_rows(t: torch.Tensor) -> tuple[torch.Tensor, int]:
    """This rank's part of ``t`` and the global index of its first row: the whole tensor from row 0
    for a plain tensor; for an FSDP2 ``Shard(0)`` DTensor its local rows, which FSDP2 cuts as
    ``torch.chunk`` does (ceil(n / ranks) rows each, the last ranks may get fewer or none)."""
    from torch.distributed.tensor import DTensor, Shard

    if not isinstance(t, DTensor):
        return t, 0
    if tuple(t.placements) != (Shard(0),):
        raise ValueError(f"expected a DTensor sharded on dim 0 over one mesh dimension, got {t.placements}")
    local = t.to_local()
    n, ranks, r = t.shape[0], t.device_mesh.size(), t.device_mesh.get_local_rank()
    per = -(-n // ranks)
    start = min(n, r * per)
    if local.shape[0] != min(n, start + per) - start:
        raise ValueError(
            f"local shard of {local.shape[0]} rows does not match rows {start}.. of {n} over {ranks} ranks"
        )
    return local, start


def _fill(name: str, config: CloverConfig):
    """The init of parameter ``name``: (constant or None, sampler ``(shape, generator) -> tensor``)."""
    leaf = name.rsplit(".", 1)[-1]
    std = config.initializer_range
    if name.endswith(("layernorm.weight", "norm.weight")):
        return (1.0 if "linear_attn.norm" in name else 0.0), None  # gated norm plain, RMSNorm zero-centred
    if leaf in ("conv_right", "mem_key", "mem_bias"):
        return 0.0, None
    if leaf in ("dt_bias", "mem_gamma", "mem_scale"):
        return 1.0, None
    if leaf == "attn_scale":
        return math.sqrt(config.linear_key_head_dim), None
    if leaf == "A_log":
        return None, lambda shape, g: torch.empty(shape).uniform_(1, 16, generator=g).log()
    s = 0.5 if "conv1d" in name else std
    return None, lambda shape, g: torch.empty(shape).normal_(0.0, s, generator=g)


@torch.no_grad()
def init_local(model: CloverForBlockDiffusion, seed: int = 0) -> None:
    """Initialise this rank's rows of every parameter (plain or FSDP2-sharded) with the
    distribution of the model's own init, and rebuild the rope frequencies. The same values on
    any number of ranks."""
    seen = set()
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen:  # a tied head: the embedding already set it
            continue
        seen.add(id(p))
        local, start = local_rows(p)
        const, sample = _fill(name, model.config)
        if const is not None:
            local.fill_(const)
            continue
        if local.shape[0] == 0:
            continue
        row = math.prod(p.shape[1:])
        per = max(1, _BLOCK_ELEMENTS // max(1, row))  # rows per generator
        n = local.shape[0]
        for b in range(start // per, (start + n - 1) // per + 1):
            g = torch.Generator().manual_seed(seed * (1 << 32) + zlib.crc32(f"{name}:{b}".encode()))
            lo = b * per
            vals = sample((min(per, p.shape[0] - lo), *p.shape[1:]), g)  # [rows of block b, ...]
            a, z = max(lo, start), min(lo + per, start + n)
            local[a - start : z - start].copy_(vals[a - lo : z - lo])
    rebuild_buffers(model)


@torch.no_grad()
def rebuild_buffers(model: CloverForBlockDiffusion) -> None:
    """The rope frequencies: a non-persistent buffer, left empty by meta construction."""
    model.model.rotary_emb.inv_freq.copy_(RotaryEmbedding(model.config).inv_freq)


def apply_checkpointing(model: CloverForBlockDiffusion) -> None:
    """Recompute each decoder layer's activations in the backward pass instead of keeping them
    (non-reentrant checkpointing; parameter names are unchanged)."""
    from torch.distributed._composable import checkpoint

    for layer in model.model.layers:
        checkpoint(layer)


def shard(model: CloverForBlockDiffusion, kind: str, dtype: torch.dtype = torch.float32) -> CloverForBlockDiffusion:
    """FSDP2 over all ranks of the default group, on devices of ``kind`` ("cpu", "cuda"): every
    decoder layer, then the root. ``dtype`` bfloat16: layers compute with bf16 copies of the
    fp32 shards and gradients are reduced in fp32 (the optimizer sees fp32 only)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(kind, (dist.get_world_size(),))
    opts = {"mesh": mesh}
    if dtype != torch.float32:
        opts["mp_policy"] = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, **opts)
    fully_shard(model, **opts)
    return model


def build_sharded(
    config: CloverConfig,
    device: torch.device,
    dtype: torch.dtype = torch.float32,
    checkpointing: bool = False,
    seed: int = 0,
    init: bool = True,
) -> CloverForBlockDiffusion:
    """The model on ``device`` as FSDP2 shards, no rank ever holding more than its own rows
    (plus one layer's gathered weights while it runs). Needs an initialised process group
    (``setup_distributed``, or ``single_process_group`` for one process). ``init=False`` leaves
    the weights unset, for a caller that loads every one of them (``warm_start.init_weights``)."""
    with torch.device("meta"):
        model = CloverForBlockDiffusion(config)
    if checkpointing:
        apply_checkpointing(model)
    shard(model, device.type, dtype)
    model.to_empty(device=device)
    if init:
        init_local(model, seed)
    else:
        rebuild_buffers(model)
    return model
