"""Attention caches are written in place (new k/v at each row's length, also by denoise passes):
no cache the engine keeps shares a tensor with another, so no such write reaches a prefix-cache
entry or another request's rows."""

import torch

from clover.engine.prefix_cache import PrefixCache
from clover.model import CloverForBlockDiffusion, ModelCache, preset


def test_in_place_writes_never_reach_another_cache():
    """select and cat copy, so a denoise pass on one cache (scratch past its lengths) and a
    commit on it leave every cache it was made from, or made with, as it was."""
    torch.manual_seed(0)
    m = CloverForBlockDiffusion(preset("tiny", block_size=4)).double().eval()
    prompt = torch.randint(0, 96, (1, 8))
    c, _ = m.prefill(prompt, 4)
    pc = PrefixCache()
    pc.insert(prompt[0].tolist(), 4, c)
    _, hit, _ = pc.lookup(prompt[0].tolist(), 4)
    entry = next(iter(pc._entries.values()))[1]
    snapshot = [t.clone() for layer in entry.layers for t in vars(layer).values()]
    joined = ModelCache.cat([hit, c.select([0])])
    caches = (entry, hit, joined, c)
    ptrs = [t.untyped_storage().data_ptr() for x in caches for layer in x.layers for t in vars(layer).values()]
    assert len(set(ptrs)) == len(ptrs)  # no two caches share a tensor
    for cache in (hit, joined, c):
        m.step(cache, denoise=torch.randint(0, 96, (cache.batch_size, 4)), block_size=4)
        m.step(cache, commit=torch.randint(0, 96, (cache.batch_size, 4)), block_size=4)
    after = [t for layer in entry.layers for t in vars(layer).values()]
    assert all(torch.equal(a, b) for a, b in zip(snapshot, after))
