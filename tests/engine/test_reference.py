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
    params = SamplingParams(
        max_tokens=24,
        policy=policy,
        threshold=0.6,
        presence_penalty=1.5,
        frequency_penalty=0.7,
        logit_bias={9: 5.0, 11: -100.0},
    )
    outs = Engine(model).generate_batch(ps, [params, plain, params])
    for p, out, sp in zip(ps, outs, [params, plain, params]):
        assert out.token_ids == reference_decode(model, p, sp)[0]
    assert 11 not in outs[0].token_ids + outs[2].token_ids  # banned by its bias
    assert Engine(model).generate(ps[0], plain).token_ids != outs[0].token_ids  # the knobs do something


@pytest.mark.parametrize("policy", ["threshold", "ar", "edit"])
def test_vllm_sampling_extras_equal_the_reference_decoder(policy):
    """repetition_penalty (prompt and generated tokens), min_tokens and ignore_eos, in a batch
    with plain requests, as the slow reference decodes them."""
    model = peaky_model(shift=False, seed=0)
    ps = prompts([3, 8, 13, 5], seed=0)  # the third stops after 11 tokens when plain
    plain = SamplingParams(max_tokens=20, policy=policy, threshold=0.6)
    rep = SamplingParams(max_tokens=20, policy=policy, threshold=0.6, repetition_penalty=1.8)
    least = SamplingParams(max_tokens=20, policy=policy, threshold=0.6, min_tokens=15, repetition_penalty=0.7)
    never = SamplingParams(max_tokens=20, policy=policy, threshold=0.6, ignore_eos=True)
    plain_outs = Engine(model).generate_batch(ps, plain)
    assert plain_outs[2].finish_reason == "stop" and len(plain_outs[2].token_ids) < 15
    for settings in ([rep, plain, least, never], [plain, never, never, rep]):
        outs = Engine(model).generate_batch(ps, settings)
        for p, out, sp in zip(ps, outs, settings):
            ref, reason = reference_decode(model, p, sp)
            assert out.token_ids == ref and out.finish_reason == reason
        third = outs[2]
        assert len(third.token_ids) >= 15 if settings[2] is least else third.finish_reason == "length"
    changed = [Engine(model).generate(p, rep).token_ids != o.token_ids for p, o in zip(ps, plain_outs)]
    assert any(changed)  # the penalty changes the text


def test_min_p_one_samples_the_greedy_choice():
    model = peaky_model(shift=False, seed=8)
    p = prompts([9], seed=8)[0]
    greedy = Engine(model).generate(p, SamplingParams(max_tokens=16, policy="ar")).token_ids
    for seed in range(3):  # only the most likely token survives min_p = 1 (ar: the same positions each pass)
        params = SamplingParams(max_tokens=16, policy="ar", temperature=1.5, seed=seed, min_p=1.0)
        assert Engine(model).generate(p, params).token_ids == greedy


@pytest.mark.parametrize("policy", ["threshold", "prefix", "ar", "edit", "fixed"])
def test_constrained_slots_equal_the_reference_decoder(policy):
    """Slots with one allowed token are set before a block's first pass (the model reads them
    from the start); slots with several are chosen among them; in both decoders alike."""
    model = peaky_model(shift=False, seed=6)
    ps = prompts([3, 8, 13], seed=6)
    allowed = {0: [7], 1: [10, 11, 12], 2: [8], 3: [9], 4: [13, 14], 6: [15], 9: [16, 17], 10: [18], 17: [19]}
    params = SamplingParams(
        max_tokens=21,
        policy=policy,
        threshold=0.7,
        steps_per_block=3,
        allowed=allowed,
        presence_penalty=0.5,
        logprobs=2,
    )
    for p, out in zip(ps, Engine(model).generate_batch(ps, params)):
        ref, reason, ref_lp = reference_decode(model, p, params, with_logprobs=True)
        assert out.token_ids == ref and out.finish_reason == reason
        assert [e.logprob for e in out.logprobs] == pytest.approx(ref_lp, abs=1e-4)
        for i, ids in allowed.items():
            if i < len(out.token_ids):
                assert out.token_ids[i] in ids
                if len(ids) == 1:  # the only choice: probability 1, no alternative
                    assert out.logprobs[i].logprob == 0.0 and out.logprobs[i].top == [(ids[0], 0.0)]


def test_forced_slots_cost_no_pass_and_are_reported_with_the_first():
    model = peaky_model(shift=False, seed=7, eos=None)
    p = prompts([8], seed=7)[0]  # on a block boundary: the block is all generated positions
    forced = {i: [20 + i] for i in range(8) if i != 5}  # one open slot, position 5
    engine = Engine(model)
    events = list(engine.stream(p, SamplingParams(max_tokens=8, allowed=forced, policy="ar")))
    steps = [e for e in events if type(e).__name__ == "StepEvent"]
    out = events[-1].output
    assert out.stats["forward_passes"] == 1 and len(steps) == 1  # one pass: the open slot
    assert sorted(steps[0].positions) == [8 + i for i in range(8)]  # every position set in it, absolute
    assert [out.token_ids[i] for i in forced] == [20 + i for i in forced]
