"""A synthetic SFT task for trainer tests: the response repeats the prompt's tokens."""

import torch


def copy_source(batch=8, n=6, vocab=90, seed=0):
    def source(step):
        g = torch.Generator().manual_seed(seed * 7919 + step)
        x = torch.randint(1, vocab, (batch, n), generator=g)
        x0 = torch.cat([x, x], 1)
        target = torch.zeros_like(x0, dtype=torch.bool)
        target[:, n:] = True
        return {"x0": x0, "target": target, "valid": torch.ones_like(target)}

    return source
