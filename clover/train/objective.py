"""The block-diffusion objective (docs/architecture.md, Training objective).

Three named terms, as in BD3-LM: the *clean stream* (true tokens, block-causal history), the
*noisy stream* (each block masked at its own rate t), and the *loss* on masked positions only,
weighted 1/t (ELBO) or plain mean. Prompt tokens are never masked (SFT).

``MaskingConfig.confidence`` (λ) adds a term for parallel decoding, the confidence-aware loss of
LLaDA2.0 and dParallel's certainty forcing: λ times the entropy of the predicted distribution at
the masked positions the model already predicts right (argmax = target), so that a right guess
also becomes a sure one and a threshold policy commits it sooner. Wrong guesses get only the
cross-entropy. Validation figures leave the term out.
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
    samples: int = 1  # independent masks per sequence, all sharing one clean stream
    confidence: float = 0.0  # λ of the entropy term on right guesses (0: plain block diffusion)

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError(f"samples must be >= 1, got {self.samples}")
        if not 0 < self.t_min <= self.t_max <= 1:
            raise ValueError(f"need 0 < t_min <= t_max <= 1, got {self.t_min}, {self.t_max}")
        if self.weighting not in ("elbo", "mean"):
            raise ValueError(f"weighting must be 'elbo' or 'mean', got {self.weighting!r}")
        if self.confidence < 0:
            raise ValueError(f"confidence must be >= 0, got {self.confidence}")


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
    """Noisy views of one batch: ``cfg.samples`` masks per sequence, each followed by its
    complement when ``cfg.complementary``. The clean stream is shared by all views.

    x0, target, valid ``[B, T]``. Returns those plus xt, mask, weight ``[V, B, T]`` (V views).
    """
    masks, rates = [], []
    for _ in range(cfg.samples):
        mask, t = sample_mask(target, block_size, cfg, generator)
        masks.append(mask)
        rates.append(t)
        if cfg.complementary:
            masks.append(target & ~mask)
            rates.append((1 - t).clamp(min=cfg.t_min))  # the complement of rate t has rate 1-t
    mask, t = torch.stack(masks), torch.stack(rates)
    xt = torch.where(mask, torch.full_like(mask, mask_id, dtype=x0.dtype), x0[None])
    w = (1.0 / t) if cfg.weighting == "elbo" else torch.ones_like(t)
    return {"x0": x0, "xt": xt, "mask": mask, "weight": w * mask, "valid": valid, "target": target}


def rows_of(batch: dict[str, torch.Tensor], rows: slice) -> dict[str, torch.Tensor]:
    """The sequences ``rows`` of a batch, with all their views (a data-parallel rank's share)."""
    return {k: v[:, rows] if v.dim() == 3 else v[rows] for k, v in batch.items()}  # [V, B, T] views


def noisy_blocks(batch: dict[str, torch.Tensor], block_size: int) -> dict[str, torch.Tensor]:
    """The blocks of all views that hold a masked position (the only ones with a loss); when
    there are none, the first block with no masked position, so the training call still runs
    the clean stream and the loss is zero.

    Returns rows, blks ``[N]`` (which sequence and block), xt, mask, weight ``[N, bs]`` and the
    true tokens y ``[N, bs]``: the arguments of the model's training call.
    """
    V, B, T = batch["mask"].shape
    nb = -(-T // block_size)

    def blocks(a: torch.Tensor) -> torch.Tensor:  # [V, B, T] → [V, B, nb, bs]
        return F.pad(a, (0, nb * block_size - T)).reshape(V, B, nb, block_size)

    mask = blocks(batch["mask"])
    v, rows, blks = mask.any(-1).nonzero(as_tuple=True)
    if rows.numel() == 0:  # nothing masked (every answer past max_len): one block, no loss position
        v = rows = blks = torch.zeros(1, dtype=torch.long, device=mask.device)
    y = blocks(batch["x0"][None].expand(V, -1, -1))
    return {
        "rows": rows,
        "blks": blks,
        "xt": blocks(batch["xt"])[v, rows, blks],
        "mask": mask[v, rows, blks],
        "weight": blocks(batch["weight"])[v, rows, blks],
        "y": y[v, rows, blks],
    }


def block_loss(
    model, batch: dict[str, torch.Tensor], block_size: int, cfg: MaskingConfig, normalizer=None, train: bool = True
):
    """Run the model's training call on the noisy blocks of ``batch`` and weigh the
    cross-entropy of the masked positions (1/t or mean), plus the confidence term when
    ``cfg.confidence`` and ``train`` (validation passes ``train=False``).

    ``normalizer`` (the global count of target tokens × views, or of masked tokens for "mean")
    lets a data-parallel caller normalise by the whole batch; by default it is this batch's.
    Returns (loss, per-token CE of the masked positions, the model's output).
    """
    nb = noisy_blocks(batch, block_size)
    out = model(batch["x0"], batch["valid"], nb["xt"], nb["rows"], nb["blks"], block_size, logits_at=nb["mask"])
    logits = out.logits.to(torch.promote_types(out.logits.dtype, torch.float32))
    y = nb["y"][nb["mask"]]
    ce = F.cross_entropy(logits, y, reduction="none")
    if normalizer is None:
        normalizer = loss_normalizer(batch, cfg)
    loss = (ce * nb["weight"][nb["mask"]]).sum() / normalizer
    if cfg.confidence and train:
        loss = loss + cfg.confidence * confidence_term(logits, y) / normalizer
    return loss, ce.detach(), out


def confidence_term(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The summed entropy of the predictions ``logits [N, V]`` whose argmax is the target ``y``."""
    logp = logits.log_softmax(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return (entropy * (logits.argmax(-1) == y)).sum()


def loss_normalizer(batch: dict[str, torch.Tensor], cfg: MaskingConfig) -> float:
    if cfg.weighting == "elbo":
        return max(1.0, float(batch["target"].sum()) * batch["mask"].shape[0])
    return max(1.0, float(batch["mask"].sum()))
