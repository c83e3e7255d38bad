"""Readout-scale calibration during conversion (docs/architecture.md, Rule 6).

The memory slot's value is ``ρ_h · S[b-1]ᵀ q̂``. With unit q̂ the raw readout is much smaller
than the block's values, so a converted checkpoint starts from ``ρ_h = RMS(v_h) / RMS(r_h)``,
measured on calibration tokens: the slot then starts on the same scale as the in-block values
it is mixed with. Layers are measured in order while the conversion streams them, each on the
hidden states the already-converted (and already-calibrated) layers produce, run the way the
engine commits blocks; only one layer is ever in memory. The layer runs in the dtype it is
stored in (no second copy of its weights; the mixer's state arithmetic is fp32 anyway).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from clover.model.cache import AttnCache, GDNCache
from clover.model.config import ATTN, CloverConfig
from clover.model.layers import RotaryEmbedding
from clover.model.model import DecoderLayer
from clover.ops.conv import causal_conv


def calibration_tokens(n_ids: int, seqs: int, blocks: int, block_size: int, seed: int, mask_id: int) -> torch.Tensor:
    """``[seqs, blocks·block_size]`` uniform random ids below ``n_ids`` (the tokenizer's), never [MASK]."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, n_ids, (seqs, blocks * block_size), generator=g)
    return ids.masked_fill(ids == mask_id, 0 if mask_id else 1)


class ReadoutCalibration:
    """Feed it the converted tensors in model order: ``embed``, then ``layer(i, tensors)`` per layer."""

    def __init__(self, config: CloverConfig, tokens: torch.Tensor, block_size: int):
        """tokens ``[N, L]`` with L a multiple of ``block_size`` and at least two blocks."""
        if tokens.shape[1] % block_size or tokens.shape[1] < 2 * block_size:
            raise ValueError("calibration sequences must be whole blocks, at least two of them")
        self.config, self.tokens, self.bs = config, tokens, block_size
        self.h: torch.Tensor | None = None  # [N, L, H] hidden states entering the next layer

    @torch.no_grad()
    def embed(self, weight: torch.Tensor) -> None:
        self.h = weight[self.tokens]
        N, L = self.tokens.shape
        self.rope = RotaryEmbedding(self.config)(torch.arange(L)[None].expand(N, L), self.h.dtype)

    @torch.no_grad()
    def layer(self, i: int, tensors: dict[str, torch.Tensor]) -> list[float] | None:
        """Calibrate layer i (its tensors by Clover name, edited in place: ``mem_scale``), then
        advance the hidden states through it. Returns ρ per value head for a GDN layer."""
        c = self.config
        prefix = f"model.layers.{i}."
        with torch.device("meta"):
            layer = DecoderLayer(c, c.layer_types[i])
        layer.load_state_dict({k[len(prefix) :]: v for k, v in tensors.items()}, strict=True, assign=True)
        N, dt = self.h.shape[0], self.h.dtype
        rho = None
        if c.layer_types[i] == ATTN:
            z = torch.zeros(N, 0, c.num_key_value_heads, c.head_dim, dtype=dt)
            cache = AttnCache(z, z.clone())
        else:
            mix = layer.linear_attn
            r = self._rho(mix, layer.input_layernorm(self.h))
            mix.mem_scale.copy_(r)  # the tensor that will be written
            rho = mix.mem_scale.float().tolist()
            S = torch.zeros(N, mix.Hv, mix.dk, mix.dv, dtype=torch.promote_types(dt, torch.float32))
            cache = GDNCache(S, torch.zeros(N, mix.K - 1, mix.conv_dim, dtype=dt))
        lengths = torch.zeros(N, dtype=torch.long)
        self.h = layer.forward_step(self.h, self.rope, cache, lengths, self.h.shape[1], self.bs)
        return rho

    def _rho(self, mix, x: torch.Tensor) -> torch.Tensor:
        """``[Hv]``: RMS(v_h) / RMS(Sᵀq̂_h) over every query of blocks ≥ 1 (block 0 reads an empty state)."""
        N, L, _ = x.shape
        nb, bs = L // self.bs, self.bs
        feat = F.silu(causal_conv(mix.in_proj_qkv(x), mix.w_causal))  # right branch is zero at init
        q, _, v = mix._heads(feat)  # [N, L, Hv, dk], [N, L, Hv, dv]
        S0 = x.new_zeros(N, mix.Hv, mix.dk, mix.dv, dtype=q.dtype)
        states = mix._history(x, feat, S0, [(b + 1) * bs - 1 for b in range(nb - 1)])  # [N, nb-1, Hv, dk, dv]
        q = q[:, bs:].reshape(N, nb - 1, bs, mix.Hv, mix.dk)
        r = torch.einsum("bnhkv,bnihk->bnihv", states, q)
        rms = lambda t: t.pow(2).mean(dim=tuple(d for d in range(t.dim()) if d != t.dim() - 2)).sqrt()  # per head
        rms_v = rms(v[:, bs:].float())
        rms_r = rms(r.reshape(N, -1, mix.Hv, mix.dv).float())
        ok = rms_r > 0  # a layer whose state stays empty keeps ρ = 1
        return torch.where(ok, rms_v / rms_r.clamp(min=torch.finfo(torch.float32).tiny), torch.ones_like(rms_v))
