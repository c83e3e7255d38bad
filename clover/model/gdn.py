"""The Clover GDN mixer (docs/architecture.md, "The Clover mixer"): compressed history +
bidirectional block.

* History: committed blocks write the gated-delta-rule state exactly as Qwen3.5's GDN does
  (same projections, causal conv, L2-normed q/k, gates), from *causal* conv features only.
* Current block: one softmax over the block's own tokens plus one memory slot whose value is
  the readout ``r_i = ρ_h · S[b-1]ᵀ q̂_i`` and whose logit is ``q̂·u_h + c_h + γ_h·ln n``.
* A zero-initialised right-context conv branch adds in-block lookahead to the block features.

Ablations (``CloverConfig.gdn_*``, routed in ``_block``): ``gdn_block_mixing="causal"`` runs the
block through the causal delta rule from ``S[b-1]`` instead (Qwen3.5's GDN output, no softmax,
memory slot or right branch); ``gdn_right_conv=False`` drops the right branch;
``gdn_block_calibration=False`` drops ``γ_h·ln n``. History and caches are the same in every variant.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from clover.model.cache import GDNCache
from clover.model.config import CloverConfig
from clover.model.layers import GatedRMSNorm
from clover.ops.conv import causal_conv, conv_tail, right_conv
from clover.ops.delta_rule import CHUNK, delta_rule, delta_rule_chunked


def _acc(dtype: torch.dtype) -> torch.dtype:
    """Mixer arithmetic runs in fp32 (fp64 when the model is fp64, for exactness tests)."""
    return torch.promote_types(dtype, torch.float32)


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Same formula as fla / transformers, so converted states match bit for bit in fp32."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


class GatedDeltaNetMixer(nn.Module):
    def __init__(self, config: CloverConfig):
        super().__init__()
        self.Hk, self.Hv = config.linear_num_key_heads, config.linear_num_value_heads
        self.dk, self.dv = config.linear_key_head_dim, config.linear_value_head_dim
        self.K = config.linear_conv_kernel_dim
        self.key_dim, self.value_dim = self.Hk * self.dk, self.Hv * self.dv
        self.conv_dim = 2 * self.key_dim + self.value_dim
        H = config.hidden_size
        self.in_proj_qkv = nn.Linear(H, self.conv_dim, bias=False)
        self.in_proj_z = nn.Linear(H, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(H, self.Hv, bias=False)
        self.in_proj_a = nn.Linear(H, self.Hv, bias=False)
        self.conv1d = nn.Conv1d(
            self.conv_dim, self.conv_dim, self.K, groups=self.conv_dim, bias=False, padding=self.K - 1
        )  # weight [C, 1, K], HF layout; applied by ops.conv
        self.dt_bias = nn.Parameter(torch.ones(self.Hv))
        self.A_log = nn.Parameter(torch.log(torch.empty(self.Hv).uniform_(1, 16)))
        self.norm = GatedRMSNorm(self.dv, config.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_dim, H, bias=False)
        self.block_mixing = config.gdn_block_mixing
        self.use_right_conv = config.gdn_right_conv
        self.use_calibration = config.gdn_block_calibration
        # Clover's own parameters (docs/architecture.md: The Clover mixer; Rule 6), per value head. All exist in every
        # variant (same state dict, conversion and loading); those a variant does not use
        # (all of them for causal mixing, conv_right / mem_gamma when switched off) never reach
        # its outputs and get no gradient.
        self.conv_right = nn.Parameter(torch.zeros(self.conv_dim, self.K - 1))  # taps i+1..i+K-1
        self.attn_scale = nn.Parameter(torch.full((self.Hv,), math.sqrt(self.dk)))  # s_h
        self.mem_key = nn.Parameter(torch.zeros(self.Hv, self.dk))  # u_h
        self.mem_bias = nn.Parameter(torch.zeros(self.Hv))  # c_h
        self.mem_gamma = nn.Parameter(torch.ones(self.Hv))  # γ_h, block-size calibration
        self.mem_scale = nn.Parameter(torch.ones(self.Hv))  # ρ_h, readout scale

    # -- pieces ----------------------------------------------------------------------------
    def _heads(self, f: torch.Tensor):
        """Conv features ``[B, T, conv_dim]`` → q̂, k̂ ``[B, T, Hv, dk]`` (unit, repeated to value
        heads), v ``[B, T, Hv, dv]``."""
        B, T, _ = f.shape
        acc = _acc(f.dtype)
        q, k, v = f.split([self.key_dim, self.key_dim, self.value_dim], -1)
        rep = self.Hv // self.Hk
        q = l2norm(q.reshape(B, T, self.Hk, self.dk).to(acc)).repeat_interleave(rep, 2)
        k = l2norm(k.reshape(B, T, self.Hk, self.dk).to(acc)).repeat_interleave(rep, 2)
        return q, k, v.reshape(B, T, self.Hv, self.dv)

    def _gates(self, x: torch.Tensor):
        acc = _acc(x.dtype)
        beta = self.in_proj_b(x).to(acc).sigmoid()
        g = -self.A_log.to(acc).exp() * F.softplus(self.in_proj_a(x).to(acc) + self.dt_bias.to(acc))
        return g, beta  # [B, T, Hv]

    def _history(self, x, hist_feat, S0, boundaries):
        """States after each boundary position from the causal (history) features. ``[B, n, Hv, dk, dv]``."""
        q, k, v = self._heads(hist_feat)
        g, beta = self._gates(x)
        _, states = delta_rule(q, k, v.to(q.dtype), g, beta, initial_state=S0, boundaries=boundaries, output=False)
        return states

    def _block(self, x, u, cc, S_prev, valid, block_size):
        """The current blocks' mixing: the one place where the variants are routed.

        x ``[B, T, H]`` layer input, u ``[B, T, conv_dim]`` conv input, cc ``[B, T, conv_dim]`` its
        causal conv (before the activation), T starting on a block boundary; S_prev
        ``[B, nb, Hv, dk, dv]`` state before each block, valid ``[B, T]`` bool.
        Returns ``[B, T, Hv, dv]``.
        """
        if self.block_mixing == "causal":
            return self._causal(x, F.silu(cc), S_prev, block_size)
        if self.use_right_conv:
            cc = cc + right_conv(u, self.conv_right, block_size, valid)
        return self._mix(F.silu(cc), S_prev, valid, block_size)

    def _causal(self, x, feat, S_prev, block_size):
        """Causal gated delta rule inside each block, from the state before it: position i reads
        ``S_iᵀ q̂_i / √dk``, S_i = S[b-1] updated by the block's tokens up to i (Qwen3.5's GDN).

        x ``[B, T, H]``, feat ``[B, T, conv_dim]`` (causal features), S_prev ``[B, nb, Hv, dk, dv]``.
        Returns ``[B, T, Hv, dv]``. A token after the block's real ones changes no real output.
        """
        B, T, _ = feat.shape
        nb = S_prev.shape[1]
        Bs = block_size if nb > 1 else T
        pad = nb * Bs - T
        q, k, v = self._heads(feat)
        g, beta = self._gates(x)
        # every block is its own sequence [B·nb, Bs, ...] (padding: g = β = 0 leave S unchanged)
        q, k, v = (F.pad(t, (0, 0, 0, 0, 0, pad)).reshape(B * nb, Bs, self.Hv, -1) for t in (q, k, v))
        g, beta = (F.pad(t, (0, 0, 0, pad)).reshape(B * nb, Bs, self.Hv) for t in (g, beta))
        S0 = S_prev.reshape(B * nb, self.Hv, self.dk, self.dv)
        o, _ = delta_rule_chunked(q, k, v.to(q.dtype), g, beta, initial_state=S0, chunk_size=min(CHUNK, Bs))
        return o.reshape(B, nb * Bs, self.Hv, self.dv)[:, :T]

    def _mix(self, feat, S_prev, valid, block_size):
        """In-block softmax with the memory slot.

        feat ``[B, T, conv_dim]`` (block features, T starting on a block boundary),
        S_prev ``[B, nb, Hv, dk, dv]`` state before each block, valid ``[B, T]`` bool.
        Returns ``[B, T, Hv, dv]``.
        """
        B, T, _ = feat.shape
        acc = _acc(feat.dtype)
        nb = S_prev.shape[1]
        Bs = block_size if nb > 1 else T
        pad = nb * Bs - T
        q, k, v = self._heads(feat)
        q, k, v = (F.pad(t, (0, 0, 0, 0, 0, pad)).reshape(B, nb, Bs, self.Hv, -1) for t in (q, k, v))
        vmask = F.pad(valid, (0, pad)).reshape(B, nb, Bs)
        n = vmask.sum(-1).clamp(min=1).to(acc)  # real tokens per block (rule 7)
        # in-block logits s_h q̂·k̂  [B, nb, Hv, Bs, Bs]
        att = torch.einsum("bnihd,bnjhd->bnhij", q, k) * self.attn_scale.to(acc)[:, None, None]
        att = att.masked_fill(~vmask[:, :, None, None, :], -float("inf"))
        # memory slot: logit q̂·u + c + γ ln n, value ρ · S[b-1]ᵀ q̂ (no 1/√dk, rule 6)
        mem_logit = torch.einsum("bnihd,hd->bnhi", q, self.mem_key.to(acc)) + self.mem_bias.to(acc)[:, None]
        if self.use_calibration:
            mem_logit = mem_logit + self.mem_gamma.to(acc)[:, None] * n.log()[:, :, None, None]
        r = torch.einsum("bnhkv,bnihk->bnihv", S_prev.to(acc), q) * self.mem_scale.to(acc)[:, None]
        w = torch.cat([att, mem_logit[..., None]], -1).softmax(-1)
        o = torch.einsum("bnhij,bnjhv->bnihv", w[..., :Bs], v.to(acc)) + w[..., Bs].transpose(2, 3)[..., None] * r
        return o.reshape(B, nb * Bs, self.Hv, self.dv)[:, :T]

    def _out(self, o, x):
        B, T = x.shape[:2]
        z = self.in_proj_z(x).reshape(B, T, self.Hv, self.dv)
        return self.out_proj(self.norm(o.to(x.dtype), z).reshape(B, T, -1))

    @property
    def w_causal(self) -> torch.Tensor:
        return self.conv1d.weight[:, 0]  # [C, K]

    # -- the two ways to run ---------------------------------------------------------------
    def forward_train(self, xc, valid, block_size, noisy=None):
        """The training call. Clean stream ``xc [B, T, H]`` (T a multiple of the block size,
        starting at position 0), ``valid [B, T]``.

        ``noisy`` (optional) = (xn ``[N, bs, H]``, valid_n ``[N, bs]``, rows ``[N]``, blks ``[N]``):
        noisy blocks, each read against its clean row's state before the block and conv tail,
        exactly as the engine's denoise pass does. Returns (clean ``[B, T, H]``, noisy or None).
        """
        B, T, _ = xc.shape
        nb = T // block_size
        uc = self.in_proj_qkv(xc)
        cc = causal_conv(uc, self.w_causal)
        hist = F.silu(cc)  # only causal features write the state (rule 3)
        S0 = xc.new_zeros(B, self.Hv, self.dk, self.dv, dtype=_acc(xc.dtype))
        bounds = [(b + 1) * block_size - 1 for b in range(nb - 1)]
        states = self._history(xc, hist, S0, bounds)
        S_prev = torch.cat([S0[:, None].to(states.dtype), states], 1)  # block 0 starts empty (rule 5)
        yc = self._out(self._block(xc, uc, cc, S_prev, valid, block_size), xc)
        if noisy is None:
            return yc, None
        xn, valid_n, rows, blks = noisy
        un = self.in_proj_qkv(xn)
        # conv left context: the last K-1 clean inputs before the block start (rule 2)
        padded = F.pad(uc, (0, 0, self.K - 1, 0))  # position p sits at index p + K - 1
        idx = blks[:, None] * block_size + torch.arange(self.K - 1, device=xc.device)
        tail = padded[rows[:, None], idx]  # [N, K-1, C]
        cn = causal_conv(un, self.w_causal, tail)
        yn = self._out(self._block(xn, un, cn, S_prev[rows, blks][:, None], valid_n, block_size), xn)
        return yc, yn

    def forward_step(self, x, cache: GDNCache, n_commit: int, block_size: int):
        """New tokens ``x [B, T, H]``: ``n_commit`` clean tokens to commit, then optionally one
        block to denoise. Advances ``cache`` over the committed part only."""
        B, T, _ = x.shape
        u = self.in_proj_qkv(x)
        cc = causal_conv(u, self.w_causal, cache.tail)  # conv context crosses into history (rule 2)
        nb = -(-T // block_size)
        S_prev = cache.S[:, None]
        if n_commit:
            bounds = [min((b + 1) * block_size, n_commit) - 1 for b in range(-(-n_commit // block_size))]
            states = self._history(x[:, :n_commit], F.silu(cc[:, :n_commit]), cache.S, bounds)
            S_prev = torch.cat([S_prev, states], 1)[:, :nb]
        valid = torch.ones(B, T, dtype=torch.bool, device=x.device)
        out = self._out(self._block(x, u, cc, S_prev, valid, block_size), x)
        if n_commit:
            cache.S = states[:, -1].contiguous()  # one layout from pass to pass (compiled passes guard on it)
            cache.tail = conv_tail(u[:, :n_commit], cache.tail, self.K)
        return out
