"""Fused == unfused, batch invariance, EOS and stop strings, constrained slots, errors, abort."""

import pytest
import torch

from clover.engine import Engine, Finished, SamplingParams, StepEvent, TextDelta
from clover.engine.grammar import json_grammar
from tests.engine.helpers import CharTokenizer, mixed_params, peaky_model, prompts
from tests.engine.reference import reference_decode


def _mixed_requests(n=16):
    return prompts([1 + (7 * i) % 29 for i in range(n)], seed=2), mixed_params(n)


@pytest.mark.parametrize("shift", [True, False])
def test_fused_commit_gives_the_same_tokens_as_unfused(shift):
    model = peaky_model(shift=shift)
    ps, params = _mixed_requests(8)
    fused, unfused = Engine(model, fuse=True), Engine(model, fuse=False)
    a, b = fused.generate_batch(ps, params), unfused.generate_batch(ps, params)
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    assert [o.stats["forward_passes"] for o in a] == [o.stats["forward_passes"] for o in b]
    # alone, every block after the first is committed inside a denoise pass: no extra forwards
    for p, sp in list(zip(ps, params))[:4]:
        fused, unfused = Engine(model, fuse=True), Engine(model, fuse=False)
        a, b = fused.generate(p, sp), unfused.generate(p, sp)
        assert a.token_ids == b.token_ids and a.stats["commit_passes"] == 0
        assert fused.stats()["forward_calls"] == a.stats["forward_passes"]
        assert unfused.stats()["forward_calls"] == b.stats["forward_passes"] + b.stats["commit_passes"]
    assert b.stats["commit_passes"] > 0


@pytest.mark.parametrize("shift", [True, False])
def test_a_request_alone_commits_its_prompt_inside_its_first_denoise_pass(shift, monkeypatch):
    model = peaky_model(shift=shift)
    calls = []
    step = model.step
    monkeypatch.setattr(model, "step", lambda *a, **k: calls.append(1) or step(*a, **k))
    ps, params = _mixed_requests(8)
    for p, sp in zip(ps, params):
        bs = sp.block_size
        calls.clear()
        a = Engine(model, fuse=True).generate(p, sp)
        fused_calls = len(calls)
        calls.clear()
        b = Engine(model, fuse=False).generate(p, sp)
        assert a.token_ids == b.token_ids
        prefill = 1 if len(p) >= bs else 0  # a prompt shorter than a block has nothing to prefill
        assert fused_calls == a.stats["forward_passes"]  # the prompt rode along with the first pass
        assert len(calls) == prefill + b.stats["forward_passes"] + b.stats["commit_passes"]
    assert any(len(p) >= sp.block_size for p, sp in zip(ps, params))


@pytest.mark.parametrize("shift", [True, False])
def test_output_alone_equals_output_in_a_batch_of_16_mixed_requests(shift):
    model = peaky_model(shift=shift, seed=3)
    ps, params = _mixed_requests(16)
    alone = [Engine(model).generate(p, sp) for p, sp in zip(ps, params)]
    together = Engine(model, max_batch_size=16).generate_batch(ps, params)
    assert [o.token_ids for o in together] == [o.token_ids for o in alone]
    assert [o.finish_reason for o in together] == [o.finish_reason for o in alone]
    # fewer slots than requests: requests join and leave at block boundaries while others run
    queued = Engine(model, max_batch_size=5).generate_batch(ps, params)
    assert [o.token_ids for o in queued] == [o.token_ids for o in alone]
    assert sum(o.stats["tokens"] for o in alone) > 100


