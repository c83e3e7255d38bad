"""Per-request GDN history for Clover under SGLang: a pool keyed by SGLang's request slot.

SGLang gives every running request a slot (``forward_batch.req_pool_indices``) for its whole
life; its KV pool holds the attention history, and this pool holds what Clover's GDN layers
carry instead: per GDN layer the recurrent state ``S [Hv, dk, dv]`` (fp32) and the conv tail
``[K-1, conv_dim]`` after the request's last committed block, plus (for ``shift_logits`` models)
the final hidden state at the last committed position. ``length[slot]`` says how many tokens
that history covers. The history before that block is kept too (``prev``): SGLang forwards a
row whose block is done again while other rows of its batch are still denoising, and that
forward must read the history before the block, as the first commit did, or the keys and values
it writes again would differ.

A forward gathers its rows (``rows``) and writes back only the rows that committed (``store``),
so a denoise pass never changes the history. A block starting at position 0 starts a request
(the slot's old contents, from a finished request, are dropped); any other start must equal the
slot's length, or the history would be another request's or a stale one (a prefix reused from
SGLang's radix cache carries attention history but no GDN state, which is why the Clover
algorithms turn that cache off); a block ending at the slot's length is that repeated commit,
and reads ``prev``.

Under tensor parallelism (``clover_sglang.sharding``) each rank's pool is built from its share's
config and holds that rank's GDN heads only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from clover.model.cache import GDNCache
from clover.model.config import ATTN, CloverConfig


@dataclass
class Rows:
    """The history of a forward's rows ``[B, ...]`` (copies: the pool changes only on ``store``)."""

    slots: torch.Tensor  # [B] long
    layers: dict[int, GDNCache]  # GDN layer index → its rows' state and tail (advanced by commits)
    last_hidden: torch.Tensor  # [B, H]
    start: list[int]  # block start position per row
    before: dict[int, GDNCache]  # the same before the block (untouched)
    last_before: torch.Tensor  # [B, H]


class GDNStatePool:
    def __init__(self, config: CloverConfig, capacity: int = 8):
        self.config = config
        self.gdn_layers = [i for i, t in enumerate(config.layer_types) if t != ATTN]
        self.capacity = 0
        # key (name, layer) → [capacity, ...]: "S", "tail" per GDN layer, ("last", -1); and the
        # same with "prev_" for the history before the slot's last committed block
        self.t: dict[tuple[str, int], torch.Tensor] = {}
        self.length: list[int] = []
        self.prev_length: list[int] = []
        self._capacity = capacity

    def _grow(self, need: int, device, dtype) -> None:
        """Room for slots ``0 .. need-1`` (doubling; the slots held so far are kept)."""
        if need <= self.capacity:
            return
        c = self.config
        cap = max(need, 2 * self.capacity, self._capacity)
        Hv, dk, dv = c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim
        conv_dim = 2 * c.linear_num_key_heads * dk + Hv * dv
        acc = torch.promote_types(dtype, torch.float32)

        def grow(old, *shape, dt):
            new = torch.zeros(cap, *shape, device=device, dtype=dt)
            if old is not None:
                new[: old.shape[0]] = old
            return new

        for pre in ("", "prev_"):
            for i in self.gdn_layers:
                self.t[pre + "S", i] = grow(self.t.get((pre + "S", i)), Hv, dk, dv, dt=acc)
                self.t[pre + "tail", i] = grow(
                    self.t.get((pre + "tail", i)), c.linear_conv_kernel_dim - 1, conv_dim, dt=dtype
                )
            self.t[pre + "last", -1] = grow(self.t.get((pre + "last", -1)), c.hidden_size, dt=dtype)
        self.length += [0] * (cap - self.capacity)
        self.prev_length += [-1] * (cap - self.capacity)
        self.capacity = cap

    def rows(self, slots: torch.Tensor, start: list[int], block_size: int, dtype: torch.dtype | None = None) -> Rows:
        """The history of ``slots`` for blocks starting at ``start`` (0: a new request, empty)."""
        slot_list = slots.tolist()
        dtype = dtype or torch.get_default_dtype()
        self._grow(max(slot_list) + 1, slots.device, dtype)
        fresh, again = [], []
        for r, (s, p) in enumerate(zip(slot_list, start)):
            if p == 0:
                fresh.append(r)
            elif self.length[s] == p + block_size and self.prev_length[s] == p:
                again.append(r)
            elif self.length[s] != p:
                raise RuntimeError(
                    f"clover-sglang: request slot {s} holds GDN history up to position {self.length[s]}, "
                    f"but its block starts at {p} (a reused prefix? the Clover algorithms need the radix cache off)"
                )
        idx = slots.long()
        get = lambda key, rows: self.t[key][idx] if rows is None else self.t[key][idx[rows]]
        layers = {i: GDNCache(get(("S", i), None), get(("tail", i), None)) for i in self.gdn_layers}
        last = get(("last", -1), None)
        for rows, pre in ((again, "prev_"), (fresh, None)):
            if not rows:
                continue
            r = torch.tensor(rows, device=slots.device)
            for i, c in layers.items():
                c.S[r] = 0 if pre is None else get((pre + "S", i), r)
                c.tail[r] = 0 if pre is None else get((pre + "tail", i), r)
            last[r] = 0 if pre is None else get((pre + "last", -1), r)
        before = {i: GDNCache(c.S.clone(), c.tail.clone()) for i, c in layers.items()}
        return Rows(idx, layers, last, list(start), before, last.clone())

    def store(self, rows: Rows, commit: torch.Tensor, block_size: int) -> None:
        """Write back the rows that committed their block ``[B]`` bool; their history grows by it."""
        sel = commit.nonzero()[:, 0]
        if not len(sel):
            return
        slots = rows.slots[sel]
        for pre, layers, last in (("prev_", rows.before, rows.last_before), ("", rows.layers, rows.last_hidden)):
            for i, c in layers.items():
                self.t[pre + "S", i][slots] = c.S[sel].to(self.t[pre + "S", i].dtype)
                self.t[pre + "tail", i][slots] = c.tail[sel].to(self.t[pre + "tail", i].dtype)
            self.t[pre + "last", -1][slots] = last[sel].to(self.t[pre + "last", -1].dtype)
        for r in sel.tolist():
            s = int(rows.slots[r])
            self.prev_length[s], self.length[s] = rows.start[r], rows.start[r] + block_size
