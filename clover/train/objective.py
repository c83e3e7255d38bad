"""The block-diffusion objective (design §3).

Three named terms, as in BD3-LM: the *clean stream* (true tokens, block-causal history), the
*noisy stream* (each block masked at its own rate t), and the *loss* on masked positions only,
weighted 1/t (ELBO) or plain mean. Prompt tokens are never masked (SFT).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class MaskingConfig:
    t_min: float = 0.05  # per-block masking rate t ~ U[t_min, t_max]
    t_max: float = 1.0
    weighting: str = "elbo"  # "elbo": weight 1/t; "mean": plain mean over masked tokens
    complementary: bool = True  # also train on the complement of each mask (every target seen once)

    def __post_init__(self) -> None:
        if not 0 < self.t_min <= self.t_max <= 1:
            raise ValueError(f"need 0 < t_min <= t_max <= 1, got {self.t_min}, {self.t_max}")
        if self.weighting not in ("elbo", "mean"):
            raise ValueError(f"weighting must be 'elbo' or 'mean', got {self.weighting!r}")


def sample_mask(
    target: torch.Tensor, block_size: int, cfg: MaskingConfig, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """One masking rate per (row, block); each target position is masked with that rate.

    target ``[B, T]`` bool (positions that may be masked: response tokens).
    Returns (mask ``[B, T]`` bool, t ``[B, T]`` the rate of each position's block).
    """
    B, T = target.shape
    nb = -(-T // block_size)
    t_blk = cfg.t_min + (cfg.t_max - cfg.t_min) * torch.rand(B, nb, generator=generator)
    t = t_blk.repeat_interleave(block_size, 1)[:, :T]
    mask = (torch.rand(B, T, generator=generator) < t) & target
    return mask, t


def build_batch(
    x0: torch.Tensor,
    target: torch.Tensor,
    valid: torch.Tensor,
    mask_id: int,
    block_size: int,
    cfg: MaskingConfig,
    generator: torch.Generator,
) -> dict[str, torch.Tensor]:
    """Noisy inputs and loss weights for one batch (doubled when complementary)."""
    mask, t = sample_mask(target, block_size, cfg, generator)
    if cfg.complementary:
        mask = torch.cat([mask, target & ~mask])
        t = torch.cat([t, 1 - t]).clamp(min=cfg.t_min)  # the complement of rate t has rate 1-t
        x0, target, valid = (torch.cat([a, a]) for a in (x0, target, valid))
    xt = torch.where(mask, torch.full_like(x0, mask_id), x0)
    w = (1.0 / t) if cfg.weighting == "elbo" else torch.ones_like(t)
    return {"x0": x0, "xt": xt, "mask": mask, "weight": w * mask, "valid": valid, "target": target}


def masked_loss(
    logits: torch.Tensor, batch: dict[str, torch.Tensor], cfg: MaskingConfig, normalizer: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Weighted cross-entropy on masked positions.

    logits ``[N, V]`` for the masked positions in row-major order (``batch['mask']``).
    ``normalizer`` (the global count of target tokens, or of masked tokens for "mean") lets a
    data-parallel caller normalise by the whole batch; by default it is this batch's count.
    Returns (loss, per-token CE of the masked positions).
    """
    y = batch["x0"][batch["mask"]]
    ce = F.cross_entropy(logits.float(), y, reduction="none")
    w = batch["weight"][batch["mask"]]
    if normalizer is None:
        normalizer = loss_normalizer(batch, cfg)
    return (ce * w).sum() / normalizer, ce.detach()


def loss_normalizer(batch: dict[str, torch.Tensor], cfg: MaskingConfig) -> float:
    key = "target" if cfg.weighting == "elbo" else "mask"
    return max(1.0, float(batch[key].sum()))