def test_eos_ends_the_request_with_nothing_after_it():
    model = peaky_model(eos=None)
    p = prompts([6])[0]
    free = Engine(model).generate(p, SamplingParams(max_tokens=30))
    assert free.finish_reason == "length" and len(free.token_ids) == 30
    eos = free.token_ids[11]  # a token that comes up mid-block
    params = SamplingParams(max_tokens=30, stop_token_ids=[eos])
    out = Engine(model).generate(p, params)
    # positions after a committed EOS are never filled, so the tokens before it may differ
    # from the free run; the reference decoder has the same rule
    assert out.finish_reason == "stop" and eos not in out.token_ids
    assert (out.token_ids, "stop") == reference_decode(model, p, params)
    eos_model = peaky_model(eos=eos)
    assert Engine(eos_model).generate(p, SamplingParams(max_tokens=30)).token_ids == out.token_ids


def test_stop_strings_end_the_request_and_are_removed():
    model = peaky_model(eos=None)
    tok = CharTokenizer()
    model.config.eos_token_id = None
    p = prompts([6])[0]
    engine = Engine(model, tokenizer=tok)
    free = engine.generate(p, SamplingParams(max_tokens=30, stop_token_ids=[]))
    ids = [t for t in free.token_ids]
    assert free.text == tok.decode(ids)
    stop = tok.decode(ids[13:15])  # spans two tokens, likely two blocks with block size 8
    at = free.text.index(stop)
    events = list(engine.stream(p, SamplingParams(max_tokens=30, stop=[stop, "not-there"])))
    out = events[-1].output
    assert out.finish_reason == "stop" and out.text == free.text[:at] and out.stop_reason == stop
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == out.text
    assert sum(len(e.token_ids) for e in events if isinstance(e, TextDelta)) == len(out.token_ids)
    assert stop in tok.decode(out.token_ids) and stop not in tok.decode(out.token_ids[:-1])


def test_max_tokens_cuts_mid_block_and_zero_finishes_at_once():
    model = peaky_model(eos=None)
    engine = Engine(model)
    p = prompts([5])[0]
    out = engine.generate(p, SamplingParams(max_tokens=5))
    assert len(out.token_ids) == 5 and out.finish_reason == "length"
    out = engine.generate(p, SamplingParams(max_tokens=0))
    assert out.token_ids == [] and out.finish_reason == "length"


def test_constrained_slots_only_produce_allowed_tokens():
    model = peaky_model(eos=None)
    allowed = {0: [10, 11], 1: [12], 5: [20, 21, 22], 9: [30, 31], 17: [40]}
    engine = Engine(model, max_batch_size=4)
    ps = prompts([3, 8, 13, 6], seed=5)
    params = [
        SamplingParams(max_tokens=20, allowed=allowed),
        SamplingParams(max_tokens=20, allowed=allowed, temperature=2.0, seed=1),
        SamplingParams(max_tokens=20, allowed=allowed, policy="edit", threshold=0.3),
        SamplingParams(max_tokens=20, allowed=allowed, policy="ar"),
    ]
    for out in engine.generate_batch(ps, params):
        assert len(out.token_ids) == 20
        for i, ids in allowed.items():
            assert out.token_ids[i] in ids, (i, out.token_ids)


def test_step_events_show_every_generated_position_being_filled():
    model = peaky_model(eos=None)
    p = prompts([13])[0]
    events = list(Engine(model).stream(p, SamplingParams(max_tokens=12, threshold=0.7)))
    steps = [e for e in events if isinstance(e, StepEvent)]
    filled = {pos: t for e in steps for pos, t in zip(e.positions, e.tokens)}
    out = events[-1].output
    assert isinstance(events[-1], Finished)
    assert [filled[13 + i] for i in range(12)] == out.token_ids
    assert steps[0].block_start == 8 and min(steps[0].positions) >= 13  # prompt tail stays clean
    assert any(len(e.positions) > 1 for e in steps)  # parallel: several tokens in one pass


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(block_size=0), "block_size"),
        (dict(block_size=-3), "block_size"),
        (dict(threshold=0.0), "threshold"),
        (dict(threshold=1.5), "threshold"),
        (dict(max_tokens=-1), "max_tokens"),
        (dict(policy="beam"), "unknown policy"),
        (dict(top_p=0), "top_p"),
        (dict(temperature=-1), "temperature"),
        (dict(allowed={0: []}), "allowed"),
        (dict(logprobs=21), "logprobs"),
        (dict(logprobs=-1), "logprobs"),
        (dict(presence_penalty=3), "presence_penalty"),
        (dict(logit_bias={1: 200}), "logit_bias"),
        (dict(repetition_penalty=0), "repetition_penalty"),
        (dict(min_p=1.5), "min_p"),
        (dict(min_tokens=-1), "min_tokens"),
        (dict(min_tokens=9, max_tokens=8), "must not exceed max_tokens"),
        (dict(ignore_eos="yes"), "ignore_eos"),
        (dict(ignore_eos=True, grammar=json_grammar()), "grammar"),
    ],
)
def test_invalid_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kwargs)


