"""Tensor parallelism for Clover's layers: how rank r of a group of ``size`` ranks holds the model.

The layout is Megatron's, as SGLang's own Qwen3-Next / Qwen3.5 models shard:

* attention: query heads (each with its output gate) split across ranks, column-parallel; key
  and value heads split when ``num_key_value_heads`` is a multiple of ``size``, else (``size`` a
  multiple of it) each rank holds the one key/value head its query heads read; ``o_proj``
  row-parallel, its partial outputs summed over ranks (all-reduce);
* the GDN mixer: value heads split, with everything per value head (gates, ``dt_bias``,
  ``A_log``, the memory slot ``mem_*`` and calibration, the state ``S`` and the conv channels of
  its values); key heads split the same way, or replicated as attention's key/value heads are;
  ``out_proj`` row-parallel + all-reduce. So a rank's GDN state holds its own heads only;
* the feed-forward: every expert's intermediate width split (``gate_up_proj`` rows,
  ``down_proj`` columns), the shared expert and a dense MLP likewise; the router and the shared
  expert's gate replicated; the layer's output summed over ranks. (The gate multiplies the shared
  expert's output token by token, so the partial sums add up to the whole.)
* embeddings, norms and the head replicated.

A rank's model is Clover's own model built from ``TensorParallel.local`` (the same config with
the per-rank head counts and widths), loaded with ``TensorParallel.shard``'s slices of the full
checkpoint, and ``parallelize``-d: a forward hook sums each row-parallel output over the group.
Everything else (caches, ``step``, the engine's contract) is unchanged, so the sharded model runs
wherever the model runs. This module imports torch and clover only: the SGLang model
(``clover_sglang.model``) uses it with SGLang's tensor-parallel group, the project's tests with
``torch.distributed`` (gloo).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from clover.model.config import CloverConfig

# the modules whose outputs are partial sums over the ranks (one all-reduce each per layer)
REDUCED = ("self_attn.o_proj", "linear_attn.out_proj", "mlp")
# parameters every rank holds whole
REPLICATED = (
    "model.embed_tokens.weight",
    "model.norm.weight",
    "lm_head.weight",
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
    "linear_attn.norm.weight",
    "mlp.gate.weight",
    "mlp.shared_expert_gate.weight",
)
_LAYER = re.compile(r"^model\.layers\.\d+\.")


@dataclass(frozen=True)
class Part:
    """One segment of a split dimension: ``count`` units of ``unit`` elements, of which a rank
    keeps the units in ``keep``."""

    unit: int
    count: int
    keep: range


class TensorParallel:
    """Rank ``rank`` of ``size`` holding a Clover model of ``config``; ``local`` is the config of
    the rank's share. Shapes that cannot be split raise ``ValueError`` naming the field."""

    def __init__(self, config: CloverConfig, rank: int, size: int):
        if not isinstance(size, int) or size < 1 or not 0 <= rank < size:
            raise ValueError(f"tensor-parallel rank {rank} of {size}: need 0 <= rank < size")
        self.config, self.rank, self.size = config, rank, size
        c = config
        self.q_heads = self._split("num_attention_heads")
        self.kv_heads = self._grouped("num_key_value_heads", self.q_heads, c.num_attention_heads)
        self.v_heads = self._split("linear_num_value_heads")
        self.k_heads = self._grouped("linear_num_key_heads", self.v_heads, c.linear_num_value_heads)
        if c.num_experts:
            self.inter = self._split("moe_intermediate_size")
            self.shared = self._split("shared_expert_intermediate_size")
        else:
            self.inter = self._split("intermediate_size")
        self.local = self._local_config()
        self._parts = self._layout()

    # -- the split of each dimension ---------------------------------------------------------
    def _split(self, field: str) -> range:
        """This rank's units of ``field``, split evenly across the group."""
        n = getattr(self.config, field)
        if n % self.size:
            raise ValueError(f"{field} = {n} cannot be split across --tp-size {self.size}: it must be a multiple of it")
        per = n // self.size
        return range(self.rank * per, (self.rank + 1) * per)

    def _grouped(self, field: str, readers: range, n_readers: int) -> range:
        """The heads of ``field`` (key/value heads) that this rank's ``readers`` (query or value
        heads, ``n_readers`` in all, reader i reading head i // (n_readers / n)) read: split when
        ``field`` is a multiple of the group size, else the one head they all read."""
        n = getattr(self.config, field)
        if n % self.size == 0:
            return self._split(field)
        if self.size % n:
            raise ValueError(
                f"{field} = {n} cannot be split across --tp-size {self.size}: "
                "it must be a multiple of it, or divide it (each rank then holds one head)"
            )
        group = n_readers // n
        return range(readers.start // group, readers.start // group + 1)

    def _local_config(self) -> CloverConfig:
        c = self.config
        if c.num_experts:
            widths = {"moe_intermediate_size": len(self.inter), "shared_expert_intermediate_size": len(self.shared)}
        else:
            widths = {"intermediate_size": len(self.inter)}
        return c.replace(
            num_attention_heads=len(self.q_heads),
            num_key_value_heads=len(self.kv_heads),
            linear_num_key_heads=len(self.k_heads),
            linear_num_value_heads=len(self.v_heads),
            **widths,
        )

    def _layout(self) -> dict[str, tuple[int, list[Part]]]:
        """Per split parameter (its name inside a decoder layer): the dimension and its segments."""
        c = self.config
        D, dk, dv = c.head_dim, c.linear_key_head_dim, c.linear_value_head_dim
        nh, nkv, hk, hv = c.num_attention_heads, c.num_key_value_heads, c.linear_num_key_heads, c.linear_num_value_heads
        q, kv, kh, vh = self.q_heads, self.kv_heads, self.k_heads, self.v_heads
        conv = [Part(dk, hk, kh), Part(dk, hk, kh), Part(dv, hv, vh)]  # channels: q, k, v
        per_head = [Part(1, hv, vh)]
        out = {
            "self_attn.q_proj.weight": (0, [Part(2 * D, nh, q)]),  # per head: query then gate
            "self_attn.k_proj.weight": (0, [Part(D, nkv, kv)]),
            "self_attn.v_proj.weight": (0, [Part(D, nkv, kv)]),
            "self_attn.o_proj.weight": (1, [Part(D, nh, q)]),
            "linear_attn.in_proj_qkv.weight": (0, conv),
            "linear_attn.conv1d.weight": (0, conv),
            "linear_attn.conv_right": (0, conv),
            "linear_attn.in_proj_z.weight": (0, [Part(dv, hv, vh)]),
            "linear_attn.out_proj.weight": (1, [Part(dv, hv, vh)]),
        }
        for name in (
            "in_proj_b.weight",
            "in_proj_a.weight",
            "dt_bias",
            "A_log",
            "attn_scale",
            "mem_key",
            "mem_bias",
            "mem_gamma",
            "mem_scale",
        ):
            out["linear_attn." + name] = (0, per_head)
        inter = [Part(1, len(self.inter) * self.size, self.inter)]
        if c.num_experts:
            shared = [Part(1, len(self.shared) * self.size, self.shared)]
            out["mlp.experts.gate_up_proj"] = (1, inter + inter)  # [E, 2I, H]: gate rows, then up rows
            out["mlp.experts.down_proj"] = (2, inter)  # [E, H, I]
            mlps = {"mlp.shared_expert.": shared}
        else:
            mlps = {"mlp.": inter}
        for pre, parts in mlps.items():
            out[pre + "gate_proj.weight"] = (0, parts)
            out[pre + "up_proj.weight"] = (0, parts)
            out[pre + "down_proj.weight"] = (1, parts)
        return out

    # -- weights -----------------------------------------------------------------------------
    def shard(self, name: str, w: torch.Tensor) -> torch.Tensor:
        """This rank's slice of the full checkpoint tensor ``name`` (a Clover parameter name)."""
        key = _LAYER.sub("", name)
        if key in self._parts and self.size > 1:
            dim, parts = self._parts[key]
            return take(w, dim, parts, name)
        if key in self._parts or key in REPLICATED or name in REPLICATED:  # (one rank holds all)
            return w
        raise KeyError(f"{name}: no tensor-parallel layout for this parameter (clover_sglang.sharding)")

    def shard_state_dict(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {n: self.shard(n, w) for n, w in state.items()}


def take(w: torch.Tensor, dim: int, parts: list[Part], name: str = "tensor") -> torch.Tensor:
    """The kept units of each segment of ``w`` along ``dim``, concatenated (a new tensor)."""
    total = sum(p.unit * p.count for p in parts)
    if w.shape[dim] != total:
        raise ValueError(f"{name}: dimension {dim} has {w.shape[dim]} entries, the config gives {total}")
    pieces, off = [], 0
    for p in parts:
        pieces.append(w.narrow(dim, off + p.keep.start * p.unit, len(p.keep) * p.unit))
        off += p.unit * p.count
    return torch.cat(pieces, dim).contiguous()


def parallelize(model: nn.Module, all_reduce: Callable[[torch.Tensor], torch.Tensor]) -> list:
    """Sum the row-parallel outputs of ``model``'s decoder layers (``REDUCED``) over the group
    with ``all_reduce`` (in place or returning the sum) after each forward. ``model`` is a rank's
    model built from ``TensorParallel.local``. Returns the hook handles (``.remove()`` undoes)."""

    def hook(_module, _inputs, out):
        if isinstance(out, tuple):  # the feed-forward: (y, routing stats); the router is replicated
            return (all_reduce(out[0]), *out[1:])
        return all_reduce(out)

    handles = []
    for name, module in model.named_modules():
        if re.search(r"layers\.\d+\.(" + "|".join(map(re.escape, REDUCED)) + r")$", name):
            handles.append(module.register_forward_hook(hook))
    if not handles:
        raise ValueError("parallelize: no decoder layers found in the model")
    return handles
