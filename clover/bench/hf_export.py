"""An exported Hugging Face folder (``clover export hf``) beside Clover's own model and engine: the
folder loaded by transformers in a fresh interpreter where clover cannot be imported
(``hf_side.py``), its logits and greedy tokens compared with Clover's.

Used by the export tests (tests/export) and by ``benchmarks/bench_hf_export.py``, which measures
what docs/hf-export.md quotes. transformers and peft are imported only in that other interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from clover.airspace.evaluate import prompt_of
from clover.airspace.scoring import eval_chats2
from clover.api.loading import load_model_dir
from clover.bench.exactness import perturbed_tiny, rel_err
from clover.data import default_model_dir
from clover.data.chat import render_chat
from clover.engine import Engine, SamplingParams
from clover.export import export_hf
from clover.model.io import save_model

HF_SIDE = Path(__file__).with_name("hf_side.py")
N_PROMPTS = 20  # test chats (bundled) or random prompts (tiny) per run
MAX_TOKENS = 128  # new tokens at most, bundled
TINY_IDS = {"eos_token_id": 5, "pad_token_id": 0}  # the random tiny model's special ids (it has no tokenizer)
TINY_TOKENS = 16  # the random tiny model commits about one token per pass: its runs are short


def run_hf(export_dir: Path, job: dict, work: Path) -> dict:
    """Run ``hf_side.py`` on ``job`` in a fresh interpreter where clover cannot be imported, in the
    folder ``work``; its result. RuntimeError (with the end of its stderr) when it fails."""
    work.mkdir(parents=True, exist_ok=True)
    torch.save(job, work / "job.pt")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_MODULES_CACHE": str(work / "modules"), "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    cmd = [sys.executable, str(HF_SIDE), str(export_dir), str(work / "job.pt"), str(work / "result.pt")]
    r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"hf_side.py failed:\n{r.stderr[-4000:]}")
    return torch.load(work / "result.pt", weights_only=True)  # tensors, lists, dicts and strings: no pickled objects


def generate_job(prompts: list[list[int]], policy: str, max_new_tokens: int, block_size=None) -> dict:
    """One entry of a job's ``generate``: greedy ``policy`` on each prompt alone."""
    return {"prompts": prompts, "policy": policy, "max_new_tokens": max_new_tokens, "block_size": block_size}


def engine_tokens(model, tokenizer, prompts: list[list[int]], policy: str, max_tokens: int, block_size=None) -> list:
    """Clover's engine, greedy, one prompt at a time: the new tokens, with the stop token that
    ended a row (transformers' ``generate`` keeps it)."""
    engine = Engine(model, tokenizer)
    out = []
    for p in prompts:
        o = engine.generate(p, SamplingParams(max_tokens=max_tokens, policy=policy, block_size=block_size))
        stop = [o.stop_reason] if o.finish_reason == "stop" and isinstance(o.stop_reason, int) else []
        out.append(list(o.token_ids) + stop)
    return out


def chat_prompts(tokenizer, n: int) -> tuple[list[tuple[list, list]], list[list[int]]]:
    """The first ``n`` test-split tool-call chats: (messages, tools) and their prompt ids."""
    exs = eval_chats2("test", n)[0]
    chats = [(prompt_of(e), e["tools"]) for e in exs]
    template = getattr(tokenizer, "chat_template", None)
    return chats, [tokenizer.encode(render_chat(m, t, True, template)) for m, t in chats]


def tiny_prompts(n: int) -> list[list[int]]:
    """``n`` random prompts of 1 to 29 tokens for the tiny model."""
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, 30, (n,), generator=g).tolist()
    return [torch.randint(0, 96, (k,), generator=g).tolist() for k in lengths]


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
    """Clover's training forward on one logit case."""
    x0, xt, bs, mask = case
    with torch.no_grad():
        valid = None if mask is None else mask.bool()
        return model.forward_train(x0, x0 if xt is None else xt, block_size=bs, valid=valid).logits


def logit_errors(model, cases: list[tuple], hf_logits: list[torch.Tensor]) -> list[float]:
    """Per logit case: the relative error of the exported model's logits against Clover's, a padded
    row's padding left out. ValueError when the two disagree in number or shape."""
    errs = []
    for case, got in zip(cases, hf_logits, strict=True):
        want = clover_logits(model, case)
        if got.shape != want.shape:
            raise ValueError(f"logits of shape {tuple(got.shape)}, Clover's {tuple(want.shape)}")
        errs.append(rel_err(got, want, case[3]))
    return errs


def export_bundled(root: Path) -> dict:
    """The bundled model, its tokenizer, its export in ``root/hf`` and its logit cases."""
    model, tok = load_model_dir(None, device="cpu")
    export_hf(default_model_dir(), root / "hf")
    cases = logit_cases(model.config, 70, [8, 5])
    return dict(model=model, tok=tok, root=root, export=root / "hf", src=default_model_dir(), cases=cases)


def export_tiny(root: Path) -> dict:
    """The random tiny model saved as a Clover checkpoint in ``root/clover``, its export in
    ``root/hf`` and its logit cases (no tokenizer)."""
    model = perturbed_tiny(0, **TINY_IDS)
    save_model(model, root / "clover")
    export_hf(root / "clover", root / "hf")
    cases = logit_cases(model.config, 29, [4, 3, 1])
    return dict(model=model, tok=None, root=root, export=root / "hf", src=root / "clover", cases=cases)


def compare(d: dict, prompts: list[list[int]], policies: list[str], max_tokens: int, work: Path) -> dict:
    """One transformers run of ``d``'s export (``export_bundled`` or ``export_tiny``): its logit
    cases, then each policy greedy on ``prompts``, beside Clover's model and engine →
    {"clover_blocked", "max_rel_logit_err", "logit_cases", "policies": {policy: {"n", "equal" (rows
    equal to the engine's), "tokens" (new tokens transformers generated, stop tokens included)}}}."""
    job = {"logits": d["cases"], "generate": [generate_job(prompts, p, max_tokens) for p in policies]}
    res = run_hf(d["export"], job, work)
    errs = logit_errors(d["model"], d["cases"], res["logits"])
    out = {"clover_blocked": res["clover_blocked"], "max_rel_logit_err": max(errs), "logit_cases": len(errs)}
    out["policies"] = {}
    for policy, got in zip(policies, res["generate"], strict=True):
        want = engine_tokens(d["model"], d["tok"], prompts, policy, max_tokens)
        equal = sum(a == b for a, b in zip(got, want, strict=True))
        out["policies"][policy] = {"n": len(prompts), "equal": equal, "tokens": sum(map(len, got))}
    return out
