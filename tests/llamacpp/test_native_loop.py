"""The llama.cpp back end's block loop (``clover_denoise_block``, ``clover.engine.native_loop``): a
block's passes, the greedy choice, the policy's commit and the commit itself run in the library,
and give the same tokens, the same ``StepEvent`` per pass and the same pass counts as the engine's
pass-by-pass Python loop (the reference), under every policy the loop implements, one request at a
time and sixteen in one batch; requests the loop does not cover keep the Python loop."""

from __future__ import annotations

import pytest

from clover.engine import Engine, SamplingParams
from clover.engine.outputs import Finished, StepEvent

TEXTS = [
    "Create a no-fly zone named Alpha at 47.1, 8.5 with radius 500 m.",
    "Recall drone D-12.",
    "Hello!",
    "What is the altitude limit near the airport?",
    "Send drone 7 to the hangar.",
    "List the active zones.",
    "Thanks, that is all.",
    "Is zone Bravo still active?",
    "Delete the zone named Alpha.",
    "Where is drone 3 now?",
    "Hi there, who are you?",
    "Set the speed of drone 4 to 12 m/s.",
    "Create a zone Charlie at 46.9, 7.4, radius 2 km.",
    "Recall every drone.",
    "Good morning.",
    "How many drones are flying?",
]


@pytest.fixture(scope="module")
def setup(tmp_path_factory, libclover):
    from clover.backends.llamacpp import LlamaCppClover
    from clover.data import default_model_dir
    from clover.data.chat import render_chat
    from clover.data.tokenizer import CloverTokenizer
    from clover.export.gguf import export_gguf

    out = tmp_path_factory.mktemp("native-loop") / "model.gguf"
    export_gguf(default_model_dir(), out, "f32")
    tok = CloverTokenizer.load(default_model_dir())
    prompts = [tok.encode(render_chat([{"role": "user", "content": t}], None, True)) for t in TEXTS]
    return LlamaCppClover(out), tok, prompts


def _decode(lm, tok, prompts, params, batch: int, native: bool):
    """Each request's StepEvents (pass, positions, tokens), tokens and passes, and the most rows
    the library's block loop was handed at once (0: it never ran)."""
    lm.native_loop = native
    calls = []  # the rows of each call of the block loop
    inner = lm.denoise_blocks
    lm.denoise_blocks = lambda cache, *a, **k: calls.append(cache.batch_size) or inner(cache, *a, **k)
    try:
        engine = Engine(lm, tok, max_batch_size=batch)
        got = {}
        for s in range(0, len(prompts), batch):
            ids = {
                engine.add_request(p, sp, f"r{s + i}"): []
                for i, (p, sp) in enumerate(zip(prompts[s : s + batch], params[s : s + batch]))
            }
            left = set(ids)
            while left:
                for ev in engine.step():
                    if isinstance(ev, StepEvent):
                        ids[ev.request_id].append((ev.step, ev.block_start, ev.positions, ev.tokens))
                    elif isinstance(ev, Finished):
                        o = ev.output
                        got[o.request_id] = (ids[o.request_id], o.token_ids, o.finish_reason, o.stats["forward_passes"])
                        left.discard(o.request_id)
    finally:
        del lm.denoise_blocks
        lm.native_loop = True
    return got, max(calls, default=0)


def _params(policy: str, n: int) -> list[SamplingParams]:
    """Settings that vary by request: lengths that end mid-block, a stop token of the request's own."""
    return [
        SamplingParams(policy=policy, max_tokens=24 + 7 * (i % 4), stop_token_ids=[13] if i % 5 == 3 else None)
        for i in range(n)
    ]


@pytest.mark.parametrize("policy", ["ar", "prefix", "threshold"])
@pytest.mark.parametrize("batch", [1, 16])
def test_the_block_loop_decodes_as_the_python_loop(setup, policy, batch):
    lm, tok, prompts = setup
    prompts = prompts if batch > 1 else prompts[:3]
    params = _params(policy, len(prompts))
    ref, ref_rows = _decode(lm, tok, prompts, params, batch, native=False)
    got, rows = _decode(lm, tok, prompts, params, batch, native=True)
    assert ref_rows == 0 and rows == batch
    assert got == ref
    assert sum(len(t[1]) for t in ref.values()) > 8 * len(prompts)  # real replies, several blocks' passes


