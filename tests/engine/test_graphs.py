"""Decoding through CUDA graphs' static buffers (``clover.engine.graphs``), on the CPU: the
``EagerGraph`` stand-in runs each captured pass again through the same static cache, token
buffers and buckets, so the bucketing, padding, copying in and out and the fallbacks are checked
against the plain path (the slow reference) without a GPU."""

import logging
from pathlib import Path

import pytest
import torch

from clover.airspace.tools import AIRSPACE_TOOLS
from clover.data.chat import render
from clover.data.tokenizer import CloverTokenizer
from clover.engine import Engine, SamplingParams
from clover.engine.grammar import json_grammar
from clover.engine.graphs import DecodeGraphs, EagerGraph, bucket, width_for
from clover.model.io import load_model
from tests.engine.helpers import mixed_params, peaky_model, prompts

BUNDLED = Path(__file__).parents[2] / "clover" / "assets" / "default"


@pytest.fixture(scope="module")
def bundled():
    return load_model(BUNDLED), CloverTokenizer.load(BUNDLED)


def _chat(tok, msg):
    return tok.encode(render([{"role": "user", "content": msg}], AIRSPACE_TOOLS, add_generation_prompt=True))


def graph_engine(model, max_batch_size=4, max_width=None, min_width=16, **engine_kw) -> Engine:
    """An engine whose passes go through the static buffers, replayed eagerly (``EagerGraph``)."""
    e = Engine(model, max_batch_size=max_batch_size, **engine_kw)
    e.runner.graphs = DecodeGraphs(model, max_batch_size, max_width, min_width, capture=EagerGraph)
    return e


def tokens(outs):
    return [o.token_ids for o in outs]


def test_buckets_and_widths():
    assert [bucket(n, 16) for n in (1, 2, 3, 4, 5, 9, 16)] == [1, 2, 4, 4, 8, 16, 16]
    assert bucket(17, 16) is None and bucket(3, 2) is None
    with pytest.raises(ValueError, match="at least one row"):
        bucket(0, 16)
    assert width_for(40, 4096, 16) == 64 and width_for(40, 4096) == 1024 and width_for(3000, 4096) == 4096
    assert width_for(5000, 4096) is None and width_for(70, 96, 16) == 96


def test_a_batch_of_three_runs_in_bucket_four_and_padding_rows_change_nothing():
    """Three rows of unequal histories: the graph of bucket 4 gives model.step's logits for the
    three, whatever the padding row holds (its tokens, its cache row)."""
    m = peaky_model()
    bs = 4
    caches, xs = [], []
    for p in prompts([5, 9, 14], seed=1):
        c, tail = m.prefill(torch.tensor([p]), bs)
        caches.append(c)
        xs.append(torch.cat([tail[0], torch.full((bs - tail.shape[1],), m.config.mask_token_id)]))
    from clover.model import ModelCache

    for c in caches:  # the engine gives every row of a shift model a clean logit (Runner.prefill)
        if c.last_logits is None:
            c.last_logits = torch.zeros(1, m.config.vocab_size, dtype=torch.float64)
    x = torch.stack(xs)
    graphs = DecodeGraphs(m, 4, min_width=16, capture=EagerGraph)
    with torch.inference_mode():
        ref = m.step(ModelCache.cat(caches), denoise=x, block_size=bs)
        cache = ModelCache.cat(caches)
        got = graphs.run(cache, x, None, bs)
        static = graphs.caches[bs]
        assert list(static.graphs) == [(0, 4)] and static.rows == 4 and got.shape == ref.shape
        torch.testing.assert_close(got, ref, rtol=0, atol=1e-10)
        static.tokens[0][3] = torch.randint(0, 96, (bs,))  # the padding row: other tokens, another cache row
        for f in static.layers:
            for t in f.values():
                t[3] = torch.randn_like(t[3].double()).to(t.dtype)
        again = graphs.run(cache, x, None, bs)
        torch.testing.assert_close(again, ref, rtol=0, atol=1e-10)
        assert graphs.stats()["graph_passes"] == 2 and graphs.stats()["graph_eager_passes"] == 0


@pytest.mark.parametrize("fuse", [True, False])
def test_same_tokens_as_the_plain_path_at_batch_one(fuse):
    m = peaky_model()
    p = prompts([11], seed=2)
    params = SamplingParams(max_tokens=40, block_size=4, policy="threshold", threshold=0.7, ignore_eos=True)
    ref = Engine(m, fuse=fuse).generate_batch(p, params)
    e = graph_engine(m, fuse=fuse)
    got = e.generate_batch(p, params)
    assert tokens(got) == tokens(ref) and len(ref[0].token_ids) == 40
    s = e.stats()
    assert s["graph_passes"] > 0 and s["graph_eager_passes"] == 0
    # the history outgrew the first width (16 slots): wider static caches, graphs captured again
    assert e.runner.graphs.caches[4].width == 64 and s["graph_captures"] > 2
    kinds = {k for k, _ in e.runner.graphs.caches[4].graphs}
    assert kinds == ({0, 4} if fuse else {0})  # the fused commit + denoise pass too


