import torch

from clover.bench.exactness import perturb
from clover.model import CloverForBlockDiffusion, preset


def make_model(shift=True, block_size=8, all_attention=False, nontrivial=True, seed=0, **over):
    """A tiny fp64 model whose Clover-only parameters and norms are perturbed away from their init
    (``clover.bench.exactness.perturb``), so that the right branch, memory logit, γ, ρ, in-block
    scale and norms all matter."""
    torch.manual_seed(seed)
    cfg = preset("tiny", shift_logits=shift, block_size=block_size, initializer_range=0.2, **over)
    if all_attention:
        cfg = cfg.all_attention()
    m = CloverForBlockDiffusion(cfg).double().eval()
    return perturb(m) if nontrivial else m


def noisy(x0, mask_id, prompt_len, rate=0.5, seed=0):
    g = torch.Generator().manual_seed(seed)
    xt = x0.clone()
    m = torch.rand(x0.shape, generator=g) < rate
    m[:, :prompt_len] = False
    xt[m] = mask_id
    return xt


def incremental_logits(model, x0, xt, prompt_len, bs):
    """Engine-style decoding of every generation block: prefill, then per block commit the
    clean prefix and denoise the noisy block. Returns {block index: logits}."""
    out = {}
    L = x0.shape[1]
    cache, _ = model.prefill(x0[:, :prompt_len], bs)
    for b in range(prompt_len // bs, -(-L // bs)):
        s, e = b * bs, min(L, (b + 1) * bs)
        if int(cache.lengths[0]) < s:
            model.step(cache, commit=x0[:, int(cache.lengths[0]) : s], block_size=bs)
        out[b] = model.step(cache, denoise=xt[:, s:e], block_size=bs)
    return out
