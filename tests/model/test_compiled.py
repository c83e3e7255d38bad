"""Compiled decoding passes (``compile_passes``) against the eager ones they replace: the same
logits within fp32 rounding and the same caches over every pass kind, one graph per kind with
no graph break (no host sync inside a pass), and the same tokens through the engine."""

import copy

import pytest
import torch
from torch._dynamo.utils import counters

from clover.bench.exactness import perturb
from clover.engine import Engine, SamplingParams
from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD
from clover.model import CloverForBlockDiffusion, ModelCache, preset
from clover.model.cache import AttnCache
from tests.engine.helpers import CharTokenizer, prompts

BS = 16  # denoise passes take the MoE's dense path (16 tokens), fused ones its grouped GEMM (32)
# one layer of each kind: every graph compiles in half the time of the tiny preset's four layers
LAYERS = dict(num_hidden_layers=2, layer_types=["linear_attention", "full_attention"])


def _model(seed=0):
    torch.manual_seed(seed)
    return perturb(CloverForBlockDiffusion(preset("tiny", block_size=BS, initializer_range=0.2, **LAYERS)).eval())


def _script(model):
    """Every pass kind decoding uses: rows of unequal and of equal history, denoise, fused commit +
    denoise, a plain commit. Returns the logits of each pass and the final caches."""
    g = torch.Generator().manual_seed(1)
    tok = lambda n, b=1: torch.randint(4, model.config.vocab_size, (b, n), generator=g)
    out = []
    with torch.inference_mode():
        rows = [model.prefill(tok(n), BS)[0] for n in (2 * BS, 3 * BS)]
        cache = ModelCache.cat(rows)  # unequal histories: masked attention
        for _ in range(2):
            out.append(model.step(cache, denoise=tok(BS, 2), block_size=BS))
            out.append(model.step(cache, commit=tok(BS, 2), denoise=tok(BS, 2), block_size=BS))
        model.step(cache, commit=tok(BS, 2), block_size=BS)
        one = cache.select([1])  # one row: every query sees every key
        for _ in range(3):
            out.append(model.step(one, denoise=tok(BS), block_size=BS))
            out.append(model.step(one, commit=tok(BS), denoise=tok(BS), block_size=BS))
    return out, [cache, one]


def _state(cache: ModelCache) -> list[torch.Tensor]:
    L = int(cache.lengths.max())
    parts = [cache.lengths]
    for c in cache.layers:
        parts += [c.k[:, :L], c.v[:, :L]] if isinstance(c, AttnCache) else [c.S, c.tail]
    return parts


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool((a.double() - b.double()).abs().max() <= 1e-5 * max(1.0, float(b.abs().max())))


def test_compiled_passes_match_eager_with_one_graph_per_kind():
    eager = _model()
    compiled = copy.deepcopy(eager)
    compiled.compile_passes()
    torch._dynamo.reset()
    counters.clear()
    got, got_caches = _script(compiled)
    assert not counters["graph_break"], dict(counters["graph_break"])  # no host sync or fallback inside
    assert counters["stats"]["unique_graphs"] >= 1  # the passes did go through the compiler
    want, want_caches = _script(eager)
    for g, w in zip(got, want):
        assert g.shape == w.shape and _close(g, w)
    for gc, wc in zip(got_caches, want_caches):
        for g, w in zip(_state(gc), _state(wc)):
            assert g.shape == w.shape and _close(g.float(), w.float())


def test_compile_passes_off_goes_back_to_eager():
    m = _model()
    m.compile_passes()
    assert m.compiled_pass is not None
    m.compile_passes(False)
    assert m.compiled_pass is None


@pytest.mark.parametrize("policy", ["ar", DEFAULT_POLICY])
def test_engine_tokens_equal_compiled(policy):
    eager = _model(seed=3)
    with torch.no_grad():
        eager.lm_head.weight.mul_(16.0)  # peaked logits: several commits per pass, no near-ties
    compiled = copy.deepcopy(eager)
    compiled.compile_passes()
    params = SamplingParams(max_tokens=40, policy=policy, threshold=DEFAULT_THRESHOLD, stop_token_ids=[])
    ps = prompts([5, 21, 33, 40, 9, 17], vocab=90)
    # one row at a time: the pass kinds the first test compiled (graphs are shared between models)
    outs = [Engine(m, CharTokenizer(), max_batch_size=1).generate_batch(ps, params) for m in (eager, compiled)]
    assert [o.token_ids for o in outs[0]] == [o.token_ids for o in outs[1]]