def test_same_tokens_as_the_plain_path_over_several_batches():
    """Every policy, two block sizes (a static cache each), sampled rows, requests joining and
    leaving (new caches copied in, partial commits written into the held one), batches of 1..4."""
    m = peaky_model()
    ps = prompts([3, 9, 14, 21, 6, 11, 2, 17, 8], seed=3)
    params = mixed_params(9, max_tokens=lambda i: 6 + (5 * i) % 23)
    ref = Engine(m, max_batch_size=4).generate_batch(ps, params)
    e = graph_engine(m)
    assert tokens(e.generate_batch(ps, params)) == tokens(ref)
    graphs = e.runner.graphs
    assert set(graphs.caches) == {4, 8} and graphs.stats()["graph_eager_passes"] == 0
    assert {rows for c in graphs.caches.values() for _, rows in c.graphs} >= {1, 2}
    # and again, with the static caches and graphs of the first run in place
    assert tokens(e.generate_batch(ps, params)) == tokens(ref)


def test_grammar_and_prefix_cache_decode_through_graphs(bundled):
    """Neither changes the pass: a grammar acts on its logits, the prefix cache on prefill. The
    bundled model and tokenizer, a prompt and a longer one that starts with it."""
    model, tok = bundled
    first = _chat(tok, "Recall drone 17.")
    ids = [first, first + tok.encode(" Then assign drone 8 to survey the north pier.")]
    g = json_grammar({"type": "object", "properties": {"drone_id": {"type": "string"}}, "required": ["drone_id"]})
    params = [SamplingParams(max_tokens=24, block_size=8, grammar=g), SamplingParams(max_tokens=24, block_size=8)]
    plain = Engine(model, tok, prefix_cache_mb=64)
    ref = [plain.generate(i, p) for i, p in zip(ids, params)]  # the second turn hits the first's blocks
    e = graph_engine(model, prefix_cache_mb=64)
    e.tokenizer = tok
    got = [e.generate(i, p) for i, p in zip(ids, params)]
    assert tokens(got) == tokens(ref) and g.accepts(got[0].text)
    s = e.stats()
    assert s["prefix_cache_hits"] >= 1 and s["graph_passes"] > 0 and s["graph_eager_passes"] == 0


def test_unsupported_passes_fall_back_to_eager_and_say_why_once(caplog):
    m = peaky_model()
    ps = prompts([5, 9, 6], seed=5)
    params = [SamplingParams(max_tokens=n, block_size=4, policy="ar", ignore_eos=True) for n in (8, 16, 24)]
    ref = Engine(m, max_batch_size=3).generate_batch(ps, params)
    e = Engine(m, max_batch_size=3)
    e.runner.graphs = DecodeGraphs(m, 2, capture=EagerGraph, min_width=16)  # buckets 1 and 2 only
    with caplog.at_level(logging.WARNING, logger="clover.engine.graphs"):
        assert tokens(e.generate_batch(ps, params)) == tokens(ref)
    why = "a batch over the largest graph bucket (2 rows)"
    s = e.stats()
    assert s["graph_eager_why"][why] > 1 and s["graph_passes"] > 0  # batches of 2 and 1 when rows leave
    said = [r.getMessage() for r in caplog.records]
    assert said.count(f"clover: a decoding pass runs without CUDA graphs: {why}") == 1
    # a history past the widest graph
    e = graph_engine(m, max_width=24)
    assert tokens(e.generate_batch(ps, params)) == tokens(ref)
    s = e.stats()
    assert set(s["graph_eager_why"]) == {"a history past the graphs' widest pass (24 slots)"}
    assert s["graph_passes"] > 0 and s["graph_eager_passes"] > 0


def test_a_cache_of_another_kind_runs_eagerly():
    m = peaky_model()
    graphs = DecodeGraphs(m, 4, capture=EagerGraph)
    assert graphs.run(object(), torch.zeros(1, 4, dtype=torch.long), None, 4) is None
    assert graphs.stats()["graph_eager_why"] == {"the back end keeps its own cache": 1}


def test_cuda_graphs_need_a_cuda_model():
    m = peaky_model()
    with pytest.raises(ValueError, match="CUDA graphs need the model on a CUDA device; this one is on cpu"):
        Engine(m, cuda_graphs=True)
    with pytest.raises(ValueError, match="CUDA graphs run the PyTorch model"):
        DecodeGraphs(object(), capture=EagerGraph)


def test_a_pass_whose_capture_fails_runs_eagerly_and_is_not_captured_again(caplog):
    m = peaky_model()
    tries = []

    def failing(fn, pool=None):
        tries.append(fn)
        raise RuntimeError("operation not permitted when stream is capturing")

    p = prompts([6], seed=6)
    params = SamplingParams(max_tokens=16, block_size=4, policy="ar", ignore_eos=True)
    ref = Engine(m).generate_batch(p, params)
    e = Engine(m)
    e.runner.graphs = DecodeGraphs(m, 1, min_width=16, capture=failing)
    with caplog.at_level(logging.WARNING, logger="clover.engine.graphs"):
        assert tokens(e.generate_batch(p, params)) == tokens(ref)
    s = e.stats()
    assert s["graph_passes"] == 0 and s["graph_captures"] == 0 and len(tries) == 2  # one per pass kind, once
    assert s["graph_eager_why"] == {"its graph could not be captured (logged)": s["graph_eager_passes"]}
    assert sum("stream is capturing" in r.getMessage() for r in caplog.records) == 2
