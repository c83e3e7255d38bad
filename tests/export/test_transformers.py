"""The exported folders loaded by transformers in an interpreter without clover: logits, greedy
decoding and LoRA against Clover's own model and engine."""

from __future__ import annotations

import pytest
import torch

from clover.bench.exactness import rel_err
from clover.bench.hf_export import (
    MAX_TOKENS,
    TINY_TOKENS,
    engine_tokens,
    generate_job,
    logit_errors,
    run_hf,
)

LOGIT_RTOL = 1e-5  # max |hf - clover| / max |clover|, fp32


@pytest.mark.parametrize("which", ["bundled", "tiny"])
def test_loads_without_clover(which, request):
    res = request.getfixturevalue(which)["result"]
    assert res["clover_blocked"] and res["class"] == "CloverForCausalLM"


@pytest.mark.parametrize("which", ["bundled", "tiny"])
def test_logits_match_clover(which, request):
    d = request.getfixturevalue(which)
    errs = logit_errors(d["model"], d["cases"], d["result"]["logits"])
    assert max(errs) <= LOGIT_RTOL, errs


def test_bundled_default_policy_matches_engine(bundled):
    want = engine_tokens(bundled["model"], bundled["tok"], bundled["prompts"], bundled["policy"], MAX_TOKENS)
    got = bundled["result"]["generate"][0]
    assert len(got) == 20 and sum(a == b for a, b in zip(got, want)) == 20


def test_bundled_ar_matches_engine(bundled):
    prompts = bundled["prompts"][:5]
    assert bundled["result"]["generate"][1] == engine_tokens(
        bundled["model"], bundled["tok"], prompts, "ar", MAX_TOKENS
    )


@pytest.mark.slow
def test_bundled_ar_matches_engine_on_20_prompts(bundled, tmp_path):
    job = {"generate": [generate_job(bundled["prompts"], "ar", MAX_TOKENS)]}
    got = run_hf(bundled["export"], job, tmp_path)["generate"][0]
    want = engine_tokens(bundled["model"], bundled["tok"], bundled["prompts"], "ar", MAX_TOKENS)
    assert len(got) == 20 and sum(a == b for a, b in zip(got, want)) == 20


def test_tiny_policies_match_engine(tiny):
    for (policy, bs, n), got in zip(tiny["runs"], tiny["result"]["generate"], strict=True):
        want = engine_tokens(tiny["model"], None, tiny["prompts"][:n], policy, TINY_TOKENS, bs)
        assert len(got) == n and got == want, (policy, bs)
    assert any(row[-1:] == [5] for row in tiny["result"]["generate"][0])  # a stop token ended a row, kept


def test_chat_template_renders_clover_prompts(bundled):
    assert bundled["result"]["chats"] == bundled["prompts"]


def test_lora_step_and_back_to_clover(bundled, tmp_path):
    from clover.convert import convert
    from clover.model.io import load_model

    lora = bundled["result"]["lora"]
    assert lora["trainable"] > 0 and lora["lora_changed"] and lora["base_unchanged"]
    assert all(torch.isfinite(torch.tensor(lora["loss"]))) and lora["loss"][1] < lora["loss"][0]
    convert(bundled["root"] / "lora_merged", tmp_path / "clover", progress=False)  # the fine-tuned model, back
    model = load_model(tmp_path / "clover")
    x0 = lora["x0"]
    with torch.no_grad():
        want = model.forward_train(x0, x0).logits
    assert rel_err(lora["merged_logits"], want) <= LOGIT_RTOL


def test_automodel_gives_the_final_hidden_states(bundled):
    name, hidden = bundled["result"]["hidden"]
    x0 = bundled["cases"][0][0]
    with torch.no_grad():
        want = bundled["model"].forward_train(x0, x0, return_hidden=True).hidden  # no shift in this model
    assert name == "CloverModel" and rel_err(hidden, want) <= LOGIT_RTOL
