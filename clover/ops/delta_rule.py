"""Gated delta rule: a naive recurrent reference and a chunked version.

Per value head, with state ``S`` of shape ``[dk, dv]`` (docs/architecture.md, The Clover mixer):

    S_t = exp(g_t) S_{t-1} + k_t δ_tᵀ,   δ_t = β_t (v_t - exp(g_t) S_{t-1}ᵀ k_t)
    o_t = S_tᵀ q_t · scale

Both functions take ``q, k [B, T, H, dk]``, ``v [B, T, H, dv]``, ``g, beta [B, T, H]``
(q and k already repeated to the value heads and L2-normalised by the caller), an optional
``initial_state [B, H, dk, dv]`` and a list of positions ``boundaries`` (0-based, the last
position *included* in each state). They return ``(o [B, T, H, dv] | None, states
[B, len(boundaries), H, dk, dv])``. States are what Clover uses: the state after every
committed block (docs/architecture.md, Rule 8) comes out of fixed-size chunks, whatever the block size.
"""

from __future__ import annotations

import functools
import warnings

import torch

CHUNK = 64


def _acc(x: torch.Tensor) -> torch.Tensor:
    """Accumulation dtype: fp32, or fp64 when the input already is (exactness tests)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def delta_rule_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    boundaries: list[int] | None = None,
    scale: float | None = None,
    output: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Token-by-token reference. Obviously correct, slow. Shapes as in the module doc."""
    B, T, H, dk = k.shape
    dv = v.shape[-1]
    scale = dk**-0.5 if scale is None else scale
    dtype = v.dtype
    q, k, v, g, beta = (_acc(x) for x in (q, k, v, g, beta))
    S = q.new_zeros(B, H, dk, dv) if initial_state is None else initial_state.to(q.dtype)
    want = set(boundaries or [])
    outs, states = [], {}
    for t in range(T):
        S = S * g[:, t].exp()[..., None, None]
        delta = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, t]))
        S = S + k[:, t, :, :, None] * delta[:, :, None, :]
        if output:
            outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]) * scale)
        if t in want:
            states[t] = S
    o = torch.stack(outs, 1).to(dtype) if output and T else None
    bl = boundaries or []
    st = torch.stack([states[e] for e in bl], 1) if bl else S.new_zeros(B, 0, H, dk, dv)
    return o, st


def delta_rule_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    boundaries: list[int] | None = None,
    scale: float | None = None,
    output: bool = True,
    chunk_size: int = CHUNK,
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Chunked (WY-form) gated delta rule, differentiable, fp32 inside.

    Inside a chunk starting from state S0, with G the cumulative sum of g:
        δ = (I + A)⁻¹ (β v − β exp(G) (K S0)),  A_tj = β_t exp(G_t − G_j) k_t·k_j  (j < t)
        S_e = exp(G_e) S0 + Σ_{j≤e} exp(G_e − G_j) k_j δ_jᵀ   for any e in the chunk
    so the state at any boundary is read off the chunk that contains it.
    """
    B, T, H, dk = k.shape
    dv = v.shape[-1]
    scale = dk**-0.5 if scale is None else scale
    dtype = v.dtype
    C = chunk_size
    N = max(1, -(-T // C))
    pad = N * C - T
    # [B, H, T, .] fp32, padded with no-op tokens (g = 0, beta = 0 leave the state unchanged)
    q, k, v = (torch.nn.functional.pad(_acc(x), (0, 0, 0, 0, 0, pad)).transpose(1, 2) for x in (q, k, v))
    g, beta = (torch.nn.functional.pad(_acc(x), (0, 0, 0, pad)).transpose(1, 2) for x in (g, beta))
    q, k, v = (x.reshape(B, H, N, C, -1) for x in (q, k, v))  # [B, H, N, C, d]
    g, beta = g.reshape(B, H, N, C), beta.reshape(B, H, N, C)

    G = g.cumsum(-1)  # [B, H, N, C]
    tri_incl = torch.ones(C, C, dtype=torch.bool, device=k.device).tril()
    tri_strict = tri_incl.tril(-1)
    diff = G[..., :, None] - G[..., None, :]  # G_t - G_j
    D = torch.where(tri_incl, diff, torch.full_like(diff, -float("inf"))).exp()  # [B, H, N, C, C]
    kk = k @ k.transpose(-1, -2)
    A = torch.where(tri_strict, beta[..., :, None] * D * kk, torch.zeros_like(kk))
    eye = torch.eye(C, device=k.device, dtype=k.dtype)
    L = eye + A
    U = torch.linalg.solve_triangular(L, beta[..., None] * v, upper=False, unitriangular=True)
    W = torch.linalg.solve_triangular(L, (beta * G.exp())[..., None] * k, upper=False, unitriangular=True)
    qk = (q @ k.transpose(-1, -2)) * D if output else None

    S = k.new_zeros(B, H, dk, dv) if initial_state is None else initial_state.to(k.dtype)
    starts, outs, deltas = [], [], []
    for n in range(N):  # sequential over chunks only
        starts.append(S)
        delta = U[:, :, n] - W[:, :, n] @ S  # [B, H, C, dv]
        if output:
            o = G[:, :, n].exp()[..., None] * (q[:, :, n] @ S) + qk[:, :, n] @ delta
            outs.append(o * scale)
        decay = (G[:, :, n, -1:] - G[:, :, n]).exp()  # exp(G_C - G_j)  [B, H, C]
        S = G[:, :, n, -1].exp()[..., None, None] * S + (k[:, :, n] * decay[..., None]).transpose(-1, -2) @ delta
        deltas.append(delta)  # kept for reading off states at boundaries

    o = None
    if output:
        o = torch.stack(outs, 2).reshape(B, H, N * C, dv)[:, :, :T].transpose(1, 2).to(dtype)
    bl = boundaries or []
    if not bl:
        return o, k.new_zeros(B, 0, H, dk, dv)
    e = torch.tensor(bl, device=k.device)
    c, r = e // C, e % C  # chunk and row of each boundary
    S0 = torch.stack(starts, 2)[:, :, c]  # [B, H, nb, dk, dv]
    dl = torch.stack(deltas, 2)[:, :, c]  # [B, H, nb, C, dv]
    Drow = D[:, :, c, r]  # [B, H, nb, C]  exp(G_e - G_j), zero for j > e
    Ge = G[:, :, c, r]  # [B, H, nb]
    st = Ge.exp()[..., None, None] * S0 + torch.einsum("bhnj,bhnjk,bhnjv->bhnkv", Drow, k[:, :, c], dl)
    return o, st.transpose(1, 2)


# fla's own GatedDeltaNet layer switches to the fused recurrent kernel at <= 64 tokens outside
# training; the same cut here (not measured on a GPU in this repository)
FLA_RECURRENT_MAX = 64
_FLA_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@functools.cache
def _fla_import():
    try:  # optional GPU extra
        # optional: flash-linear-attention (clover[gpu])
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
    except Exception:
        return None
    return chunk_gated_delta_rule, fused_recurrent_gated_delta_rule


def _fla_kernels(x: torch.Tensor):
    """fla's (chunked, fused recurrent) gated-delta-rule kernels when ``x`` is a CUDA tensor of
    a dtype they take and fla imports; else None (the PyTorch kernels run)."""
    if not x.is_cuda or x.dtype not in _FLA_DTYPES:
        return None
    return _fla_import()


def _chunk_dtype(dtype: torch.dtype) -> torch.dtype:
    """fla's chunked kernel takes 16-bit q/k/v (recent versions refuse fp32); its state stays fp32."""
    return torch.bfloat16 if dtype == torch.float32 else dtype


