"""Clover under SGLang decodes what Clover's own engine decodes: the same committed tokens on 50
airspace test prompts under ``ar`` and the default policy (``prefix`` τ 0.97), the same logits
(within 1e-4 relative) in every pass, and each of 16 concurrent requests as it is alone.
The server runs in a subprocess (``clover.bench.sglang.SGLangServer``)."""

from __future__ import annotations

import pytest

MAX_TOKENS = 64


def clover_ids(model, prompts, policy: str, batch: int = 16) -> list[list[int]]:
    from clover.engine import Engine, SamplingParams

    outs = Engine(model, max_batch_size=batch).generate_batch(
        prompts, SamplingParams(max_tokens=MAX_TOKENS, policy=policy)
    )
    return [o.token_ids for o in outs]


@pytest.mark.parametrize("policy", ["ar", "prefix"])
def test_same_tokens_as_clover_engine(server, clover_model, cases, policy):
    want = clover_ids(clover_model, cases, policy)
    got, _ = server(policy).generate(cases, MAX_TOKENS, concurrency=16)
    same = [g == w for g, w in zip(got, want)]
    assert len(cases) == 50
    assert all(same), f"{sum(same)}/{len(same)} same; first differing prompt {same.index(False)}"
    assert sum(len(w) for w in want) > 10 * len(cases)  # real decoding, not empty replies


def test_logits_match_clover_model(server, clover_model, cases):
    from clover.bench.sglang import logit_error

    s = server("prefix")
    fig = logit_error(s, s.logits_dir, clover_model, cases[:3], MAX_TOKENS)
    assert fig["passes"] >= 6 and fig["tokens"] > 0
    assert fig["max_rel_logit_err"] <= 1e-4, fig


def test_concurrent_requests_equal_alone(server, cases):
    s = server("prefix")
    prompts = cases[:16]
    together, _ = s.generate(prompts, MAX_TOKENS, concurrency=16)
    alone, _ = s.generate(prompts, MAX_TOKENS, concurrency=1)
    assert together == alone
