"""A Clover block-diffusion language model for Hugging Face transformers (``trust_remote_code``).

Shipped beside exported weights by ``clover export hf``; it needs torch and transformers only.
This file is the one allowed twin of Clover's own model code: it has to stand alone, so it
restates the same model in plain PyTorch (no fused kernels), with the same parameter names.
Clover's export tests compare its logits and its greedy decoding with Clover's own, which keeps
the two in step.

The model: a stack of decoder layers, each a token mixer and a feed-forward (a mixture of
experts, or a dense SwiGLU MLP when ``num_experts`` is 0).
A ``linear_attention`` layer is the Clover GDN mixer (history compressed into a gated-delta-rule
state ``S`` written by whole blocks; the current block mixed by a softmax over its own tokens
plus one memory slot that reads ``S``); a ``full_attention`` layer is gated grouped-query
attention, block-causal. Text is cut into blocks of ``block_size`` positions by absolute
position; a block sees every earlier block and itself in both directions.

Two ways to run it, as in Clover:

* ``forward(input_ids, noisy_input_ids=None)``: the training forward. The clean stream
  ``input_ids`` supplies the history; the noisy stream (masked copies of the blocks, by default
  the clean tokens themselves) is read block by block against it. Logits are aligned so that
  row i predicts token i (no shift is left to the caller);
* ``step(cache, commit, denoise)``: cached block decoding, what ``generate`` (generation_clover.py)
  runs: clean blocks are committed into a ``CloverCache``, one block is denoised reading it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput

from .configuration_clover import ATTN, CloverConfig
from .generation_clover import BlockDiffusionGenerationMixin

CHUNK = 64  # the delta rule's chunk: states at any block boundary come out of fixed chunks


def _acc(dtype: torch.dtype) -> torch.dtype:
    """Mixer arithmetic runs in fp32 (fp64 for an fp64 model)."""
    return torch.promote_types(dtype, torch.float32)


# -- small layers ---------------------------------------------------------------------------
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


# -- the Clover GDN mixer -------------------------------------------------------------------
def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def causal_conv(x: torch.Tensor, weight: torch.Tensor, tail: torch.Tensor | None = None) -> torch.Tensor:
    """Depthwise causal conv, channels last: x ``[B, T, C]``, weight ``[C, K]`` (tap K-1 is the
    current position), ``tail [B, K-1, C]`` the inputs just before x (zeros if None) → ``[B, T, C]``."""
    K, T = weight.shape[1], x.shape[1]
    if tail is None:
        tail = x.new_zeros(x.shape[0], K - 1, x.shape[2])
    xx = torch.cat([tail.to(x.dtype), x], 1)
    y = 0
    for j in range(K):  # tap j reads position i - (K-1-j)
        y = y + xx[:, j : j + T] * weight[:, j]
    return y


def shift(x: torch.Tensor, d: int) -> torch.Tensor:
    """``y[:, i] = x[:, i - d]``, zeros out of range; d may be negative."""
    T = x.shape[1]
    if d == 0:
        return x
    if abs(d) >= T:
        return torch.zeros_like(x)
    z = x.new_zeros(x.shape[0], abs(d), x.shape[2])
    return torch.cat([z, x[:, : T - d]], 1) if d > 0 else torch.cat([x[:, -d:], z], 1)


def same_block(T: int, block_size: int, d: int, device) -> torch.Tensor:
    """``[T]`` bool: positions i and i - d both lie in one block of the sequence."""
    i = torch.arange(T, device=device)
    j = i - d
    return (j >= 0) & (j < T) & (j // block_size == i // block_size)


def right_conv(x: torch.Tensor, weight: torch.Tensor, block_size: int, valid: torch.Tensor) -> torch.Tensor:
    """The right-context branch: ``y_i = Σ_d w[:, d-1] · x_{i+d}`` for d = 1..K-1 inside the block
    only; weight ``[C, K-1]``, padded positions (``valid [B, T]`` False) read as zero."""
    x = x * valid[..., None].to(x.dtype)
    y = torch.zeros_like(x)
    for d in range(1, weight.shape[1] + 1):
        keep = same_block(x.shape[1], block_size, -d, x.device)[None, :, None]
        y = y + torch.where(keep, shift(x, -d), 0.0) * weight[:, d - 1]
    return y


def delta_rule(q, k, v, g, beta, initial_state=None, boundaries=None, output=True, chunk_size=CHUNK):
    """The gated delta rule in fixed chunks (WY form), per value head with state ``S [dk, dv]``:
    ``S_t = exp(g_t) S_{t-1} + k_t δ_tᵀ``, ``δ_t = β_t (v_t - exp(g_t) S_{t-1}ᵀ k_t)``, ``o_t = S_tᵀ q_t / √dk``.

    q, k ``[B, T, H, dk]`` (unit), v ``[B, T, H, dv]``, g, beta ``[B, T, H]``, ``initial_state
    [B, H, dk, dv]``; ``boundaries``: positions whose state is wanted (the position included).
    Returns (o ``[B, T, H, dv]`` or None, states ``[B, len(boundaries), H, dk, dv]``)."""
    B, T, H, dk = k.shape
    dv = v.shape[-1]
    acc = _acc(q.dtype)
    C = chunk_size
    N = max(1, -(-T // C))
    pad = N * C - T
    # [B, H, N, C, .], padded with tokens that leave the state as it is (g = 0, beta = 0)
    q, k, v = (F.pad(x.to(acc), (0, 0, 0, 0, 0, pad)).transpose(1, 2).reshape(B, H, N, C, -1) for x in (q, k, v))
    g, beta = (F.pad(x.to(acc), (0, 0, 0, pad)).transpose(1, 2).reshape(B, H, N, C) for x in (g, beta))
    G = g.cumsum(-1)
    tri = torch.ones(C, C, dtype=torch.bool, device=k.device).tril()
    diff = G[..., :, None] - G[..., None, :]
    D = torch.where(tri, diff, torch.full_like(diff, -float("inf"))).exp()  # exp(G_t - G_j), j <= t
    kk = k @ k.transpose(-1, -2)
    A = torch.where(tri.tril(-1), beta[..., :, None] * D * kk, torch.zeros_like(kk))
    L = torch.eye(C, device=k.device, dtype=k.dtype) + A
    U = torch.linalg.solve_triangular(L, beta[..., None] * v, upper=False, unitriangular=True)
    W = torch.linalg.solve_triangular(L, (beta * G.exp())[..., None] * k, upper=False, unitriangular=True)
    qk = (q @ k.transpose(-1, -2)) * D if output else None
    S = k.new_zeros(B, H, dk, dv) if initial_state is None else initial_state.to(k.dtype)
    starts, outs, deltas = [], [], []
    for n in range(N):
        starts.append(S)
        delta = U[:, :, n] - W[:, :, n] @ S  # [B, H, C, dv]
        if output:
            outs.append((G[:, :, n].exp()[..., None] * (q[:, :, n] @ S) + qk[:, :, n] @ delta) * dk**-0.5)
        decay = (G[:, :, n, -1:] - G[:, :, n]).exp()
        S = G[:, :, n, -1].exp()[..., None, None] * S + (k[:, :, n] * decay[..., None]).transpose(-1, -2) @ delta
        deltas.append(delta)
    o = torch.stack(outs, 2).reshape(B, H, N * C, dv)[:, :, :T].transpose(1, 2) if output else None
    if not boundaries:
        return o, k.new_zeros(B, 0, H, dk, dv)
    e = torch.tensor(boundaries, device=k.device)
    c, r = e // C, e % C  # chunk and row of each boundary
    st = G[:, :, c, r].exp()[..., None, None] * torch.stack(starts, 2)[:, :, c] + torch.einsum(
        "bhnj,bhnjk,bhnjv->bhnkv", D[:, :, c, r], k[:, :, c], torch.stack(deltas, 2)[:, :, c]
    )
    return o, st.transpose(1, 2)


class GatedDeltaNetMixer(nn.Module):
    """History: committed blocks write the state ``S`` from causal conv features (L2-normed q/k,
    decay ``g = -exp(A_log)·softplus(a + dt_bias)``, strength ``β = sigmoid(b)``). The current
    block: one softmax over its own tokens (logits ``s_h q̂·k̂``) and a memory slot of logit
    ``q̂·u_h + c_h + γ_h·ln n`` and value ``ρ_h · Sᵀq̂``, with a right-context conv branch added
    to the block's features. ``gdn_block_mixing="causal"`` runs the causal delta rule in the block."""

    def __init__(self, config: CloverConfig):
        super().__init__()
        self.Hk, self.Hv = config.linear_num_key_heads, config.linear_num_value_heads
        self.dk, self.dv = config.linear_key_head_dim, config.linear_value_head_dim
        self.K = config.linear_conv_kernel_dim
        self.key_dim, self.value_dim = self.Hk * self.dk, self.Hv * self.dv
        conv_dim = 2 * self.key_dim + self.value_dim
        H = config.hidden_size
        self.in_proj_qkv = nn.Linear(H, conv_dim, bias=False)
        self.in_proj_z = nn.Linear(H, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(H, self.Hv, bias=False)
        self.in_proj_a = nn.Linear(H, self.Hv, bias=False)
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, self.K, groups=conv_dim, bias=False, padding=self.K - 1)
        self.dt_bias = nn.Parameter(torch.ones(self.Hv))
        self.A_log = nn.Parameter(torch.zeros(self.Hv))
        self.norm = GatedRMSNorm(self.dv, config.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_dim, H, bias=False)
        self.block_mixing = config.gdn_block_mixing
        self.use_right_conv = config.gdn_right_conv
        self.use_calibration = config.gdn_block_calibration
        self.conv_right = nn.Parameter(torch.zeros(conv_dim, self.K - 1))  # taps i+1 .. i+K-1
        self.attn_scale = nn.Parameter(torch.full((self.Hv,), math.sqrt(self.dk)))  # s_h
        self.mem_key = nn.Parameter(torch.zeros(self.Hv, self.dk))  # u_h
        self.mem_bias = nn.Parameter(torch.zeros(self.Hv))  # c_h
        self.mem_gamma = nn.Parameter(torch.ones(self.Hv))  # γ_h
        self.mem_scale = nn.Parameter(torch.ones(self.Hv))  # ρ_h

    def heads(self, f: torch.Tensor):
        """Conv features ``[B, T, C]`` → q̂, k̂ ``[B, T, Hv, dk]`` (unit, repeated to value heads), v ``[B, T, Hv, dv]``."""
        B, T, _ = f.shape
        acc = _acc(f.dtype)
        q, k, v = f.split([self.key_dim, self.key_dim, self.value_dim], -1)
        rep = self.Hv // self.Hk
        q = l2norm(q.reshape(B, T, self.Hk, self.dk).to(acc)).repeat_interleave(rep, 2)
        k = l2norm(k.reshape(B, T, self.Hk, self.dk).to(acc)).repeat_interleave(rep, 2)
        return q, k, v.reshape(B, T, self.Hv, self.dv)

    def gates(self, x: torch.Tensor):
        """x ``[B, T, H]`` → g, beta ``[B, T, Hv]``."""
        acc = _acc(x.dtype)
        beta = self.in_proj_b(x).to(acc).sigmoid()
        g = -self.A_log.to(acc).exp() * F.softplus(self.in_proj_a(x).to(acc) + self.dt_bias.to(acc))
        return g, beta

    def states(self, x, feat, S0, boundaries):
        """States ``[B, n, Hv, dk, dv]`` after each boundary, written by the causal features ``feat``."""
        q, k, v = self.heads(feat)
        g, beta = self.gates(x)
        return delta_rule(q, k, v.to(q.dtype), g, beta, initial_state=S0, boundaries=boundaries, output=False)[1]

    def block(self, x, u, cc, S_prev, valid, block_size):
        """The blocks' mixing. x ``[B, T, H]``, u ``[B, T, C]`` conv input, cc its causal conv, T
        starting on a block boundary; S_prev ``[B, nb, Hv, dk, dv]`` the state before each block,
        valid ``[B, T]``. Returns ``[B, T, Hv, dv]``."""
        if self.block_mixing == "causal":
            return self.causal(x, F.silu(cc), S_prev, block_size)
        if self.use_right_conv:
            cc = cc + right_conv(u, self.conv_right, block_size, valid)
        return self.mix(F.silu(cc), S_prev, valid, block_size)

    def causal(self, x, feat, S_prev, block_size):
        """Each block through the causal delta rule from the state before it."""
        B, T, _ = feat.shape
        nb = S_prev.shape[1]
        Bs = block_size if nb > 1 else T
        pad = nb * Bs - T
        q, k, v = self.heads(feat)
        g, beta = self.gates(x)
        q, k, v = (F.pad(t, (0, 0, 0, 0, 0, pad)).reshape(B * nb, Bs, self.Hv, -1) for t in (q, k, v))
        g, beta = (F.pad(t, (0, 0, 0, pad)).reshape(B * nb, Bs, self.Hv) for t in (g, beta))
        S0 = S_prev.reshape(B * nb, self.Hv, self.dk, self.dv)
        o = delta_rule(q, k, v.to(q.dtype), g, beta, initial_state=S0, chunk_size=min(CHUNK, Bs))[0]
        return o.reshape(B, nb * Bs, self.Hv, self.dv)[:, :T]

    def mix(self, feat, S_prev, valid, block_size):
        """The in-block softmax with the memory slot. feat ``[B, T, C]`` → ``[B, T, Hv, dv]``."""
        B, T, _ = feat.shape
        acc = _acc(feat.dtype)
        nb = S_prev.shape[1]
        Bs = block_size if nb > 1 else T
        pad = nb * Bs - T
        q, k, v = self.heads(feat)
        q, k, v = (F.pad(t, (0, 0, 0, 0, 0, pad)).reshape(B, nb, Bs, self.Hv, -1) for t in (q, k, v))
        vmask = F.pad(valid, (0, pad)).reshape(B, nb, Bs)
        n = vmask.sum(-1).clamp(min=1).to(acc)  # real tokens per block
        att = torch.einsum("bnihd,bnjhd->bnhij", q, k) * self.attn_scale.to(acc)[:, None, None]
        att = att.masked_fill(~vmask[:, :, None, None, :], -float("inf"))
        mem = torch.einsum("bnihd,hd->bnhi", q, self.mem_key.to(acc)) + self.mem_bias.to(acc)[:, None]
        if self.use_calibration:
            mem = mem + self.mem_gamma.to(acc)[:, None] * n.log()[:, :, None, None]
        r = torch.einsum("bnhkv,bnihk->bnihv", S_prev.to(acc), q) * self.mem_scale.to(acc)[:, None]
        w = torch.cat([att, mem[..., None]], -1).softmax(-1)
        o = torch.einsum("bnhij,bnjhv->bnihv", w[..., :Bs], v.to(acc)) + w[..., Bs].transpose(2, 3)[..., None] * r
        return o.reshape(B, nb * Bs, self.Hv, self.dv)[:, :T]

    def out(self, o, x):
        B, T = x.shape[:2]
        z = self.in_proj_z(x).reshape(B, T, self.Hv, self.dv)
        return self.out_proj(self.norm(o.to(x.dtype), z).reshape(B, T, -1))

    def forward_train(self, xc, valid, block_size, xn=None):
        """Clean stream ``xc [B, T, H]`` (T whole blocks from position 0), ``valid [B, T]``; the
        noisy stream ``xn`` (same shape) reads, per block, the clean state before it and the clean
        conv inputs before it."""
        B, T, _ = xc.shape
        nb = T // block_size
        w = self.conv1d.weight[:, 0]  # [C, K]
        uc = self.in_proj_qkv(xc)
        cc = causal_conv(uc, w)
        S0 = xc.new_zeros(B, self.Hv, self.dk, self.dv, dtype=_acc(xc.dtype))  # block 0 starts empty
        bounds = [(b + 1) * block_size - 1 for b in range(nb - 1)]
        S_prev = torch.cat([S0[:, None], self.states(xc, F.silu(cc), S0, bounds).to(S0.dtype)], 1)
        yc = self.out(self.block(xc, uc, cc, S_prev, valid, block_size), xc)
        if xn is None:
            return yc, None
        un = self.in_proj_qkv(xn)
        xx_c, xx_n = F.pad(uc, (0, 0, self.K - 1, 0)), F.pad(un, (0, 0, self.K - 1, 0))
        cn = 0
        for j in range(self.K):  # tap j reads position i - d: the noisy input inside the block, else the clean one
            d = self.K - 1 - j
            inside = same_block(T, block_size, d, xc.device)[None, :, None]
            cn = cn + torch.where(inside, xx_n[:, j : j + T], xx_c[:, j : j + T]) * w[:, j]
        return yc, self.out(self.block(xn, un, cn, S_prev, valid, block_size), xn)

    def forward_step(self, x, cache: dict, n_commit: int, block_size: int) -> torch.Tensor:
        """New tokens ``x [B, T, H]``: ``n_commit`` clean tokens to commit, then optionally one
        block to denoise. Advances the cache (``S``, conv ``tail``) over the committed part only."""
        B, T, _ = x.shape
        u = self.in_proj_qkv(x)
        cc = causal_conv(u, self.conv1d.weight[:, 0], cache["tail"])
        nb = -(-T // block_size)
        S_prev = cache["S"][:, None]
        if n_commit:
            bounds = [min((b + 1) * block_size, n_commit) - 1 for b in range(-(-n_commit // block_size))]
            states = self.states(x[:, :n_commit], F.silu(cc[:, :n_commit]), cache["S"], bounds)
            S_prev = torch.cat([S_prev, states], 1)[:, :nb]
        valid = torch.ones(B, T, dtype=torch.bool, device=x.device)
        out = self.out(self.block(x, u, cc, S_prev, valid, block_size), x)
        if n_commit:
            cache["S"] = states[:, -1]
            cache["tail"] = torch.cat([cache["tail"].to(u.dtype), u[:, :n_commit]], 1)[:, n_commit:]
        return out


# -- the model ------------------------------------------------------------------------------
class CloverDecoderLayer(nn.Module):
    def __init__(self, config: CloverConfig, layer_type: str):
        super().__init__()
        self.layer_type = layer_type
        if layer_type == ATTN:
            self.self_attn = Attention(config)
        else:
            self.linear_attn = GatedDeltaNetMixer(config)
        # a mixture of experts, or a dense SwiGLU feed-forward when num_experts is 0
        self.mlp = MoE(config) if config.num_experts else MLP(config.hidden_size, config.intermediate_size)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def ffn(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.mlp(self.post_attention_layernorm(h))

    def forward(self, hc, rc, valid, block_size, hn=None, rn=None):
        """The training forward of one layer: clean ``hc [B, T, H]`` and noisy ``hn`` (or None)."""
        xc = self.input_layernorm(hc)
        xn = None if hn is None else self.input_layernorm(hn)
        if self.layer_type == ATTN:
            yc, yn = self.self_attn.forward_train(xc, rc, valid, block_size, xn, rn)
        else:
            yc, yn = self.linear_attn.forward_train(xc, valid, block_size, xn)
        return self.ffn(hc + yc), None if hn is None else self.ffn(hn + yn)

    def forward_step(self, h, r, cache: dict, n_commit: int, block_size: int) -> torch.Tensor:
        x = self.input_layernorm(h)
        if self.layer_type == ATTN:
            y = self.self_attn.forward_step(x, r, cache, n_commit, block_size)
        else:
            y = self.linear_attn.forward_step(x, cache, n_commit, block_size)
        return self.ffn(h + y)


@dataclass
class CloverCache:
    """Complete committed blocks only: per attention layer the keys and values (``k``, ``v``
    ``[B, L, nkv, D]``), per GDN layer the state ``S [B, Hv, dk, dv]`` after the last committed
    block and the conv ``tail [B, K-1, C]`` (its last K-1 clean conv inputs); ``last_logits
    [B, V]``: the clean logit at the last committed position (it predicts the next block's first
    token when ``shift_logits``)."""

    layers: list[dict]
    length: int = 0
    last_logits: torch.Tensor | None = None


class CloverPreTrainedModel(PreTrainedModel):
    config_class = CloverConfig
    base_model_prefix = "model"
    _no_split_modules = ["CloverDecoderLayer"]
    supports_gradient_checkpointing = False

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Fresh weights (a model built from a config alone); loaded checkpoints overwrite them."""
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.normal_(0.0, std)
        elif isinstance(module, Experts):
            module.gate_up_proj.normal_(0.0, std)
            module.down_proj.normal_(0.0, std)
        elif isinstance(module, Router):
            module.weight.normal_(0.0, std)


class CloverModel(CloverPreTrainedModel):
    def __init__(self, config: CloverConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(CloverDecoderLayer(config, t) for t in config.layer_types)
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value


class CloverForCausalLM(BlockDiffusionGenerationMixin, CloverPreTrainedModel, GenerationMixin):
    """The Clover model with its LM head: ``forward`` (the training forward), ``step`` (cached
    block decoding) and ``generate`` (block diffusion, generation_clover.py, in place of
    transformers' own; ``GenerationMixin`` stays a base so the generation config is loaded)."""

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: CloverConfig):
        super().__init__(config)
        self.model = CloverModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.embed_tokens = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    def check_block_size(self, block_size: int | None) -> int:
        bs = self.config.block_size if block_size is None else block_size
        if not isinstance(bs, int) or bs <= 0 or bs > self.config.max_block_size:
            raise ValueError(f"block_size must be an integer in [1, {self.config.max_block_size}], got {bs!r}")
        return bs

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        noisy_input_ids: torch.LongTensor | None = None,
        labels: torch.LongTensor | None = None,
        block_size: int | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> CausalLMOutput | tuple:
        """The training forward. ``input_ids [B, T]``: the clean tokens (positions 0..T-1);
        ``attention_mask [B, T]``: 1 for real tokens, padding only at the end of a row (None: all
        real); ``noisy_input_ids [B, T]``: the same text with some tokens replaced by
        ``config.mask_token_id`` (None: the clean tokens). Every block of the noisy stream is read
        against the clean blocks before it and bidirectionally within itself.

        Returns logits ``[B, T, V]`` where row i predicts token i of the text (no shift left to
        do), and, with ``labels [B, T]`` (the target token per position, -100 where no loss), the
        mean cross-entropy over the positions with a target."""
        bs = self.check_block_size(block_size)
        B, T = input_ids.shape
        valid = torch.ones(B, T, dtype=torch.bool, device=input_ids.device)
        if attention_mask is not None:
            valid = attention_mask.bool()
            if bool((valid[:, 1:] & ~valid[:, :-1]).any()):
                raise ValueError("attention_mask: padding must come at the end of each row (right padding)")
        nb = -(-T // bs)
        pad = nb * bs - T  # whole blocks; the padding is not valid, so a ragged last block counts its real tokens
        fill = self.config.pad_token_id or 0
        x0, valid = F.pad(input_ids, (0, pad), value=fill), F.pad(valid, (0, pad))
        emb = self.model.embed_tokens
        hc = emb(x0)
        hn = None if noisy_input_ids is None else emb(F.pad(noisy_input_ids, (0, pad), value=fill))
        r = rope(self.config, torch.arange(nb * bs, device=x0.device)[None].expand(B, -1), hc.dtype)
        for layer in self.model.layers:
            hc, hn = layer(hc, r, valid, bs, hn, r)
        hc = self.model.norm(hc)
        hn = hc if hn is None else self.model.norm(hn)
        if self.config.shift_logits:
            # row i reads position i-1: the noisy stream inside a block, the clean stream at a block's
            # start (the first token of block b is predicted by the last clean token of block b-1)
            start = (torch.arange(nb * bs, device=x0.device) % bs == 0)[None, :, None]
            hn = torch.where(start, shift(hc, 1), shift(hn, 1))
        logits = self.lm_head(hn[:, :T])
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        if return_dict is False:
            return (logits,) if loss is None else (loss, logits)
        return CausalLMOutput(loss=loss, logits=logits)

    # -- cached block decoding --------------------------------------------------------------
    def new_cache(self, batch: int = 1) -> CloverCache:
        """An empty cache for ``batch`` rows that decode in step (equal lengths)."""
        c, p = self.config, self.lm_head.weight
        layers = []
        for t in c.layer_types:
            if t == ATTN:
                z = p.new_zeros(batch, 0, c.num_key_value_heads, c.head_dim)
                layers.append({"k": z, "v": z.clone()})
            else:
                conv_dim = 2 * c.linear_num_key_heads * c.linear_key_head_dim
                conv_dim += c.linear_num_value_heads * c.linear_value_head_dim
                shape = (batch, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim)
                S = p.new_zeros(shape, dtype=_acc(p.dtype))
                layers.append({"S": S, "tail": p.new_zeros(batch, c.linear_conv_kernel_dim - 1, conv_dim)})
        return CloverCache(layers)

    @torch.no_grad()
    def step(
        self,
        cache: CloverCache,
        commit: torch.Tensor | None = None,
        denoise: torch.Tensor | None = None,
        block_size: int | None = None,
    ) -> torch.Tensor | None:
        """One forward over ``commit [B, n_c]`` (clean whole blocks, written into ``cache``) then
        ``denoise [B, n_d]`` (one block, read-only), both starting where the cache ends. Returns the
        denoise block's logits ``[B, n_d, V]`` (row i predicts token i), or None."""
        bs = self.check_block_size(block_size)
        x = torch.cat([t for t in (commit, denoise) if t is not None], 1)
        n_c = 0 if commit is None else commit.shape[1]
        n_d = x.shape[1] - n_c
        if n_c % bs or cache.length % bs or n_d > bs:
            raise ValueError(f"commit whole blocks of {bs} after whole blocks, and denoise at most one block")
        h = self.model.embed_tokens(x)
        r = rope(
            self.config, (cache.length + torch.arange(x.shape[1], device=x.device))[None].expand(len(x), -1), h.dtype
        )
        for layer, c in zip(self.model.layers, cache.layers):
            h = layer.forward_step(h, r, c, n_c, bs)
        h = self.model.norm(h)
        if n_c:
            cache.length += n_c
            if self.config.shift_logits:
                cache.last_logits = self.lm_head(h[:, n_c - 1])
        if not n_d:
            return None
        raw = self.lm_head(h[:, n_c:])
        if not self.config.shift_logits:
            return raw
        first = cache.last_logits if cache.last_logits is not None else torch.zeros_like(raw[:, 0])
        return torch.cat([first[:, None].to(raw.dtype), raw[:, :-1]], 1)
