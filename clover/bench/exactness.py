"""What the exactness checks of Clover's other runtimes share (the llama.cpp back end,
``clover.bench.llamacpp``, and the Hugging Face export, ``clover.bench.hf_export``): a random model
in which every Clover parameter shows in the logits, and the relative error they report."""

from __future__ import annotations

import torch

from clover.model import CloverForBlockDiffusion, preset


def perturb(model: CloverForBlockDiffusion, extra: tuple[str, ...] = ()) -> CloverForBlockDiffusion:
    """Draw ``model``'s Clover parameters (right conv, memory key and bias, γ, ρ, in-block scale),
    its norms and the parameters named in ``extra`` (leaf names, such as ``A_log``) far from their
    neutral starting values, in place, from torch's global generator; returns ``model``. Every
    check that compares two runtimes or two code paths on a random model perturbs it this way, so
    that one that dropped or misread one of those parameters shows in the logits."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf in ("conv_right", "mem_key", "mem_bias", *extra) or name.endswith("norm.weight"):
                p.normal_(0.0, 0.3)
            elif leaf in ("mem_gamma", "mem_scale", "attn_scale"):
                p.uniform_(0.5, 2.0)
    return model


def perturbed_tiny(seed: int = 0, **overrides) -> CloverForBlockDiffusion:
    """The ``tiny`` preset (``overrides``: config fields) with random weights from ``seed``, then
    ``perturb``-ed, in eval mode."""
    torch.manual_seed(seed)
    return perturb(CloverForBlockDiffusion(preset("tiny", **overrides)).eval())


def rel_err(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """max |a − b| / max |b| (``b``: the reference), over the positions ``mask`` keeps (all when None)."""
    if mask is not None:
        a, b = a[mask.bool()], b[mask.bool()]
    return float((a - b).abs().max() / b.abs().max())
