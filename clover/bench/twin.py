"""The bundled Clover model against its same-size autoregressive twin (``clover bench twin``).

The twin is the AR base Clover was converted from, kept as a Hugging Face checkpoint and run
the way its users run it: ``apply_chat_template`` with the tools, greedy ``generate()``. Clover
runs the same chats through its engine with ``ar``, ``threshold`` and ``prefix``. Quality is
scored by one rule for both, the task's (``scoring.reply_right2``); speed is tokens/s at batch 1 (one request
at a time) and at batch 16 (Clover: continuous batching through 16 slots; the twin: static
batches of 16, left-padded, as ``generate()`` runs them).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from clover.airspace.evaluate import prompt_of
from clover.airspace.scoring import reply_right2
from clover.data.chat import render_chat

TWIN_DIR = Path(__file__).resolve().parents[1] / "assets" / "twin"
MAX_TOKENS = 320


def load_twin(path: str | Path | None = None):
    """The AR twin (``Qwen3_5MoeForCausalLM``) and its tokenizer, from a Hugging Face directory."""
    import transformers  # deferred: a test/optional dependency, and heavy
    from transformers import AutoModelForCausalLM, AutoTokenizer  # optional: transformers (a test dependency)

    transformers.logging.set_verbosity_error()  # the "falling back to PyTorch kernels" notices
    d = Path(path) if path else TWIN_DIR
    if not (d / "config.json").exists():
        raise FileNotFoundError(f"{d}: no config.json (an AR twin is a Hugging Face checkpoint directory)")
    model = AutoModelForCausalLM.from_pretrained(d, dtype="float32").eval()
    return model, AutoTokenizer.from_pretrained(d)


def twin_prompt(tok, ex: dict) -> list[int]:
    """The twin's prompt: its own chat template with the chat's tools."""
    out = tok.apply_chat_template(prompt_of(ex), tools=ex.get("tools"), add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def generate_twin(model, tok, prompts: list[list[int]], batch: int, max_tokens: int = MAX_TOKENS) -> dict:
    """Greedy ``generate()`` in static batches of ``batch`` (left padding). Each row's output ends at
    its first end-of-turn token; only those tokens count, as for Clover's rows."""
    import torch  # deferred: torch, not needed to list the benchmarks

    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    texts, tokens, wall = [], 0, 0.0
    for s in range(0, len(prompts), batch):
        group = prompts[s : s + batch]
        width = max(len(p) for p in group)
        ids = torch.full((len(group), width), pad, dtype=torch.long)
        att = torch.zeros_like(ids)
        for i, p in enumerate(group):
            ids[i, width - len(p) :] = torch.tensor(p)
            att[i, width - len(p) :] = 1
        ids, att = ids.to(model.device), att.to(model.device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=att, max_new_tokens=max_tokens, do_sample=False, pad_token_id=pad)
        wall += time.perf_counter() - t0
        for row in out[:, width:].tolist():
            n = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
            tokens += n
            texts.append(tok.decode([t for t in row[:n] if t not in eos], skip_special_tokens=False))
    return {"texts": texts, "tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / max(1e-9, wall)}


def clover_decode(model, tok, prompts: list[list[int]], params, batch: int) -> dict:
    from clover.engine import Engine  # deferred: torch

    engine = Engine(model, tok, max_batch_size=batch)
    t0 = time.perf_counter()
    outs = (
        engine.generate_batch(prompts, params)
        if batch > 1
        else [engine.generate_batch([p], params)[0] for p in prompts]
    )
    wall = time.perf_counter() - t0
    tokens = sum(len(o.token_ids) for o in outs)
    passes = sum(o.stats.get("forward_passes", 0) for o in outs)
    return {
        "texts": [o.text for o in outs],
        "tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / max(1e-9, wall),
        "tpf": tokens / max(1, passes),
    }


def scores(texts: list[str], exs, words, convs) -> dict:
    ok = [reply_right2(t, e) for t, e in zip(texts, exs + words + convs)]
    a, b = len(exs), len(exs) + len(words)

    def mean(xs):
        return sum(xs) / len(xs) if xs else None

    return {"exact_match": mean(ok[:a]), "text_acc": mean(ok[a:b]), "multiturn_acc": mean(ok[b:])}


def measure_twin(
    model,
    tok,
    twin,
    twin_tok,
    chats: tuple[list, list, list],
    threshold: float,
    batch: int = 16,
    speed_prompts: int = 16,
    max_tokens: int = MAX_TOKENS,
) -> dict[int, dict]:
    """Quality and speed of the twin and of Clover (``ar``, ``threshold`` and ``prefix`` at
    ``threshold``): ``{batch size: {decoder: figures}}``. Quality over every chat at ``batch``
    (``chats``: tool-call turns, replies in words, conversations); speed at batch 1 over the first
    ``speed_prompts`` chats, one at a time, for the twin, ``ar`` and ``threshold``."""
    from clover.engine import SamplingParams  # deferred: torch

    exs, words, convs = chats
    every = exs + words + convs
    template = getattr(tok, "chat_template", None)
    c_prompts = [tok.encode(render_chat(prompt_of(e), e.get("tools"), True, template)) for e in every]
    t_prompts = [twin_prompt(twin_tok, e) for e in every]
    base = SamplingParams(max_tokens=max_tokens, policy="ar")
    policies = {
        "ar": base,
        f"threshold@{threshold:g}": dataclasses.replace(base, policy="threshold", threshold=threshold),
        f"prefix@{threshold:g}": dataclasses.replace(base, policy="prefix", threshold=threshold),
    }
    k = min(speed_prompts, len(every))
    generate_twin(twin, twin_tok, t_prompts[:1], 1, 4)  # warm-up
    clover_decode(model, tok, c_prompts[:1], dataclasses.replace(base, max_tokens=4), 1)
    by_batch: dict[int, dict] = {batch: {}, 1: {}}
    r = generate_twin(twin, twin_tok, t_prompts, batch, max_tokens)  # quality + the larger batch's speed
    by_batch[batch]["twin"] = {**scores(r["texts"], exs, words, convs), **_drop(r)}
    for name, p in policies.items():
        r = clover_decode(model, tok, c_prompts, p, batch)
        by_batch[batch][name] = {**scores(r["texts"], exs, words, convs), **_drop(r)}
    by_batch[1]["twin"] = _drop(generate_twin(twin, twin_tok, t_prompts[:k], 1, max_tokens))
    for name in ("ar", f"threshold@{threshold:g}"):
        by_batch[1][name] = _drop(clover_decode(model, tok, c_prompts[:k], policies[name], 1))
    return by_batch


def _drop(r: dict) -> dict:
    return {k: v for k, v in r.items() if k != "texts"}
