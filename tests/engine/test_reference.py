"""The engine equals its slow twin (full training forward every pass, no caches) for every policy."""

import pytest

from clover.engine import Engine, SamplingParams
from tests.engine.helpers import peaky_model, prompts
from tests.engine.reference import reference_decode


@pytest.mark.parametrize("shift", [True, False])
@pytest.mark.parametrize("policy", ["threshold", "fixed", "ar", "edit", "prefix"])
def test_engine_equals_reference_decoder(shift, policy):
    model = peaky_model(shift=shift)
    # 3 < block, 8 on a boundary, 13 ends mid-block; EOS (id 5) ends some of them early
    ps = prompts([3, 8, 13])
    params = SamplingParams(max_tokens=21, policy=policy, threshold=0.8, steps_per_block=3)
    outs = Engine(model).generate_batch(ps, params)
    for p, out in zip(ps, outs):
        ref, reason = reference_decode(model, p, params)
        assert out.token_ids == ref and out.finish_reason == reason


@pytest.mark.parametrize("shift", [True, False])
def test_small_blocks_and_sampling_equal_reference(shift):
    model = peaky_model(shift=shift, seed=1)
    ps = prompts([5, 6], seed=1)
    for params in (
        SamplingParams(max_tokens=10, block_size=4, threshold=0.7),
        SamplingParams(max_tokens=10, block_size=2, policy="edit", threshold=0.5),
        SamplingParams(max_tokens=10, temperature=1.3, top_k=20, top_p=0.9, seed=3, threshold=0.6),
    ):
        outs = Engine(model).generate_batch(ps, params)
        for p, out in zip(ps, outs):
            assert (out.token_ids, out.finish_reason) == reference_decode(model, p, params)


@pytest.mark.parametrize("policy", ["threshold", "ar", "edit"])
def test_logprobs_equal_the_reference_decoders(policy):
    model = peaky_model(shift=False, seed=4)
    ps = prompts([3, 8, 13], seed=4)
    params = SamplingParams(max_tokens=21, policy=policy, threshold=0.6, logprobs=3)
    for p, out in zip(ps, Engine(model).generate_batch(ps, params)):
        ref, reason, ref_lp = reference_decode(model, p, params, with_logprobs=True)
        assert out.token_ids == ref and len(out.logprobs) == len(ref)
        got = [e.logprob for e in out.logprobs]
        assert got == pytest.approx(ref_lp, abs=1e-4)
        for e in out.logprobs:  # the alternatives: most likely first, the greedy choice among them
            lps = [q for _, q in e.top]
            assert len(e.top) == 3 and lps == sorted(lps, reverse=True)
            assert e.top[0][1] >= e.logprob - 1e-5 and e.logprob <= 0


@pytest.mark.parametrize("policy", ["threshold", "ar"])
def test_penalties_and_logit_bias_equal_the_reference_decoders(policy):
    model = peaky_model(shift=False, seed=5, eos=None)
    ps = prompts([3, 8, 13], seed=5)
    plain = SamplingParams(max_tokens=24, policy=policy, threshold=0.6)
    params = SamplingParams(max_tokens=24, policy=policy, threshold=0.6, presence_penalty=1.5,
                            frequency_penalty=0.7, logit_bias={9: 5.0, 11: -100.0})  # fmt: skip
    outs = Engine(model).generate_batch(ps, [params, plain, params])
    for p, out, sp in zip(ps, outs, [params, plain, params]):
        assert out.token_ids == reference_decode(model, p, sp)[0]
    assert 11 not in outs[0].token_ids + outs[2].token_ids  # banned by its bias
    assert Engine(model).generate(ps[0], plain).token_ids != outs[0].token_ids  # the knobs do something
