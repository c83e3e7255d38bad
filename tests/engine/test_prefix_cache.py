"""Prefix caching: a prompt that starts with an earlier prompt's committed blocks starts from
their cache, and decodes exactly as without it (and as the slow reference)."""

import pytest
import torch

from clover.engine import Engine, SamplingParams
from clover.engine.prefix_cache import PrefixCache
from clover.model.cache import GDNCache
from tests.engine.helpers import peaky_model, prompts
from tests.engine.reference import reference_decode


def _turns(seed: int) -> list[list[int]]:
    """An agent loop's prompts: each one the previous plus more (and one unrelated)."""
    a, b, c, d = prompts([37, 20, 45, 30], seed=seed)
    return [a, a + b, a + b + c, d, a + b]


@pytest.mark.parametrize("shift", [False, True])
@pytest.mark.parametrize("policy", ["threshold", "ar"])
def test_outputs_equal_without_the_cache_and_the_reference(shift, policy):
    model = peaky_model(shift=shift, seed=3)
    params = SamplingParams(max_tokens=20, policy=policy, threshold=0.6, block_size=8)
    cached = Engine(model, prefix_cache_mb=64)
    plain = Engine(model)
    for p in _turns(3):
        out = cached.generate(p, params)  # alone: the remaining prompt blocks ride with the first pass
        assert out.token_ids == plain.generate(p, params).token_ids == reference_decode(model, p, params)[0]
    s = cached.stats()
    assert s["prefix_cache_hits"] == 3 and s["prefix_cache_hit_tokens"] == 32 + 56 + 56  # turns 2, 3 and 5
    batch = Engine(model, prefix_cache_mb=64)  # in batches: prefill without the fused path
    outs = [o.token_ids for o in batch.generate_batch(_turns(3), params)]
    outs2 = [o.token_ids for o in batch.generate_batch(_turns(3), params)]  # now every prompt hits
    assert outs == outs2 == [plain.generate(p, params).token_ids for p in _turns(3)]
    assert batch.stats()["prefix_cache_hits"] >= 5


def test_a_hit_is_a_private_copy_and_eviction_is_lru():
    model = peaky_model(shift=False, seed=4)
    params = SamplingParams(max_tokens=12, block_size=8)
    engine = Engine(model, prefix_cache_mb=64)
    p = prompts([40], seed=4)[0]
    first = engine.generate(p, params).token_ids
    assert [engine.generate(p, params).token_ids for _ in range(2)] == [first, first]  # the entry is not consumed
    cache, _ = model.prefill(torch.tensor([p]), 8)
    q = prompts([33], seed=5)[0]
    q_cache = model.prefill(torch.tensor([q]), 8)[0]
    big = PrefixCache()
    big.insert(p, 8, cache)
    size_p = big.stats()["prefix_cache_bytes"]
    big.insert(q, 8, q_cache)
    size_q = big.stats()["prefix_cache_bytes"] - size_p
    pc = PrefixCache(max_bytes=size_p + size_q - 1)  # room for one of the two
    pc.insert(p, 8, cache)
    pc.insert(q, 8, q_cache)  # the oldest goes
    assert pc.stats()["prefix_cache_bytes"] == size_q
    assert len(pc) == 1 and pc.lookup(p, 8)[:2] == (0, None) and pc.lookup(q + [1, 2], 8)[0] == 32
    n, c, _ = pc.lookup(q, 8)
    gdn = [i for i, layer in enumerate(c.layers) if isinstance(layer, GDNCache)][0]
    c.layers[gdn].S += 1.0  # scribble on the copy a request got
    c.lengths += 8
    again = pc.lookup(q, 8)[1]
    assert int(again.lengths[0]) == 32 and not torch.equal(again.layers[gdn].S, c.layers[gdn].S)
    assert pc.lookup(q, 16)[:2] == (0, None)  # another block size is another key


@pytest.mark.parametrize("alone", [True, False])
def test_a_shared_beginning_is_kept_once_two_prompts_have_it(alone):
    """Many users, one system prompt: the second prompt that starts like the first commits the
    shared blocks first and keeps their cache; from the third on, prompts start from it."""
    model = peaky_model(shift=False, seed=6)
    params = SamplingParams(max_tokens=12, block_size=8, threshold=0.6)
    system = prompts([29], seed=6)[0]  # 3 whole blocks shared, then each user's own tokens
    users = [system + u for u in prompts([19, 26, 11, 30], seed=7)]
    cached, plain = Engine(model, prefix_cache_mb=64), Engine(model)
    if alone:
        outs = [cached.generate(p, params).token_ids for p in users]
    else:
        outs = [o.token_ids for o in cached.generate_batch(users[:1], params)]
        outs += [o.token_ids for o in cached.generate_batch(users[1:], params)]
    assert outs == [plain.generate(p, params).token_ids for p in users]
    assert outs == [reference_decode(model, p, params)[0] for p in users]
    s = cached.stats()
    assert s["prefix_cache_hits"] == 2 and s["prefix_cache_hit_tokens"] == 2 * 24  # users 3 and 4, 3 blocks each
