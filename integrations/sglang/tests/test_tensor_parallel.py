"""Clover under SGLang with ``--tp-size 2``: each rank holds half the heads and expert widths
(``clover_sglang.sharding``) and the two sum their outputs over SGLang's tensor-parallel group;
the committed tokens are Clover's engine's (as with one rank: test_exactness.py), 16 requests in
flight, and every pass's logits within 1e-4 relative of Clover's model. On a CPU the ranks sum
over torch.distributed's gloo back end (``clover.bench.sglang.cpu_parallel_env``)."""

from __future__ import annotations

from test_exactness import MAX_TOKENS, clover_ids

N_PROMPTS = 16


def test_two_ranks_commit_clover_engines_tokens(server, clover_model, cases):
    want = clover_ids(clover_model, cases[:N_PROMPTS], "prefix")
    got, _ = server("prefix", tp_size=2).generate(cases[:N_PROMPTS], MAX_TOKENS, concurrency=16)
    same = [g == w for g, w in zip(got, want)]
    assert all(same), f"{sum(same)}/{len(same)} same; first differing prompt {same.index(False)}"
    assert sum(len(w) for w in want) > 10 * N_PROMPTS  # real decoding, not empty replies


def test_two_ranks_logits_match_clover_model(server, clover_model, cases):
    from clover.bench.sglang import logit_error

    s = server("prefix", tp_size=2)
    fig = logit_error(s, s.logits_dir, clover_model, cases[:2], MAX_TOKENS)
    assert fig["passes"] >= 4 and fig["tokens"] > 0
    assert fig["max_rel_logit_err"] <= 1e-4, fig