def test_a_refused_setting_is_named_by_the_error_not_its_message():
    """``ParamError.param`` names the (first) bad field: the OpenAI layer reports it as ``param``
    without reading the message; a bad max_tokens is one problem, not also a min_tokens one."""
    from clover.engine import ParamError

    for kwargs, param in (
        (dict(policy="beam"), "policy"),
        (dict(threshold=2, top_p=0), "threshold"),
        (dict(min_tokens=9, max_tokens=8), "min_tokens"),
        (dict(stop_token_ids=[-1]), "stop_token_ids"),
        (dict(ignore_eos=True, grammar=json_grammar()), "ignore_eos"),
    ):
        with pytest.raises(ParamError) as e:
            SamplingParams(**kwargs)
        assert e.value.param == param, (kwargs, str(e.value))
    with pytest.raises(ParamError) as e:
        SamplingParams(max_tokens=-3)
    assert e.value.param == "max_tokens" and "min_tokens" not in str(e.value)
    engine = Engine(peaky_model())
    for params, param in (
        (SamplingParams(block_size=1000), "block_size"),
        (SamplingParams(stop=["x"]), "stop"),
        (SamplingParams(max_tokens=10**6), "max_tokens"),
    ):
        with pytest.raises(ParamError) as e:
            engine.add_request([1, 2], params)
        assert e.value.param == param


def test_invalid_requests_are_refused():
    engine = Engine(peaky_model())
    with pytest.raises(ValueError, match="max_block_size"):
        engine.add_request([1, 2], SamplingParams(block_size=1000))
    with pytest.raises(ValueError, match="vocabulary"):
        engine.add_request([1, 2], SamplingParams(allowed={0: [500]}))
    with pytest.raises(ValueError, match="token ids"):
        engine.add_request([1, 200])
    with pytest.raises(ValueError, match="tokenizer"):
        engine.add_request([1, 2], SamplingParams(stop=["x"]))
    with pytest.raises(ValueError, match="empty"):
        engine.add_request([])
    engine.add_request([1], request_id="a")
    with pytest.raises(ValueError, match="already"):
        engine.add_request([1], request_id="a")


def test_abort_frees_the_slot_at_once():
    model = peaky_model(eos=None)
    engine = Engine(model, max_batch_size=2)
    ids = [engine.add_request(p, SamplingParams(max_tokens=40)) for p in prompts([4, 9, 12])]
    engine.step()
    assert engine.num_active == 2 and engine.num_waiting == 1
    (batch,) = engine.scheduler.running()
    assert batch.cache.batch_size == 2
    out = engine.abort(ids[0])
    assert out.finish_reason == "abort" and engine.num_active == 1
    assert batch.cache.batch_size == 1  # its cache rows are gone now, not at the next step
    assert engine.abort("nobody") is None
    events = engine.step()
    assert any(isinstance(e, Finished) and e.request_id == ids[0] for e in events)
    assert engine.num_active == 2 and engine.num_waiting == 0  # the waiting request took the slot
    while engine.has_unfinished():
        engine.step()
    assert engine.stats()["requests"] == 3


