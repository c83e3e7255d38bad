"""Block-causal gated attention (docs/architecture.md, "Block-causal attention"): GQA, q/k
RMSNorm, partial RoPE, output gate.

A token in block b sees all tokens of blocks < b (clean history) and every token of its own
block. In training, the noisy stream is a set of blocks, each reading its row's clean history.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from clover.model.cache import AttnCache
from clover.model.config import CloverConfig
from clover.model.layers import RMSNorm, apply_rope


class Attention(nn.Module):
    def __init__(self, config: CloverConfig):
        super().__init__()
        H, D = config.hidden_size, config.head_dim
        self.nh, self.nkv, self.hd = config.num_attention_heads, config.num_key_value_heads, D
        self.q_proj = nn.Linear(H, self.nh * D * 2, bias=False)  # query and output gate, per head
        self.k_proj = nn.Linear(H, self.nkv * D, bias=False)
        self.v_proj = nn.Linear(H, self.nkv * D, bias=False)
        self.o_proj = nn.Linear(self.nh * D, H, bias=False)
        self.q_norm = RMSNorm(D, config.rms_norm_eps)
        self.k_norm = RMSNorm(D, config.rms_norm_eps)

    def _project(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]):
        """x ``[B, T, H]`` → q ``[B, nh, T, D]``, gate ``[B, T, nh·D]``, k, v ``[B, T, nkv, D]`` (k roped)."""
        B, T, _ = x.shape
        q, gate = self.q_proj(x).view(B, T, self.nh, 2 * self.hd).chunk(2, -1)
        gate = gate.reshape(B, T, -1)
        q = self.q_norm(q).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, T, self.nkv, self.hd)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.nkv, self.hd)
        cos, sin = rope
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return q, gate, k.transpose(1, 2), v

    def _attend(self, q, k, v, mask, gate) -> torch.Tensor:
        """q ``[B, nh, Tq, D]``, k/v ``[B, Tk, nkv, D]``, mask ``[B or 1, Tq, Tk]`` bool or None
        (every query sees every key) → ``[B, Tq, H]``."""
        o = attend(q, k, v, mask)
        o = o.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)
        return self.o_proj(o * torch.sigmoid(gate))

    def forward_train(self, xc, rope, valid, block_size, noisy=None):
        """The training call. Clean stream ``xc [B, T, H]`` (T a multiple of the block size),
        ``valid [B, T]`` marks real tokens; attention is block-causal.

        ``noisy`` (optional) = (xn ``[N, bs, H]``, its rope, valid_n ``[N, bs]``, rows ``[N]``,
        blks ``[N]``): N noisy blocks, block ``blks[n]`` of clean row ``rows[n]``; each sees the
        clean history of its row before the block and itself (bidirectionally), as the engine's
        denoise pass does. Returns (clean out ``[B, T, H]``, noisy out ``[N, bs, H]`` or None).
        """
        T = xc.shape[1]
        qc, gc, kc, vc = self._project(xc, rope)
        blk = torch.arange(T, device=xc.device) // block_size
        mask = (blk[None, :] <= blk[:, None])[None] & valid[:, None, :]  # [B, T, T]
        yc = self._attend(qc, kc, vc, mask, gc)
        if noisy is None:
            return yc, None
        xn, rope_n, valid_n, rows, blks = noisy
        qn, gn, kn, vn = self._project(xn, rope_n)
        hist = (blk[None, :] < blks[:, None]) & valid[rows]  # [N, T] clean keys before the block
        mask = torch.cat(
            [hist[:, None, :].expand(-1, xn.shape[1], -1), valid_n[:, None, :].expand(-1, xn.shape[1], -1)], 2
        )
        yn = self._attend(qn, torch.cat([kc[rows], kn], 1), torch.cat([vc[rows], vn], 1), mask, gn)
        return yc, yn

    def forward_step(
        self,
        x,
        rope,
        cache: AttnCache,
        lengths: torch.Tensor,
        n_commit: int,
        block_size: int,
        top=None,
        same=None,
        groups=None,
    ):
        """Incremental pass over new tokens ``x [B, T, H]`` starting at ``lengths`` (a block boundary).

        The first ``n_commit`` tokens are clean blocks to commit: their k/v become history when
        the model advances ``lengths``. Any rest is one block being denoised: it sees the cache,
        the committed blocks and itself. Every new k/v is written in place at ``lengths[b] + t``
        and attention reads the cache's first ``max(lengths) + T`` slots; the denoise block's
        slots lie past the committed history, which no reader takes for history (caches hold
        complete blocks up to ``lengths`` only), so denoising leaves the history as it was.
        ``top`` = ``max(lengths)`` and ``same`` = all lengths equal, when the caller knows them (no
        device read, so a compiled pass has no host sync; the cache must then hold ``top + T`` slots).
        ``groups`` (``row_groups``): rows whose histories differ a lot attend group by group, each
        group over its own longest history only.
        """
        if cache.k.dtype != x.dtype:  # a cache kept in another precision: no in-place reuse
            return self.forward_step_reference(x, rope, cache, lengths, n_commit, block_size)
        T = x.shape[1]
        q, gate, k, v = self._project(x, rope)
        if top is None:
            lo, top = torch.stack([lengths.min(), lengths.max()]).tolist() if lengths.numel() else (0, 0)
            same = lo == top
        hi = top
        cache.write(k, v, lengths, top=hi, same=same)
        if groups is not None:
            o = torch.empty_like(q)  # [B, nh, T, D]
            for rows, width in groups:
                mask = step_mask(lengths[rows], T, width, block_size)
                o[rows] = attend(q[rows], cache.k[rows, :width], cache.v[rows, :width], mask)
            return self.o_proj(o.transpose(1, 2).reshape(x.shape[0], T, -1) * torch.sigmoid(gate))
        if same and T <= block_size:
            mask = None  # one block over equal histories: every query sees every key
        else:  # rows with their own history lengths, or several blocks: block-causal per row
            mask = step_mask(lengths[:1] if same else lengths, T, hi + T, block_size)
        return self._attend(q, cache.k[:, : hi + T], cache.v[:, : hi + T], mask, gate)

    def forward_step_reference(self, x, rope, cache: AttnCache, lengths, n_commit: int, block_size: int):
        """``forward_step`` by concatenation: the cache's history, then the new k/v, with a full
        per-row mask, and only the committed part written. The reference of the in-place pass."""
        T = x.shape[1]
        q, gate, k, v = self._project(x, rope)
        L = int(lengths.max()) if lengths.numel() else 0
        past = torch.arange(L, device=x.device)[None, None, :] < lengths[:, None, None]  # [B, 1, L]
        blk = torch.arange(T, device=x.device) // block_size
        new = (blk[None, :] <= blk[:, None])[None].expand(x.shape[0], T, T)
        mask = torch.cat([past.expand(-1, T, -1), new], 2)
        k_all, v_all = torch.cat([cache.k[:, :L].to(k.dtype), k], 1), torch.cat([cache.v[:, :L].to(v.dtype), v], 1)
        out = self._attend_reference(q, k_all, v_all, mask, gate)
        if n_commit:
            cache.write(k[:, :n_commit], v[:, :n_commit], lengths)
        return out

    def _attend_reference(self, q, k, v, mask, gate) -> torch.Tensor:
        o = attend_reference(q, k, v, mask)
        return self.o_proj(o.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1) * torch.sigmoid(gate))


def row_groups(lengths: list[int], T: int, device=None) -> list[tuple[torch.Tensor, int]] | None:
    """Rows of a pass whose histories differ a lot, in groups that attend apart: otherwise every
    row reads as many cache slots as the longest (a row of 4,000 tokens beside rows of 300 makes
    each of them read 4,000). Longest first, a row starts a new group when it needs at most half
    its group's slots. → ``[(rows [n], slots)]``, or None when grouping would save less than half
    the keys read (one group, or little to gain). A masked key adds nothing to softmax attention,
    so leaving it out changes no result."""
    groups: list[tuple[list[int], int]] = []
    for b in sorted(range(len(lengths)), key=lambda b: -lengths[b]):
        if groups and 2 * (lengths[b] + T) > groups[-1][1]:
            groups[-1][0].append(b)
        else:
            groups.append(([b], lengths[b] + T))
    padded = len(lengths) * (max(lengths, default=0) + T)
    if len(groups) < 2 or 2 * sum(len(rows) * w for rows, w in groups) > padded:
        return None
    return [(torch.tensor(rows, device=device), w) for rows, w in groups]


def step_mask(lengths: torch.Tensor, T: int, width: int, block_size: int) -> torch.Tensor:
    """Which of ``width`` cache slots each new token sees, when row b's T new tokens sit at
    ``lengths[b] + 0..T-1`` (a block boundary): the row's history and the new tokens of its own
    and earlier blocks. ``lengths [B]`` → ``[B, T, width]`` bool."""
    rel = torch.arange(width, device=lengths.device)[None, :] - lengths[:, None]  # [B, width] slot - start
    qblk = torch.arange(T, device=lengths.device)[None, :, None] // block_size  # [1, T, 1]
    rel = rel[:, None, :]
    return (rel < 0) | ((rel < T) & (rel.clamp(min=0) // block_size <= qblk))


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Softmax attention with grouped key/value heads read in place (no repeated K/V).

    q ``[B, nh, Tq, D]``, k/v ``[B, Tk, nkv, D]`` (nh a multiple of nkv), mask ``[B or 1, Tq, Tk]``
    bool or None (every query sees every key) → ``[B, nh, Tq, D]``."""
    k, v = k.transpose(1, 2).to(q.dtype), v.transpose(1, 2).to(q.dtype)
    m = None if mask is None else mask[:, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=k.shape[1] != q.shape[1])


def attend_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``attend`` with K/V repeated to the query heads and a materialised mask: the reference."""
    rep = q.shape[1] // k.shape[2]
    k = k.transpose(1, 2).repeat_interleave(rep, 1).to(q.dtype)
    v = v.transpose(1, 2).repeat_interleave(rep, 1).to(q.dtype)
    if mask is None:
        mask = torch.ones(1, q.shape[2], k.shape[2], dtype=torch.bool, device=q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.expand(q.shape[0], -1, -1)[:, None])
