"""Prompt log-probabilities (``clover.engine.scoring``): the batched scorer equals the incremental
reference, and equals what the ``ar`` decode itself reports for the tokens it generated."""

import math

import pytest
import torch

import clover.engine.scoring as scoring
from clover.engine import Engine, SamplingParams
from clover.engine.scoring import prompt_logprobs, prompt_logprobs_reference

from .helpers import peaky_model, prompts


def _close(a, b, tol=1e-6):
    assert len(a) == len(b) and a[0] is None and b[0] is None
    for x, y in zip(a[1:], b[1:]):
        assert x.token_id == y.token_id and math.isclose(x.logprob, y.logprob, abs_tol=tol)
        assert [t for t, _ in x.top] == [t for t, _ in y.top]
        assert all(math.isclose(p, q, abs_tol=tol) for (_, p), (_, q) in zip(x.top, y.top))


@pytest.mark.parametrize("shift", [True, False])
@pytest.mark.parametrize("bs", [4, 8])
def test_batched_scoring_equals_the_incremental_reference(shift, bs, monkeypatch):
    model = peaky_model(shift=shift)
    monkeypatch.setattr(scoring, "MAX_NOISY_TOKENS", 3 * bs)  # several model calls per prompt
    for ids in prompts([1, 2, bs, bs + 1, 3 * bs + 2], seed=1):
        fast = prompt_logprobs(model, ids, bs, top=3)
        assert len(fast) == len(ids)
        if len(ids) > 1:
            _close(fast, prompt_logprobs_reference(model, ids, bs, top=3))
            assert all(e.logprob <= 0 and len(e.top) == 3 and e.top[0][1] >= e.logprob for e in fast[1:])


@pytest.mark.parametrize("shift", [True, False])
def test_scores_equal_the_ar_decodes_own_logprobs(shift):
    """Scoring prompt + the greedy ``ar`` answer gives the answer's tokens the log-probabilities
    the decode chose them with: both condition each token on exactly the same view."""
    model = peaky_model(shift=shift)
    engine = Engine(model, max_batch_size=4)
    for prompt in prompts([5, 8, 11], seed=2):
        out = engine.generate(prompt, SamplingParams(max_tokens=12, policy="ar", block_size=8, logprobs=2))
        scored = prompt_logprobs(model, prompt + out.token_ids, 8, top=2)[len(prompt) :]
        for dec, sc in zip(out.logprobs, scored):
            assert dec.token_id == sc.token_id and math.isclose(dec.logprob, sc.logprob, abs_tol=1e-6)
            assert [t for t, _ in dec.top] == [t for t, _ in sc.top]


def test_engine_reports_prompt_logprobs_with_or_without_generating():
    model = peaky_model()
    engine = Engine(model, max_batch_size=4)
    ids = prompts([13], seed=3)[0]
    want = prompt_logprobs(model, ids, 8, top=1)
    only, more, plain = engine.generate_batch(
        [ids, ids, ids],
        [
            SamplingParams(max_tokens=0, prompt_logprobs=1, block_size=8),
            SamplingParams(max_tokens=6, prompt_logprobs=1, block_size=8),
            SamplingParams(max_tokens=6, block_size=8),
        ],
    )
    assert only.token_ids == [] and only.finish_reason == "length"
    _close(only.prompt_logprobs, want)
    _close(more.prompt_logprobs, want)
    assert plain.prompt_logprobs is None and more.token_ids == plain.token_ids
    with pytest.raises(ValueError, match="prompt_logprobs must be an integer"):
        SamplingParams(prompt_logprobs=21)


def test_a_waiting_scoring_request_can_be_aborted():
    engine = Engine(peaky_model(), max_batch_size=4)
    rid = engine.add_request([1, 2, 3], SamplingParams(max_tokens=0, prompt_logprobs=0))
    assert engine.has_unfinished()
    assert engine.abort(rid).finish_reason == "abort"
    events = engine.step()
    assert [e.output.finish_reason for e in events] == ["abort"] and not engine.has_unfinished()


def test_scoring_runs_under_inference_mode_and_leaves_the_model_unchanged():
    model = peaky_model(dtype=torch.float32)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    prompt_logprobs(model, list(range(20)), 8)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_outputs_name_what_stopped_them():
    """``stop_reason`` (vLLM's field): the stop token id, or the stop string; with logprobs, the
    stop token's own entry (echo scoring counts it as the generated token)."""
    model = peaky_model()
    engine = Engine(model, max_batch_size=4)
    out = engine.generate([1, 2, 3], SamplingParams(max_tokens=8, logprobs=1, logit_bias={5: 100}))
    assert out.finish_reason == "stop" and out.token_ids == [] and out.stop_reason == 5
    assert out.stop_logprob.token_id == 5 and out.logprobs == []
    plain = engine.generate([1, 2, 3], SamplingParams(max_tokens=4, logit_bias={5: -100}))  # runs to max_tokens
    assert plain.stop_reason is None and plain.stop_logprob is None


@pytest.mark.parametrize("shift", [True, False])
@pytest.mark.parametrize("bs", [4, 8])
def test_continuations_scored_in_one_call_equal_the_reference_and_the_whole_text(shift, bs, monkeypatch):
    """``continuation_logprobs`` (all continuations at once, ragged, crossing blocks) gives each
    token what the incremental reference gives it, and what ``prompt_logprobs`` gives the same
    token scored as part of context + continuation."""
    from clover.engine.scoring import continuation_logprobs, continuation_logprobs_reference

    model = peaky_model(shift=shift)
    monkeypatch.setattr(scoring, "MAX_NOISY_TOKENS", 2 * bs)  # several model calls
    for context in prompts([1, bs - 1, bs, 2 * bs + 3], seed=4):
        conts = prompts([1, 2, bs + 1, 3], seed=len(context))
        fast = continuation_logprobs(model, context, conts, bs)
        slow = continuation_logprobs_reference(model, context, conts, bs)
        assert [len(f) for f in fast] == [len(c) for c in conts] == [len(s) for s in slow]
        for f, s, c in zip(fast, slow, conts):
            whole = [e.logprob for e in prompt_logprobs(model, context + c, bs)[len(context) :]]
            assert all(math.isclose(x, y, abs_tol=1e-5) for x, y in zip(f, s)), (f, s)
            assert all(math.isclose(x, y, abs_tol=1e-5) for x, y in zip(f, whole)), (f, whole)
        # ``last``: one more entry, the total probability of any of its ids there
        last = [[3, 5], [7], [3, 5, 7, 9], [2]][: len(conts)]
        fast, slow = (
            f(model, context, conts, bs, last) for f in (continuation_logprobs, continuation_logprobs_reference)
        )
        for f, s, c, ids in zip(fast, slow, conts, last):
            assert len(f) == len(c) + 1 and all(math.isclose(x, y, abs_tol=1e-5) for x, y in zip(f, s))
            each = [continuation_logprobs(model, context, [c + [i]], bs)[0][-1] for i in ids]
            assert math.isclose(f[-1], math.log(sum(math.exp(x) for x in each)), abs_tol=1e-5)
        # ``final_only``: that final entry alone, the same number
        for f in (continuation_logprobs, continuation_logprobs_reference):
            finals = f(model, context, conts, bs, last, final_only=True)
            assert all(len(x) == 1 and math.isclose(x[0], y[-1], abs_tol=1e-5) for x, y in zip(finals, fast))
