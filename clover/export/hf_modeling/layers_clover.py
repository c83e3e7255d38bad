"""The Clover model's small layers for transformers (``trust_remote_code``): zero-centred RMSNorm,
the gated RMSNorm, partial RoPE, the feed-forwards (SwiGLU MLP, the mixture of experts) and
block-causal gated attention. Clover's own: clover/model/layers.py and clover/model/attention.py.

It is part of the one allowed twin of Clover's own model code (see modeling_clover.py): shipped
beside exported weights, it needs torch and transformers only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .configuration_clover import CloverConfig


class RMSNorm(nn.Module):
    """Zero-centred RMSNorm: ``x̂ · (1 + w)``."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * (1.0 + self.weight.float())).type_as(x)


class GatedRMSNorm(nn.Module):
    """``norm(x) · w · silu(z)``, the GDN output norm (plain weight)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        xf = x.float()
        y = self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(dtype)
        return (y * F.silu(z.float())).to(dtype)


def rope(config: CloverConfig, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Partial rotary embedding: positions ``[B, T]`` → cos, sin ``[B, T, R]``, R the rotary dims."""
    dim = int(config.head_dim * config.partial_rotary_factor)
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
    inv_freq = inv_freq.to(positions.device, torch.promote_types(torch.float32, dtype))
    freqs = positions[..., None].float() * inv_freq
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x ``[B, H, T, D]``; cos/sin ``[B, T, R]``, R <= D (rotate-half on the first R dims)."""
    cos, sin = cos[:, None], sin[:, None]
    R = cos.shape[-1]
    xr, xp = x[..., :R], x[..., R:]
    rot = torch.cat([-xr[..., R // 2 :], xr[..., : R // 2]], -1)
    return torch.cat([xr * cos + rot * sin, xp], -1)


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Router(nn.Module):
    def __init__(self, config: CloverConfig):
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.weight = nn.Parameter(torch.zeros(config.num_experts, config.hidden_size))


class Experts(nn.Module):
    """Packed experts: ``gate_up_proj [E, 2I, H]``, ``down_proj [E, H, I]``."""

    def __init__(self, config: CloverConfig):
        super().__init__()
        E, H, I = config.num_experts, config.hidden_size, config.moe_intermediate_size
        self.gate_up_proj = nn.Parameter(torch.empty(E, 2 * I, H))
        self.down_proj = nn.Parameter(torch.empty(E, H, I))

    def run(self, e: int, h: torch.Tensor) -> torch.Tensor:
        """Expert ``e``'s SwiGLU on ``h [n, H]`` → ``[n, H]``."""
        gate, up = F.linear(h, self.gate_up_proj[e]).chunk(2, -1)
        return F.linear(F.silu(gate) * up, self.down_proj[e])


class MoE(nn.Module):
    """Softmax router, top-k renormalised, packed experts, sigmoid-gated shared expert."""

    def __init__(self, config: CloverConfig):
        super().__init__()
        self.gate = Router(config)
        self.experts = Experts(config)
        self.shared_expert = MLP(config.hidden_size, config.shared_expert_intermediate_size)
        self.shared_expert_gate = nn.Linear(config.hidden_size, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x ``[..., H]`` → ``[..., H]``; one matmul per expert over the tokens routed to it."""
        h = x.reshape(-1, x.shape[-1])  # [N, H]
        probs = F.linear(h, self.gate.weight).float().softmax(-1)
        top_w, top_i = probs.topk(self.gate.top_k, -1)  # [N, k]
        top_w = (top_w / top_w.sum(-1, keepdim=True)).to(h.dtype)
        out = torch.zeros_like(h)
        for e in top_i.unique().tolist():
            tok, slot = (top_i == e).nonzero(as_tuple=True)
            out.index_add_(0, tok, (self.experts.run(e, h[tok]) * top_w[tok, slot, None]).to(out.dtype))
        out = out + torch.sigmoid(self.shared_expert_gate(h)) * self.shared_expert(h)
        return out.reshape(x.shape)


# -- block-causal attention -----------------------------------------------------------------
class Attention(nn.Module):
    """Gated grouped-query attention with q/k RMSNorm and partial RoPE, block-causal."""

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

    def project(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """x ``[B, T, H]`` → q ``[B, nh, T, D]``, gate ``[B, T, nh·D]``, k, v ``[B, T, nkv, D]`` (k roped)."""
        B, T, _ = x.shape
        q, gate = self.q_proj(x).view(B, T, self.nh, 2 * self.hd).chunk(2, -1)
        q = apply_rope(self.q_norm(q).transpose(1, 2), cos, sin)
        k = apply_rope(self.k_norm(self.k_proj(x).view(B, T, self.nkv, self.hd)).transpose(1, 2), cos, sin)
        return q, gate.reshape(B, T, -1), k.transpose(1, 2), self.v_proj(x).view(B, T, self.nkv, self.hd)

    def attend(self, q, gate, k, v, mask: torch.Tensor) -> torch.Tensor:
        """q ``[B, nh, Tq, D]``, k/v ``[B, Tk, nkv, D]``, mask ``[B or 1, Tq, Tk]`` bool → ``[B, Tq, H]``."""
        rep = self.nh // self.nkv
        k = k.transpose(1, 2).repeat_interleave(rep, 1).to(q.dtype)
        v = v.transpose(1, 2).repeat_interleave(rep, 1).to(q.dtype)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.expand(q.shape[0], -1, -1)[:, None])
        return self.o_proj(o.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1) * torch.sigmoid(gate))

    def forward_train(self, xc, rc, valid, block_size, xn=None, rn=None):
        """Clean stream ``xc [B, T, H]`` (T whole blocks), its rope ``rc``, ``valid [B, T]``; the
        noisy stream ``xn`` (same shape) reads the clean blocks before its own and its own block."""
        T = xc.shape[1]
        blk = torch.arange(T, device=xc.device) // block_size
        qc, gc, kc, vc = self.project(xc, *rc)
        yc = self.attend(qc, gc, kc, vc, (blk[None, :] <= blk[:, None])[None] & valid[:, None, :])
        if xn is None:
            return yc, None
        qn, gn, kn, vn = self.project(xn, *rn)
        hist = (blk[None, :] < blk[:, None])[None] & valid[:, None, :]  # clean keys of earlier blocks
        own = (blk[None, :] == blk[:, None])[None] & valid[:, None, :]  # noisy keys of the same block
        yn = self.attend(qn, gn, torch.cat([kc, kn], 1), torch.cat([vc, vn], 1), torch.cat([hist, own], 2))
        return yc, yn

    def forward_step(self, x, r, cache: dict, n_commit: int, block_size: int) -> torch.Tensor:
        """New tokens ``x [B, T, H]`` after the cache's history: committed history, then the new
        tokens block-causally. Only the first ``n_commit`` tokens' keys and values are kept."""
        T = x.shape[1]
        q, gate, k, v = self.project(x, *r)
        L = cache["k"].shape[1]
        blk = torch.arange(T, device=x.device) // block_size
        mask = torch.cat([x.new_ones(T, L, dtype=torch.bool), blk[None, :] <= blk[:, None]], 1)[None]
        out = self.attend(q, gate, torch.cat([cache["k"], k], 1), torch.cat([cache["v"], v], 1), mask)
        if n_commit:
            cache["k"] = torch.cat([cache["k"], k[:, :n_commit]], 1)
            cache["v"] = torch.cat([cache["v"], v[:, :n_commit]], 1)
        return out