def delta_rule_fla(kernels, q, k, v, g, beta, initial_state=None, boundaries=None, scale=None, output=True):
    """The gated delta rule through fla's kernels, ``kernels = (chunk, fused_recurrent)`` with
    fla's signatures (``[B, T, H, d]`` layout, state ``[B, H, dk, dv]``). Shapes and returns as
    in the module doc.

    fla returns only the final state, so the sequence is cut after each boundary and run
    segment by segment, each segment's final state the next one's initial state: the states
    at the boundaries are exact, and so are the outputs (concatenated). A segment of at most
    ``FLA_RECURRENT_MAX`` tokens outside autograd runs the fused recurrent kernel (no backward
    there), any other the chunked one. q and k come L2-normalised (no normalisation in the kernel).
    """
    chunk, recurrent = kernels
    B, T, H, dk = k.shape
    dv = v.shape[-1]
    acc = torch.promote_types(q.dtype, torch.float32)  # the states' dtype, as the torch kernels'
    S = q.new_zeros(B, H, dk, dv, dtype=acc) if initial_state is None else initial_state.to(acc)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, g, beta, S))
    wanted = boundaries or []
    cuts = sorted(set(wanted) | ({T - 1} if output and T else set()))
    states, outs, start = {}, [], 0
    for e in cuts:
        n = e + 1 - start
        if n <= FLA_RECURRENT_MAX and not grad:
            kernel, dt = recurrent, q.dtype
        else:
            kernel, dt = chunk, _chunk_dtype(q.dtype)
        seg = slice(start, e + 1)
        with warnings.catch_warnings():  # fla warns when a segment is shorter than the head count
            warnings.filterwarnings("ignore", message=".*format mismatch.*")
            # g and beta by name: the recurrent kernel takes other gates between v and beta
            o, S = kernel(
                q[:, seg].to(dt),
                k[:, seg].to(dt),
                v[:, seg].to(dt),
                g=g[:, seg].to(acc),
                beta=beta[:, seg].to(acc),
                scale=scale,
                initial_state=S,
                output_final_state=True,
            )
        S = S.to(acc)
        states[e] = S
        outs.append(o)
        start = e + 1
    o = torch.cat(outs, 1).to(v.dtype) if output and T else None
    st = torch.stack([states[e] for e in wanted], 1) if wanted else S.new_zeros(B, 0, H, dk, dv)
    return o, st


def delta_rule(q, k, v, g, beta, initial_state=None, boundaries=None, scale=None, output=True):
    """Dispatch: fla's kernels on CUDA when fla is installed (``delta_rule_fla``), else the
    chunked PyTorch version. Same signature and returns as above."""
    kernels = _fla_kernels(q)
    if kernels is not None:
        return delta_rule_fla(kernels, q, k, v, g, beta, initial_state, boundaries, scale, output)
    return delta_rule_chunked(q, k, v, g, beta, initial_state, boundaries, scale, output)
