"""The Clover GDN mixer for transformers (``trust_remote_code``): the causal and right-context
convolutions, the gated delta rule in fixed chunks, and the mixer (history in the state ``S``,
the current block by a softmax with a memory slot). Clover's own: clover/model/gdn.py,
clover/ops/conv.py and clover/ops/delta_rule.py.

It is part of the one allowed twin of Clover's own model code (see modeling_clover.py): shipped
beside exported weights, it needs torch and transformers only.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .configuration_clover import CloverConfig
from .layers_clover import GatedRMSNorm

CHUNK = 64  # the delta rule's chunk: states at any block boundary come out of fixed chunks


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Mixer arithmetic runs in fp32 (fp64 for an fp64 model)."""
    return torch.promote_types(dtype, torch.float32)


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
    acc = acc_dtype(q.dtype)
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
        """Conv features ``[B, T, C]`` → q̂, k̂ ``[B, T, Hv, dk]`` (unit, repeated to value heads),
        v ``[B, T, Hv, dv]``."""
        B, T, _ = f.shape
        acc = acc_dtype(f.dtype)
        q, k, v = f.split([self.key_dim, self.key_dim, self.value_dim], -1)
        rep = self.Hv // self.Hk
        q = l2norm(q.reshape(B, T, self.Hk, self.dk).to(acc)).repeat_interleave(rep, 2)
        k = l2norm(k.reshape(B, T, self.Hk, self.dk).to(acc)).repeat_interleave(rep, 2)
        return q, k, v.reshape(B, T, self.Hv, self.dv)

    def gates(self, x: torch.Tensor):
        """x ``[B, T, H]`` → g, beta ``[B, T, Hv]``."""
        acc = acc_dtype(x.dtype)
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
        acc = acc_dtype(feat.dtype)
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
        S0 = xc.new_zeros(B, self.Hv, self.dk, self.dv, dtype=acc_dtype(xc.dtype))  # block 0 starts empty
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