def test_closing_a_stream_aborts_its_request():
    engine = Engine(peaky_model(eos=None))
    it = engine.stream([1, 2, 3], SamplingParams(max_tokens=50))
    next(it)
    it.close()
    engine.step()
    assert not engine.has_unfinished()


def test_float32_model_runs_and_uses_inference_mode():
    model = peaky_model(dtype=torch.float32)
    out = Engine(model).generate([1, 2, 3], SamplingParams(max_tokens=9))
    assert len(out.token_ids) <= 9 and out.stats["tpf"] > 0


def test_async_stream_yields_the_same_events_as_stream():
    import asyncio

    model = peaky_model(eos=None)
    params = SamplingParams(max_tokens=10)

    async def collect():
        return [ev async for ev in Engine(model).astream([1, 2, 3], params)]

    events = asyncio.run(collect())
    assert isinstance(events[-1], Finished)
    assert events[-1].output.token_ids == Engine(model).generate([1, 2, 3], params).token_ids


def test_logprobs_are_batch_invariant_and_cover_exactly_the_output_tokens():
    model = peaky_model(shift=False, seed=3)
    ps, params = _mixed_requests(8)
    for i, sp in enumerate(params):
        sp.logprobs = None if i % 3 == 0 else i % 4
    alone = [Engine(model).generate(p, sp) for p, sp in zip(ps, params)]
    together = Engine(model, max_batch_size=8).generate_batch(ps, params)
    for a, b, sp in zip(alone, together, params):
        if sp.logprobs is None:
            assert a.logprobs is None and b.logprobs is None
            continue
        assert [e.token_id for e in b.logprobs] == b.token_ids == a.token_ids
        assert [e.logprob for e in b.logprobs] == pytest.approx([e.logprob for e in a.logprobs], abs=1e-5)
        assert all(len(e.top) == sp.logprobs for e in b.logprobs)


def test_logprobs_of_constrained_slots_are_over_the_allowed_tokens():
    model = peaky_model(eos=None)
    allowed = {0: [10, 11], 3: [20, 21, 22]}
    out = Engine(model).generate(prompts([5])[0], SamplingParams(max_tokens=6, allowed=allowed, logprobs=5))
    for i, ids in allowed.items():
        e = out.logprobs[i]
        assert sorted(t for t, _ in e.top) == sorted(ids)  # nothing outside the slot's set
        assert sum(torch.tensor([q for _, q in e.top]).exp().tolist()) == pytest.approx(1.0, abs=1e-5)


def test_stream_text_deltas_carry_the_logprobs_of_their_tokens():
    model = peaky_model(eos=None)
    evs = list(
        Engine(model, tokenizer=CharTokenizer()).stream(prompts([3])[0], SamplingParams(max_tokens=20, logprobs=0))
    )
    deltas = [e for e in evs if isinstance(e, TextDelta)]
    out = evs[-1].output
    assert [e.token_id for d in deltas for e in d.logprobs] == out.token_ids
    assert all(e.top == [] for e in out.logprobs)


def test_prefix_policy_commits_left_to_right_runs():
    """``prefix``: the leftmost open position always, then following ones only while sure."""
    from clover.engine.policies import POLICIES, PassView

    cand = torch.tensor([[False, True, True, True, True, True], [True, True, False, False, False, False]])
    conf = torch.tensor([[-1, 0.2, 0.95, 0.99, 0.1, 0.99], [0.3, 0.1, -1, -1, -1, -1]])
    z = torch.zeros_like(cand)
    v = PassView(
        conf,
        conf,
        conf,
        z.long(),
        cand,
        z,
        torch.tensor([0.9, 0.9]),
        torch.ones(2, dtype=torch.long),
        torch.zeros(2, dtype=torch.long),
        torch.full((2, 1), -1),
    )
    got = POLICIES["prefix"].commit(v)
    assert got.tolist() == [[False, True, True, True, False, False], [True, False, False, False, False, False]]
