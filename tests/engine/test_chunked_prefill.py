"""Chunked prefill: a long prompt is committed a few blocks per engine step while the running
requests go on decoding, and every request decodes exactly as with whole-prompt prefill."""

import pytest

from clover.engine import Engine, Finished, SamplingParams, StepEvent
from clover.engine.scheduler import PREFILL_CHUNK
from tests.engine.helpers import mixed_params, peaky_model, prompts
from tests.engine.reference import reference_decode


def _mixed(n: int, seed: int):
    """Prompts from under a block to many blocks long; policies, block sizes and sampling mixed."""
    return prompts([3 + (23 * i) % 90 for i in range(n)], seed=seed), mixed_params(n, lambda i: 6 + (5 * i) % 15)


class Counting:
    """Wraps a runner's prefill_chunk: how many chunks, and the most prompt tokens in one step."""

    def __init__(self, engine: Engine):
        self.chunks, self.step_tokens = 0, 0
        self.runner = engine.runner
        chunk = self.runner.prefill_chunk

        def counted(req, n):
            self.chunks += 1
            self.step_tokens += n
            return chunk(req, n)

        self.runner.prefill_chunk = counted


@pytest.mark.parametrize("shift", [False, True])
@pytest.mark.parametrize("budget", [1, 8, 20])
def test_tokens_identical_to_whole_prompt_prefill(shift, budget):
    """Batches of mixed prompt lengths, several policies: the same tokens with a tiny chunk
    budget (1: one block per step; 20: chunks cut inside the budget, requests sharing it) as
    with each prompt prefilled whole, and as the slow reference."""
    model = peaky_model(shift=shift, seed=11)
    ps, params = _mixed(12, seed=11)
    whole = Engine(model, prefill_chunk=0, max_batch_size=5)
    chunked = Engine(model, prefill_chunk=budget, max_batch_size=5)
    count = Counting(chunked)
    a = [o.token_ids for o in whole.generate_batch(ps, params)]
    b = [o.token_ids for o in chunked.generate_batch(ps, params)]
    assert a == b
    assert count.chunks > 10  # the long prompts were chunked
    for p, sp, out in list(zip(ps, params, b))[:6]:
        if sp.temperature == 0:
            assert out == reference_decode(model, p, sp)[0]
    alone = Engine(model, prefill_chunk=budget)  # one at a time: the last chunk rides with the first pass
    assert [alone.generate(p, sp).token_ids for p, sp in zip(ps[:4], params[:4])] == a[:4]


def test_a_long_prompt_does_not_stall_the_running_requests():
    """While a long prompt is prefilled, chunk by chunk, every running request gets its pass in
    every step, and no step commits more prompt tokens than the budget."""
    model = peaky_model(shift=False, seed=12, eos=None)
    engine = Engine(model, prefill_chunk=16)
    count = Counting(engine)
    short = [engine.add_request(p, SamplingParams(max_tokens=200, block_size=8)) for p in prompts([5, 9, 12], seed=12)]
    engine.step()
    long_prompt = prompts([203], seed=13)[0]  # 25 whole blocks of 8
    rid = engine.add_request(long_prompt, SamplingParams(max_tokens=8, block_size=8))
    steps = 0
    while True:
        passes = {e.request_id for e in engine.step() if isinstance(e, StepEvent)}
        if rid in passes:
            break
        steps += 1
        assert count.step_tokens <= 16
        count.step_tokens = 0
        assert engine.num_waiting == 1 and engine.scheduler.prefilling.id == rid
        assert passes == set(short)  # the others went on decoding in this step
    assert steps == 200 // 16 and count.chunks == steps  # 12 chunks of 16, then the last 8 join
    assert engine.num_active == 4 and engine.num_waiting == 0
    whole = Engine(model, prefill_chunk=0)
    assert (
        engine.generate(long_prompt, SamplingParams(max_tokens=8, block_size=8)).token_ids
        == whole.generate(long_prompt, SamplingParams(max_tokens=8, block_size=8)).token_ids
    )


