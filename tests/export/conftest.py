"""Exported models and one isolated transformers run per model (``clover.bench.hf_export``),
shared by the tests."""

from __future__ import annotations

import pytest

from clover.bench.hf_export import (
    MAX_TOKENS,
    N_PROMPTS,
    TINY_TOKENS,
    chat_prompts,
    export_bundled,
    export_tiny,
    generate_job,
    run_hf,
    tiny_prompts,
)

pytest.importorskip("transformers")
pytest.importorskip("peft")


@pytest.fixture(scope="session")
def bundled_export(tmp_path_factory):
    """The bundled model, its tokenizer, its export and its logit cases."""
    return export_bundled(tmp_path_factory.mktemp("bundled"))


@pytest.fixture(scope="session")
def bundled(bundled_export):
    """One transformers run on the bundled export: logits, the default policy on 20 chats, ``ar``
    on the first 5, the chat template, a LoRA step."""
    from clover.engine.policies import DEFAULT_POLICY

    d = dict(bundled_export)
    chats, prompts = chat_prompts(d["tok"], N_PROMPTS)
    job = {
        "logits": d["cases"],
        "generate": [generate_job(prompts, DEFAULT_POLICY, MAX_TOKENS), generate_job(prompts[:5], "ar", MAX_TOKENS)],
        "chats": chats,
        "automodel": d["cases"][0][0],
        "lora": str(d["root"] / "lora_merged"),
    }
    d.update(prompts=prompts, chats=chats, policy=DEFAULT_POLICY)
    d["result"] = run_hf(d["export"], job, d["root"] / "run")
    return d


@pytest.fixture(scope="session")
def tiny_export(tmp_path_factory):
    """The random tiny model, saved as a Clover checkpoint and exported."""
    d = export_tiny(tmp_path_factory.mktemp("tiny"))
    config = d["model"].config
    assert config.layer_types == ["linear_attention"] * 3 + ["full_attention"] and config.num_experts
    return d


@pytest.fixture(scope="session")
def tiny(tiny_export):
    """One transformers run on the tiny export: logits, and the policies (at several block sizes)
    on 20 random prompts."""
    from clover.engine.policies import DEFAULT_POLICY

    d = dict(tiny_export)
    prompts = tiny_prompts(N_PROMPTS)
    # (policy, block size, prompts): the default policy and ar on all 20, the others on a few
    runs = [(DEFAULT_POLICY, None, 20), ("ar", None, 20), ("prefix", None, 6), ("fixed", None, 6), ("threshold", 3, 6)]
    runs.append(("ar", 5, 6))
    job = {"logits": d["cases"], "generate": [generate_job(prompts[:n], p, TINY_TOKENS, bs) for p, bs, n in runs]}
    d.update(prompts=prompts, runs=runs)
    d["result"] = run_hf(d["export"], job, d["root"] / "run")
    return d
