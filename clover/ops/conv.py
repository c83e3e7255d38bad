"""Depthwise convolutions of the Clover GDN mixer (docs/architecture.md, The Clover mixer; Rules 2 and 3).

All tensors are channels-last: ``x [B, T, C]``; weights ``[C, K]`` (causal, tap K-1 is the
current position, as in ``nn.Conv1d(groups=C).weight[:, 0]``) and ``[C, K-1]`` (right branch,
tap d-1 reads position i+d). Sequences passed here start on a block boundary.
"""

from __future__ import annotations

import torch


def _shift(x: torch.Tensor, d: int) -> torch.Tensor:
    """``y[:, i] = x[:, i - d]`` (zeros where out of range); d may be negative."""
    if d == 0:
        return x
    T = x.shape[1]
    if abs(d) >= T:
        return torch.zeros_like(x)
    z = x.new_zeros(x.shape[0], abs(d), x.shape[2])
    return torch.cat([z, x[:, : T - d]], 1) if d > 0 else torch.cat([x[:, -d:], z], 1)


def causal_conv(x: torch.Tensor, weight: torch.Tensor, tail: torch.Tensor | None = None) -> torch.Tensor:
    """Causal depthwise conv. ``tail [B, K-1, C]`` holds the inputs just before ``x`` (zeros if None).

    Returns ``[B, T, C]``, no activation.
    """
    K = weight.shape[1]
    T = x.shape[1]
    if tail is None:
        tail = x.new_zeros(x.shape[0], K - 1, x.shape[2])
    xx = torch.cat([tail.to(x.dtype), x], 1)  # [B, K-1+T, C]
    y = 0
    for j in range(K):  # tap j reads position i - (K-1-j)
        y = y + xx[:, j : j + T] * weight[:, j]
    return y


def conv_tail(x: torch.Tensor, tail: torch.Tensor | None, K: int) -> torch.Tensor:
    """The last K-1 inputs of ``[tail; x]``: the conv context of whatever comes next. ``[B, K-1, C]``."""
    if tail is None:
        tail = x.new_zeros(x.shape[0], K - 1, x.shape[2])
    return torch.cat([tail.to(x.dtype), x], 1)[:, x.shape[1] :]


def _in_block(T: int, block_size: int, d: int, device) -> torch.Tensor:
    """``[T]`` bool: position i and i - d lie in the same block (and i - d >= 0)."""
    i = torch.arange(T, device=device)
    j = i - d
    return (j >= 0) & (j < T) & (j // block_size == i // block_size)


def right_conv(
    x: torch.Tensor, weight: torch.Tensor, block_size: int, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """Right-context branch: ``y_i = Σ_{d=1}^{K-1} w[:, d-1] · x_{i+d}``, taps inside the block only.

    ``valid [B, T]`` (optional) zeroes padded positions so they never leak into real ones.
    """
    if valid is not None:
        x = x * valid[..., None].to(x.dtype)
    T = x.shape[1]
    y = torch.zeros_like(x)
    for d in range(1, weight.shape[1] + 1):
        keep = _in_block(T, block_size, -d, x.device)[None, :, None]
        y = y + torch.where(keep, _shift(x, -d), 0.0) * weight[:, d - 1]
    return y
