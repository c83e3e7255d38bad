"""Shared building blocks: zero-centred RMSNorm, gated RMSNorm, partial RoPE, the feed-forwards (MoE or dense)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from clover.model.config import CloverConfig


class RMSNorm(nn.Module):
    """Zero-centred RMSNorm: ``x̂ · (1 + w)``, w initialised to zero (Qwen3.5)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * (1.0 + self.weight.float())).type_as(x)


class GatedRMSNorm(nn.Module):
    """``norm(x) · w · silu(z)`` with a plain (ones-initialised) weight, as the GDN output norm."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        y = self.weight * y.to(dtype)
        return (y * F.silu(z.float())).to(dtype)


class RotaryEmbedding(nn.Module):
    """Partial RoPE: the first ``head_dim·partial_rotary_factor`` dims rotate (rotate-half form)."""

    def __init__(self, config: CloverConfig):
        super().__init__()
        dim = int(config.head_dim * config.partial_rotary_factor)
        inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions ``[B, T]`` → cos, sin ``[B, T, rotary_dim]``."""
        freqs = positions[..., None].float() * self.inv_freq.to(positions.device)
        emb = torch.cat([freqs, freqs], -1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x ``[B, H, T, D]``; cos/sin ``[B, T, R]`` with R <= D."""
    cos, sin = cos[:, None], sin[:, None]
    R = cos.shape[-1]
    xr, xp = x[..., :R], x[..., R:]
    x1, x2 = xr[..., : R // 2], xr[..., R // 2 :]
    rot = torch.cat([-x2, x1], -1)
    return torch.cat([xr * cos + rot * sin, xp], -1)


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DenseMLP(MLP):
    """A layer's dense SwiGLU feed-forward (``num_experts = 0``), called as ``MoE`` is: it takes the
    ``real`` mask and returns empty routing statistics ``[2, 0]``, so a decoder layer and the
    balance loss treat both alike (the loss is 0 without experts)."""

    def __init__(self, config: CloverConfig):
        super().__init__(config.hidden_size, config.intermediate_size)

    def forward(
        self, x: torch.Tensor, real: torch.Tensor | None = None, stats: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x ``[..., H]`` → (y ``[..., H]``, stats ``[2, 0]`` float32, or None if not ``stats``)."""
        return super().forward(x), torch.zeros(2, 0, device=x.device) if stats else None


def feed_forward(config: CloverConfig) -> nn.Module:
    """The feed-forward of every decoder layer: the MoE, or a dense MLP when ``num_experts`` is 0."""
    return MoE(config) if config.num_experts else DenseMLP(config)


class Router(nn.Module):
    def __init__(self, config: CloverConfig):
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.weight = nn.Parameter(torch.zeros(config.num_experts, config.hidden_size))


def _grouped_swiglu(h: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """Every expert's SwiGLU on its rows of ``h`` (see ``Experts.run_sorted``): two grouped GEMMs."""
    gate, up = torch._grouped_mm(h, gate_up.transpose(1, 2), offs=offs).chunk(2, -1)  # [M, I]
    return torch._grouped_mm(F.silu(gate) * up, down.transpose(1, 2), offs=offs)


@torch.library.custom_op("clover::grouped_swiglu", mutates_args=())
def grouped_swiglu(h: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """``_grouped_swiglu`` as an operator the compiler does not look into: torch's compile-time
    shape check of ``torch._grouped_mm`` takes bf16 only, while the kernel itself runs fp32 too.
    Decoding only (no backward is registered; training calls ``_grouped_swiglu`` directly)."""
    return _grouped_swiglu(h, gate_up, down, offs)


@grouped_swiglu.register_fake
def _(h, gate_up, down, offs):
    return h.new_empty(h.shape[0], down.shape[1])


class Experts(nn.Module):
    """Packed experts: ``gate_up_proj [E, 2I, H]``, ``down_proj [E, H, I]``."""

    def __init__(self, config: CloverConfig):
        super().__init__()
        E, H, I = config.num_experts, config.hidden_size, config.moe_intermediate_size
        self.gate_up_proj = nn.Parameter(torch.empty(E, 2 * I, H))
        self.down_proj = nn.Parameter(torch.empty(E, H, I))

    # the MoE calls experts through these two, so a quantized stand-in (clover.model.quant
    # ``QuantExperts``) only has to provide the same pair
    def run(self, e: int, h: torch.Tensor) -> torch.Tensor:
        """Expert ``e``'s SwiGLU on tokens ``h [n, H]`` → ``[n, H]``."""
        gate, up = F.linear(h, self.gate_up_proj[e]).chunk(2, -1)
        return F.linear(F.silu(gate) * up, self.down_proj[e])

    def run_all(self, h: torch.Tensor) -> torch.Tensor:
        """Every expert on every token: ``h [N, H]`` → ``[E, N, H]`` (a few batched matmuls)."""
        gate, up = torch.matmul(h, self.gate_up_proj.transpose(1, 2)).chunk(2, -1)  # [E, N, I]
        return torch.matmul(F.silu(gate) * up, self.down_proj.transpose(1, 2))  # [E, N, H]

    def run_sorted(self, h: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        """Tokens sorted by expert, ``h [M, H]``, expert e taking rows ``offs[e-1]:offs[e]``
        (``offs [E]`` int32 cumulative counts, ``offs[-1] == M``) → ``[M, H]``: two grouped GEMMs,
        no per-expert loop and no host sync."""
        if torch.compiler.is_compiling():  # an opaque op to the compiler (see grouped_swiglu)
            return grouped_swiglu(h, self.gate_up_proj, self.down_proj, offs)
        return _grouped_swiglu(h, self.gate_up_proj, self.down_proj, offs)

    def grouped_mm_ok(self, h: torch.Tensor) -> bool:
        """Whether ``run_sorted`` can take ``h``: ``torch._grouped_mm`` multiplies fp32, bf16 and
        fp16 only, with rows whose length in bytes is a multiple of 16."""
        if h.dtype not in (torch.float32, torch.bfloat16, torch.float16) or self.gate_up_proj.dtype != h.dtype:
            return False
        size = h.element_size()
        return all(n * size % 16 == 0 for n in (self.gate_up_proj.shape[1] // 2, self.gate_up_proj.shape[2]))


# Expert paths, one thread (benchmarks/bench_model.py --only moe; ms per MoE call, routing excluded):
#
#   tokens                      1      8     16     32     64    512   512 fwd+bwd
#   bundled  loop (_grouped)  0.12   0.24   0.27   0.31   0.39   1.54   5.4
#   (4 exp.) grouped GEMM     0.09   0.14   0.16   0.21   0.29   1.46   4.8
#            dense            0.07   0.12   0.17   0.24   0.41   3.89
#   medium   loop                          9.7           15.1   45.4   1115
#   (16 exp.) grouped GEMM                 9.7           14.6   45.5   180
#
# The dense path (``MoE._dense``: every expert on every token) does E/k times the expert FLOPs
# and pays only where per-call overhead dominates: few experts next to top-k (experts <= ratio
# × top-k) and at most DENSE_MAX_TOKENS tokens. Otherwise the grouped GEMM, on every device: it
# is never slower than the per-expert loop on a CPU, and the loop's backward writes a zero
# gradient the size of all experts for each expert (6x slower on the medium preset). On CUDA
# torch runs it without a host sync for bf16 on Hopper-class GPUs and falls back to its own
# per-group loop elsewhere (not measured here: no GPU).
DENSE_MAX_EXPERT_RATIO = 4
DENSE_MAX_TOKENS = 16


class MoE(nn.Module):
    """Softmax router, top-k renormalised, packed experts, sigmoid-gated shared expert."""

    def __init__(self, config: CloverConfig):
        super().__init__()
        self.num_experts = config.num_experts
        self.gate = Router(config)
        self.experts = Experts(config)
        self.shared_expert = MLP(config.hidden_size, config.shared_expert_intermediate_size)
        self.shared_expert_gate = nn.Linear(config.hidden_size, 1, bias=False)

    def forward(
        self, x: torch.Tensor, real: torch.Tensor | None = None, stats: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x ``[..., H]`` → (y ``[..., H]``, routing stats ``[2, E]`` over the tokens marked by
        ``real [...]`` bool, all if None: padding never counts towards load balance; None when
        ``stats`` is False, as in decoding, which has no loss to balance)."""
        shape = x.shape
        h = x.reshape(-1, shape[-1])  # [N, H]
        logits = F.linear(h, self.gate.weight)
        probs = logits.float().softmax(-1)
        top_w, top_i = probs.topk(self.gate.top_k, -1)  # [N, k]
        top_w = (top_w / top_w.sum(-1, keepdim=True)).to(h.dtype)
        if self.num_experts <= DENSE_MAX_EXPERT_RATIO * self.gate.top_k and h.shape[0] <= DENSE_MAX_TOKENS:
            out = self._dense(h, top_w, top_i)
        elif self._grouped_mm_ok(h):
            out = self._grouped_mm(h, top_w, top_i)
        else:
            out = self._grouped(h, top_w, top_i)
        out = out + torch.sigmoid(self.shared_expert_gate(h)) * self.shared_expert(h)
        if not stats:
            return out.reshape(shape), None
        # routing statistics for the Switch-style balance loss E · Σ_e f_e · P_e; returned as
        # sums so a data-parallel trainer can combine them over ranks before forming the loss
        # (padding is weighted 0 rather than dropped: boolean indexing and bincount would wait
        # for the device to learn their output sizes)
        keep = probs.new_ones(h.shape[0]) if real is None else real.reshape(-1).to(probs.dtype)  # [N]
        counts = probs.new_zeros(self.num_experts).index_add_(
            0, top_i.reshape(-1), keep.repeat_interleave(top_i.shape[1])
        )
        stats = torch.stack([counts, (probs * keep[:, None]).sum(0)])  # [2, E]; row 1 carries the gradient
        return out.reshape(shape), stats

    def _grouped(self, h: torch.Tensor, top_w: torch.Tensor, top_i: torch.Tensor) -> torch.Tensor:
        """Tokens grouped by expert: one matmul per expert that got any token (the reference, and
        the path of quantized and fp64 experts). Reads the counts on the host."""
        out = torch.zeros_like(h)
        flat_i = top_i.reshape(-1)
        order = flat_i.argsort(stable=True)
        counts = torch.bincount(flat_i, minlength=self.num_experts).tolist()
        tok = order // self.gate.top_k
        w = top_w.reshape(-1)[order]
        start = 0
        for e, c in enumerate(counts):
            if c == 0:
                continue
            idx = tok[start : start + c]
            y = self.experts.run(e, h[idx]) * w[start : start + c, None]
            out.index_add_(0, idx, y.to(out.dtype))
            start += c
        return out

    def _grouped_mm_ok(self, h: torch.Tensor) -> bool:
        """The grouped GEMM serves plain ``Experts`` (quantized ones keep the per-expert loop) in
        the dtypes and shapes ``torch._grouped_mm`` takes (fp64 models keep the loop)."""
        return isinstance(self.experts, Experts) and self.experts.grouped_mm_ok(h)

    def _grouped_mm(self, h: torch.Tensor, top_w: torch.Tensor, top_i: torch.Tensor) -> torch.Tensor:
        """Tokens sorted by expert and every expert's share in one grouped GEMM, without a host
        sync (the offsets are found on the device). Each token's k results are summed in its own
        top-k order, so it matches ``_grouped`` up to rounding."""
        N, k = top_i.shape
        flat_i = top_i.reshape(-1)  # [N·k] one slot per (token, choice)
        order = flat_i.argsort(stable=True)  # slots sorted by expert
        experts = torch.arange(self.num_experts, device=h.device)
        offs = torch.searchsorted(flat_i[order], experts, right=True, out_int32=True)  # [E] cumulative counts
        y = self.experts.run_sorted(h[order // k], offs)  # [N·k, H] in sorted order
        y = torch.empty_like(y).index_copy_(0, order, y)  # back to slot order
        return (y.view(N, k, -1) * top_w[..., None]).sum(1)

    def _dense(self, h: torch.Tensor, top_w: torch.Tensor, top_i: torch.Tensor) -> torch.Tensor:
        """Every expert on every token, unselected ones weighted 0: a few batched matmuls and no
        host sync. Worth it only when experts are few next to top-k and tokens are few (small
        models' decode passes), where the grouped loop's per-expert overhead dominates."""
        w = torch.zeros(h.shape[0], self.num_experts, dtype=h.dtype, device=h.device).scatter(1, top_i, top_w)
        return torch.einsum("enh,ne->nh", self.experts.run_all(h), w)


def balance_loss(stats: torch.Tensor, top_k: int) -> torch.Tensor:
    """Load-balancing loss from summed routing statistics ``[2, E]`` (see ``MoE.forward``)."""
    counts, prob_sum = stats[0].detach(), stats[1]
    n_tokens = counts.sum() / top_k
    f = counts / counts.sum().clamp(min=1)
    return stats.shape[1] * (f * prob_sum / n_tokens.clamp(min=1)).sum()