def test_a_budget_under_a_block_still_prefills_a_block_per_step():
    model = peaky_model(shift=True, seed=13)
    p = prompts([50], seed=14)[0]
    params = SamplingParams(max_tokens=10, block_size=8)
    engine = Engine(model, prefill_chunk=3)
    count = Counting(engine)
    assert engine.generate(p, params).token_ids == Engine(model, prefill_chunk=0).generate(p, params).token_ids
    assert count.chunks == 5  # 6 whole blocks: 5 chunks of one, the last with the first denoise pass


def test_chunks_start_after_the_longest_cached_match():
    """With the prefix cache, a prompt that starts with an earlier one commits only its own
    blocks, in chunks; a shared beginning is kept on the way, so a third prompt hits it."""
    model = peaky_model(shift=False, seed=14)
    params = SamplingParams(max_tokens=10, block_size=8, threshold=0.6)
    a, b, c, d = prompts([64, 70, 45, 52], seed=15)
    engine = Engine(model, prefix_cache_mb=64, prefill_chunk=16)
    plain = Engine(model, prefill_chunk=0)
    count = Counting(engine)
    assert engine.generate(a, params).token_ids == plain.generate(a, params).token_ids
    count.chunks = 0
    assert engine.generate(a + b, params).token_ids == plain.generate(a + b, params).token_ids
    assert engine.stats()["prefix_cache_hit_tokens"] == 64
    assert count.chunks == 3  # (134 // 8 - 8) = 8 blocks of its own: 3 chunks of two, the last two alone
    # a shared beginning, a + c, then a + d: the second commits a's blocks first (kept), then its own
    engine2 = Engine(model, prefix_cache_mb=64, prefill_chunk=16)
    outs = [engine2.generate(p, params).token_ids for p in (a + c, a + d, a + c[:5] + d)]
    assert outs == [plain.generate(p, params).token_ids for p in (a + c, a + d, a + c[:5] + d)]
    assert engine2.stats()["prefix_cache_hits"] == 1 and engine2.stats()["prefix_cache_hit_tokens"] == 64


def test_abort_mid_prefill_frees_the_request():
    model = peaky_model(shift=False, seed=15, eos=None)
    engine = Engine(model, prefill_chunk=8, max_batch_size=2)
    keep = engine.add_request(prompts([6], seed=16)[0], SamplingParams(max_tokens=30, block_size=8))
    rid = engine.add_request(prompts([120], seed=17)[0], SamplingParams(max_tokens=8, block_size=8))
    waiting = engine.add_request(prompts([7], seed=18)[0], SamplingParams(max_tokens=8, block_size=8))
    engine.step()
    engine.step()
    req = engine.scheduler.prefilling
    assert req.id == rid and req.prefill_progress.done == 16 and engine.num_waiting == 2
    out = engine.abort(rid)
    assert out.finish_reason == "abort" and req.prefill_progress is None and engine.scheduler.prefilling is None
    events = engine.step()
    assert any(isinstance(e, Finished) and e.request_id == rid for e in events)
    assert engine.num_active == 2 and engine.num_waiting == 0  # the next waiting request took the slot
    done = {}
    while engine.has_unfinished():
        done.update({e.request_id: e.output for e in engine.step() if isinstance(e, Finished)})
    assert set(done) == {keep, waiting} and engine.stats()["requests"] == 3


def test_bad_budgets_are_refused():
    model = peaky_model()
    assert Engine(model).scheduler.prefill_chunk == PREFILL_CHUNK == 512
    assert Engine(model, prefill_chunk=None).scheduler.prefill_chunk is None
    for bad in (-1, 2.5, True, "64"):
        with pytest.raises(ValueError, match="prefill_chunk"):
            Engine(model, prefill_chunk=bad)