def test_the_prefix_cache_keeps_the_prompts_the_block_loop_commits(setup):
    """A fresh request's prompt blocks, committed in the block loop's first pass, reach the prefix
    cache as the Python loop's fused pass leaves them: a second round of the same prompts hits it
    as often, with the same tokens."""
    lm, tok, prompts = setup
    prompts = [p * 3 for p in prompts[:3]]  # prompts of whole blocks
    out = {}
    for native in (False, True):
        lm.native_loop = native
        engine = Engine(lm, tok, max_batch_size=1, prefix_cache_mb=64)
        ids = [[engine.generate(p, SamplingParams(max_tokens=12)).token_ids for p in prompts] for _ in range(2)]
        out[native] = ids, {k: v for k, v in engine.stats().items() if k.startswith("prefix_cache_hit")}
    lm.native_loop = True
    assert out[True] == out[False] and out[True][1]["prefix_cache_hits"] > 0


def test_requests_the_loop_does_not_cover_keep_the_python_loop(setup):
    """A request the block loop does not cover (sampled, logprobs, a penalty, a banned stop, edit,
    fixed) is never handed to the library, and a batch with one in it runs pass by pass, with the
    same tokens as with the loop off."""
    from clover.engine.native_loop import native_policy

    lm, tok, prompts = setup
    others = [
        SamplingParams(max_tokens=20, temperature=0.8, seed=1),
        SamplingParams(max_tokens=20, logprobs=2),
        SamplingParams(max_tokens=20, presence_penalty=0.5),
        SamplingParams(max_tokens=20, min_tokens=4),
        SamplingParams(max_tokens=20, ignore_eos=True),
        SamplingParams(max_tokens=20, policy="edit"),
        SamplingParams(max_tokens=20, policy="fixed"),
    ]
    engine = Engine(lm, tok)
    covered = engine._make_request(prompts[0], SamplingParams(max_tokens=20), "a")
    assert native_policy(covered) == "prefix"
    for sp in others:
        assert native_policy(engine._make_request(prompts[1], sp, "b")) is None, sp
        params = [SamplingParams(max_tokens=20), sp]
        ref, _ = _decode(lm, tok, prompts[:2], params, 2, native=False)
        got, rows = _decode(lm, tok, prompts[:2], params, 2, native=True)
        assert got == ref and rows <= 1, sp  # only the covered request, while it was alone


def test_the_library_refuses_a_policy_it_does_not_run(setup):
    import numpy as np

    lm, _, _ = setup
    cache, bs, mask = lm.native.new_cache(), 8, lm.config.mask_token_id
    x = np.full(bs, mask, dtype=np.int32)
    on, none = np.ones(bs, dtype=bool), np.zeros(0, dtype=np.int32)
    with pytest.raises(ValueError, match="not 'edit'"):
        lm.native.denoise_block(cache, none, x, on, on, bs, none, "edit", 0.9)
    with pytest.raises(ValueError, match="exceeds block size"):
        lm.native.denoise_block(cache, none, np.full(16, mask, np.int32), *[np.ones(16, bool)] * 2, bs, none, "ar", 0.9)
    pass_of, n, seconds = lm.native.denoise_block(cache, none, x, on, on, bs, none, "ar", 0.9)
    assert n == bs and sorted(pass_of.tolist()) == list(range(bs)) and seconds > 0  # ar: one position a pass
    assert (x != mask).all() and cache.length == 0  # a denoise loop leaves the cache as it was


def test_the_stage_profile_splits_the_block_loop_from_its_passes(setup):
    """``clover.bench.stages`` charges the passes inside the library's block loop to the model's
    pass, the loop's own time to a row of its own, and undoes its wrappers afterwards."""
    from clover.bench.stages import BLOCK_LOOP, PASS, measure_stages

    lm, tok, prompts = setup
    r = measure_stages(lm, tok, [(p, None) for p in prompts[:2]], SamplingParams(max_tokens=16), 2)
    assert r["stages_ms"][PASS] > r["stages_ms"][BLOCK_LOOP] > 0
    assert 0 < r["outside_pass_ms_per_row_pass"] < r["outside_pass_ms"] < r["step_ms"]
    assert "denoise_blocks" not in vars(lm) and "denoise_block" not in vars(lm.native)
