"""Block-causal gated attention (design §2.1): GQA, q/k RMSNorm, partial RoPE, output gate.

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
        """q ``[B, nh, Tq, D]``, k/v ``[B, Tk, nkv, D]``, mask ``[B, Tq, Tk]`` bool → ``[B, Tq, H]``."""
        rep = self.nh // self.nkv
        k = k.transpose(1, 2).repeat_interleave(rep, 1)
        v = v.transpose(1, 2).repeat_interleave(rep, 1)
        o = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype), attn_mask=mask[:, None])
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

    def forward_step(self, x, rope, cache: AttnCache, lengths: torch.Tensor, n_commit: int, block_size: int):
        """Incremental pass over new tokens ``x [B, T, H]`` starting at ``lengths`` (a block boundary).

        The first ``n_commit`` tokens are clean blocks to commit: their k/v are written to the
        cache. Any rest is one block being denoised: it sees the cache, the committed blocks and
        itself, and writes nothing.
        """
        T = x.shape[1]
        q, gate, k, v = self._project(x, rope)
        L = int(lengths.max()) if lengths.numel() else 0
        past = torch.arange(L, device=x.device)[None, None, :] < lengths[:, None, None]  # [B, 1, L]
        blk = torch.arange(T, device=x.device) // block_size
        new = (blk[None, :] <= blk[:, None])[None].expand(x.shape[0], T, T)
        mask = torch.cat([past.expand(-1, T, -1), new], 2)
        out = self._attend(q, torch.cat([cache.k[:, :L], k], 1), torch.cat([cache.v[:, :L], v], 1), mask, gate)
        if n_commit:
            cache.write(k[:, :n_commit], v[:, :n_commit], lengths)
        return out
