"""Explicit caches for incremental decoding (docs/architecture.md, "Caches"): denoise reads them, commit writes them.

A cache holds, per row of the batch, complete committed blocks only (docs/architecture.md, Rule 1):
``lengths[b]`` tokens, always a multiple of that row's block size during decoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from clover.model.config import ATTN, CloverConfig


def prefill_blocks(model, prompt: torch.Tensor, block_size: int | None, cache=None):
    """Commit the prompt's complete blocks (Rule 1) through ``model.step`` into ``cache`` (a new one
    if None) → (cache, the prompt's tail ``[B, P mod bs]``): ``prefill`` of every back end."""
    bs = model.config.check_block_size(model.config.block_size if block_size is None else block_size)
    cache = cache if cache is not None else model.new_cache(prompt.shape[0])
    full = prompt.shape[1] // bs * bs
    if full:
        model.step(cache, commit=prompt[:, :full], block_size=bs)
    return cache, prompt[:, full:]


@dataclass
class AttnCache:
    """Keys and values ``[B, capacity, Hkv, D]``; row b holds committed tokens up to lengths[b].

    Slots past a row's length are scratch: a pass writes its new tokens there before attending
    (``Attention.forward_step``), and only a commit turns them into history by advancing
    ``lengths``. The tensors belong to this cache alone (``ModelCache.select`` and ``cat`` copy),
    so writing in place never touches another request's or the prefix cache's history."""

    k: torch.Tensor
    v: torch.Tensor

    def reserve(self, need: int) -> None:
        """At least ``need`` slots, growing by doubling (new tensors, the history copied)."""
        if need > self.k.shape[1]:
            cap = max(need, 2 * self.k.shape[1], 64)
            grow = lambda t: torch.cat([t, t.new_zeros(t.shape[0], cap - t.shape[1], *t.shape[2:])], 1)
            self.k, self.v = grow(self.k), grow(self.v)

    def write(
        self, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor, top: int | None = None, same: bool = False
    ) -> None:
        """Store ``k, v [B, n, Hkv, D]`` at positions ``lengths[b] + 0..n-1``. ``top`` is
        ``max(lengths)`` when the caller knows it (no device read), ``same`` that every row has
        that length (one slice instead of a scatter)."""
        n = k.shape[1]
        L = top if top is not None else int(lengths.max()) if lengths.numel() else 0
        self.reserve(L + n)
        if same:
            self.k[:, L : L + n] = k
            self.v[:, L : L + n] = v
            return
        rows = torch.arange(k.shape[0], device=k.device)[:, None]
        pos = lengths[:, None] + torch.arange(n, device=k.device)
        self.k[rows, pos] = k.to(self.k.dtype)
        self.v[rows, pos] = v.to(self.v.dtype)


@dataclass
class GDNCache:
    """Recurrent state ``S [B, Hv, dk, dv]`` (fp32) after the last committed block, and the
    conv tail ``[B, K-1, conv_dim]``: the last K-1 clean conv inputs before the next block."""

    S: torch.Tensor
    tail: torch.Tensor


@dataclass
class ModelCache:
    layers: list[AttnCache | GDNCache]
    lengths: torch.Tensor  # [B] committed tokens per row
    last_logits: torch.Tensor | None = None  # [B, V] clean logit at the last committed position

    @classmethod
    def empty(cls, config: CloverConfig, batch: int, device=None, dtype=torch.float32, capacity: int = 0) -> ModelCache:
        """A cache with nothing committed. ``capacity``: attention slots to allocate now per row
        (history plus the pass in flight); past it the cache grows by doubling."""
        layers: list[AttnCache | GDNCache] = []
        for t in config.layer_types:
            if t == ATTN:
                shape = (batch, capacity, config.num_key_value_heads, config.head_dim)
                z = torch.zeros(shape, device=device, dtype=dtype)
                layers.append(AttnCache(z, z.clone()))
            else:
                Hv, dk, dv = config.linear_num_value_heads, config.linear_key_head_dim, config.linear_value_head_dim
                conv_dim = 2 * config.linear_num_key_heads * dk + Hv * dv
                S = torch.zeros(batch, Hv, dk, dv, device=device, dtype=torch.promote_types(dtype, torch.float32))
                tail = torch.zeros(batch, config.linear_conv_kernel_dim - 1, conv_dim, device=device, dtype=dtype)
                layers.append(GDNCache(S, tail))
        return cls(layers, torch.zeros(batch, dtype=torch.long, device=device))

    @property
    def batch_size(self) -> int:
        return self.lengths.shape[0]

    def select(self, rows: list[int] | torch.Tensor) -> ModelCache:
        """A new cache holding only ``rows`` (used when requests leave a batch)."""
        idx = torch.as_tensor(rows, dtype=torch.long, device=self.lengths.device)
        layers = []
        for c in self.layers:
            if isinstance(c, AttnCache):
                L = int(self.lengths[idx].max()) if idx.numel() else 0
                layers.append(AttnCache(c.k[idx, :L].clone(), c.v[idx, :L].clone()))
            else:
                layers.append(GDNCache(c.S[idx].clone(), c.tail[idx].clone()))
        last = None if self.last_logits is None else self.last_logits[idx].clone()
        return ModelCache(layers, self.lengths[idx].clone(), last)

    @staticmethod
    def cat(caches: list[ModelCache]) -> ModelCache:
        """Join caches row-wise (requests joining a batch); attention caches are padded."""
        layers = []
        for parts in zip(*(c.layers for c in caches)):
            if isinstance(parts[0], AttnCache):
                L = max(p.k.shape[1] for p in parts)
                pad = lambda t: torch.cat([t, t.new_zeros(t.shape[0], L - t.shape[1], *t.shape[2:])], 1)
                layers.append(AttnCache(torch.cat([pad(p.k) for p in parts]), torch.cat([pad(p.v) for p in parts])))
            else:
                layers.append(GDNCache(torch.cat([p.S for p in parts]), torch.cat([p.tail for p in parts])))
        # a row with no committed block has no clean logit yet: zeros, never used for a prompt
        # token, but they keep the other rows' logits (dropping them all was a bug)
        known = [c.last_logits for c in caches if c.last_logits is not None]
        last = None
        if known:
            V, ref = known[0].shape[-1], known[0]
            last = torch.cat(
                [c.last_logits if c.last_logits is not None else ref.new_zeros(c.batch_size, V) for c in caches]
            )
        return ModelCache(layers, torch.cat([c.lengths for c in caches]), last)

    def nbytes(self) -> int:
        """Bytes actually held for committed history (attention KV up to each row's length)."""
        total = 0
        for c in self.layers:
            if isinstance(c, AttnCache):
                per_tok = c.k.shape[2] * c.k.shape[3] * c.k.element_size() * 2  # k and v
                total += int(self.lengths.sum()) * per_tok
            else:
                total += c.S.numel() * c.S.element_size() + c.tail.numel() * c.tail.element_size()
        return total
