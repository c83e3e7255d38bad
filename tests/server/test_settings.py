"""The decoding settings are declared once (``clover.api.settings.DECODING``): the request schemas,
their mapping onto ``SamplingParams`` and the command line's flags and help all follow it, and
every default is ``SamplingParams``' own (``DEFAULT_POLICY`` / ``DEFAULT_THRESHOLD``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from clover.api.responses import ResponsesRequest
from clover.api.schemas import ChatRequest, CompletionRequest, DecisionRequest
from clover.api.settings import BLOCK_SETTINGS, DECODING, add_decoding_flags, decoding_values
from clover.commands.common import Parser, add_decoding_args, sampling_params
from clover.engine import POLICIES, SamplingParams
from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD


def test_every_schema_takes_every_setting():
    names = {s.name for s in DECODING}
    for schema in (ChatRequest, CompletionRequest, ResponsesRequest):
        assert names <= set(schema.model_fields), schema
    assert {s.name for s in BLOCK_SETTINGS} <= set(DecisionRequest.model_fields)
    req = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}], policy="ar", top_k=3)
    assert decoding_values(req) == {"policy": "ar", "top_k": 3}


def test_flags_default_to_the_engines_settings_and_list_the_registered_policies():
    p = Parser(prog="clover")
    add_decoding_args(p)
    args = p.parse_args([])
    params = sampling_params(args)
    assert (params.policy, params.threshold) == (DEFAULT_POLICY, DEFAULT_THRESHOLD)
    assert sampling_params(p.parse_args(["--policy", "ar", "--top-k", "5"])).top_k == 5
    text = p.format_help()
    assert ", ".join(sorted(POLICIES)) in " ".join(text.split())
    assert f"(default: {DEFAULT_POLICY})" in text and f"(default: {DEFAULT_THRESHOLD})" in text


def test_help_follows_the_policy_registry():
    p = argparse.ArgumentParser()
    add_decoding_flags(p, BLOCK_SETTINGS)
    saved = dict(POLICIES)
    try:
        POLICIES["zz-test"] = POLICIES[DEFAULT_POLICY]
        assert "zz-test" in p.format_help()
    finally:
        POLICIES.clear()
        POLICIES.update(saved)
    assert SamplingParams().policy == DEFAULT_POLICY


def test_no_default_policy_or_threshold_is_retyped():
    """Outside engine/policies.py no code gives the default policy or threshold (nor the old
    "threshold" / 0.9) as a default of its own."""
    root = Path(__file__).parents[2]
    wrong = []
    for path in [*root.glob("clover/**/*.py"), *root.glob("benchmarks/*.py")]:
        if path.as_posix().endswith(("engine/policies.py", "export/hf_modeling/generation_clover.py")):
            continue  # the one definition; the exported model's code runs without clover installed
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            retyped = (
                f'default="{DEFAULT_POLICY}"',
                f"default={DEFAULT_THRESHOLD}",
                f'or "{DEFAULT_POLICY}"',
                'default="threshold"',
                "default=0.9",
            )
            if any(r in line for r in retyped):
                wrong.append(f"{path.relative_to(root)}:{n}")
    assert wrong == []
