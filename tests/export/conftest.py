"""Exported models and one isolated transformers run per model (``hf_side.py``), shared by the tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("peft")

HF_SIDE = Path(__file__).with_name("hf_side.py")
N_PROMPTS = 20
MAX_TOKENS = 128
TINY_TOKENS = 16  # the random tiny model commits about one token per pass: keep its runs short


def run_hf(export_dir: Path, job: dict, work: Path) -> dict:
    """Run ``hf_side.py`` on ``job`` in a fresh interpreter where clover cannot be imported."""
    work.mkdir(parents=True, exist_ok=True)
    torch.save(job, work / "job.pt")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_MODULES_CACHE": str(work / "modules"), "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    cmd = [sys.executable, str(HF_SIDE), str(export_dir), str(work / "job.pt"), str(work / "result.pt")]
    r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    return torch.load(work / "result.pt", weights_only=False)


def engine_tokens(model, tokenizer, prompts: list[list[int]], policy: str, max_tokens: int, block_size=None) -> list:
    """Clover's engine, greedy, one prompt at a time: the new tokens, with the stop token that
    ended a row (transformers' ``generate`` keeps it)."""
    from clover.engine import Engine, SamplingParams

    engine = Engine(model, tokenizer)
    out = []
    for p in prompts:
        o = engine.generate(p, SamplingParams(max_tokens=max_tokens, policy=policy, block_size=block_size))
        stop = [o.stop_reason] if o.finish_reason == "stop" and isinstance(o.stop_reason, int) else []
        out.append(list(o.token_ids) + stop)
    return out


def chat_prompts(tokenizer, n: int) -> tuple[list[tuple[list, list]], list[list[int]]]:
    """The first ``n`` test-split tool-call chats: (messages, tools) and their prompt ids."""
    from clover.airspace.evaluate import eval_chats, prompt_of
    from clover.data.chat import render_chat

    exs = eval_chats("test", n)[0]
    chats = [(prompt_of(e), e["tools"]) for e in exs]
    template = getattr(tokenizer, "chat_template", None)
    return chats, [tokenizer.encode(render_chat(m, t, True, template)) for m, t in chats]


def logit_cases(config, T: int, block_sizes: list) -> list[tuple]:
    """(x0, noisy or None, block size, attention mask or None): clean, masked, several block sizes,
    a right-padded row."""
    g = torch.Generator().manual_seed(0)
    x0 = torch.randint(0, config.mask_token_id, (2, T), generator=g)
    xt = x0.masked_fill(torch.rand(x0.shape, generator=g) < 0.5, config.mask_token_id)
    mask = torch.ones(2, T, dtype=torch.long)
    mask[1, T - T // 3 :] = 0
    cases = [(x0, None, None, None), (x0, xt, None, None), (x0, xt, None, mask)]
    return cases + [(x0, xt, bs, None) for bs in block_sizes]


def clover_logits(model, case) -> torch.Tensor:
    x0, xt, bs, mask = case
    with torch.no_grad():
        valid = None if mask is None else mask.bool()
        return model.forward_train(x0, x0 if xt is None else xt, block_size=bs, valid=valid).logits


@pytest.fixture(scope="session")
def bundled_export(tmp_path_factory):
    """The bundled model, its tokenizer and its export."""
    from clover.api.loading import load_model_dir
    from clover.export import export_hf

    model, tok = load_model_dir(None, device="cpu")
    root = tmp_path_factory.mktemp("bundled")
    export_hf(_default_dir(), root / "hf")
    return dict(model=model, tok=tok, root=root, export=root / "hf", src=_default_dir())


@pytest.fixture(scope="session")
def bundled(bundled_export):
    """One transformers run on the bundled export: logits, the default policy on 20 chats, ``ar``
    on the first 5, the chat template, a LoRA step."""
    from clover.engine.policies import DEFAULT_POLICY

    d = dict(bundled_export)
    chats, prompts = chat_prompts(d["tok"], N_PROMPTS)
    cases = logit_cases(d["model"].config, 70, [8, 5])
    job = {
        "logits": cases,
        "generate": [
            {"prompts": prompts, "policy": DEFAULT_POLICY, "max_new_tokens": MAX_TOKENS, "block_size": None},
            {"prompts": prompts[:5], "policy": "ar", "max_new_tokens": MAX_TOKENS, "block_size": None},
        ],
        "chats": chats,
        "automodel": cases[0][0],
        "lora": str(d["root"] / "lora_merged"),
    }
    d.update(prompts=prompts, chats=chats, cases=cases, policy=DEFAULT_POLICY)
    d["result"] = run_hf(d["export"], job, d["root"] / "run")
    return d


def _default_dir() -> Path:
    from clover.data import default_model_dir

    return default_model_dir()


def tiny_model(seed: int = 0):
    """A random tiny preset (MoE, 3 GDN layers then attention, shift_logits) whose Clover-only
    parameters are random too, so every term of the mixer counts."""
    from clover.model import CloverForBlockDiffusion, preset

    torch.manual_seed(seed)
    model = CloverForBlockDiffusion(preset("tiny", eos_token_id=5, pad_token_id=0)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf in ("conv_right", "mem_key", "mem_bias") or name.endswith("norm.weight"):
                p.normal_(0.0, 0.3)
            elif leaf in ("mem_gamma", "mem_scale", "attn_scale"):
                p.uniform_(0.5, 2.0)
    return model


@pytest.fixture(scope="session")
def tiny_export(tmp_path_factory):
    """The random tiny model, saved as a Clover checkpoint and exported."""
    from clover.export import export_hf
    from clover.model.io import save_model

    model = tiny_model()
    assert model.config.layer_types == ["linear_attention"] * 3 + ["full_attention"] and model.config.num_experts
    root = tmp_path_factory.mktemp("tiny")
    save_model(model, root / "clover")
    export_hf(root / "clover", root / "hf")
    return dict(model=model, root=root, export=root / "hf", src=root / "clover")


@pytest.fixture(scope="session")
def tiny(tiny_export):
    """One transformers run on the tiny export: logits, and the policies (at several block sizes)
    on 20 random prompts."""
    from clover.engine.policies import DEFAULT_POLICY

    d = dict(tiny_export)
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, 30, (N_PROMPTS,), generator=g).tolist()
    prompts = [torch.randint(0, 96, (n,), generator=g).tolist() for n in lengths]
    # (policy, block size, prompts): the default policy and ar on all 20, the others on a few
    runs = [(DEFAULT_POLICY, None, 20), ("ar", None, 20), ("prefix", None, 6), ("fixed", None, 6), ("threshold", 3, 6)]
    runs.append(("ar", 5, 6))
    cases = logit_cases(d["model"].config, 29, [4, 3, 1])
    job = {
        "logits": cases,
        "generate": [
            {"prompts": prompts[:n], "policy": p, "max_new_tokens": TINY_TOKENS, "block_size": bs} for p, bs, n in runs
        ],
    }
    d.update(prompts=prompts, runs=runs, cases=cases)
    d["result"] = run_hf(d["export"], job, d["root"] / "run")
    return d
