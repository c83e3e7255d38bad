"""``clover bench twin``: the bundled Clover model against its same-size autoregressive twin.

The twin is the AR base Clover was converted from, kept as a Hugging Face checkpoint and run
the way its users run it: ``apply_chat_template`` with the tools, greedy ``generate()``. Clover
runs the same chats through its engine with ``ar``, ``threshold`` and ``prefix``. Quality is
scored by one rule for both (``evaluate.reply_right``); speed is tokens/s at batch 1 (one request
at a time) and at batch 16 (Clover: continuous batching through 16 slots; the twin: static
batches of 16, left-padded, as ``generate()`` runs them).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from clover.bench import BENCHMARKS, print_table, set_threads, write_json

TWIN_DIR = Path(__file__).resolve().parents[1] / "assets" / "twin"
MAX_TOKENS = 320


def load_twin(path: str | Path | None = None):
    """The AR twin (``Qwen3_5MoeForCausalLM``) and its tokenizer, from a Hugging Face directory."""
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.logging.set_verbosity_error()  # the "falling back to PyTorch kernels" notices
    d = Path(path) if path else TWIN_DIR
    if not (d / "config.json").exists():
        raise SystemExit(f"clover bench twin: {d}: no config.json (an AR twin is a Hugging Face checkpoint directory)")
    model = AutoModelForCausalLM.from_pretrained(d, dtype="float32").eval()
    return model, AutoTokenizer.from_pretrained(d)


def twin_prompt(tok, ex: dict) -> list[int]:
    """The twin's prompt: its own chat template with the chat's tools."""
    from clover.evaluate import prompt_of

    out = tok.apply_chat_template(prompt_of(ex), tools=ex.get("tools"), add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def generate_twin(model, tok, prompts: list[list[int]], batch: int, max_tokens: int = MAX_TOKENS) -> dict:
    """Greedy ``generate()`` in static batches of ``batch`` (left padding). Each row's output ends at
    its first end-of-turn token; only those tokens count, as for Clover's rows."""
    import torch

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


def _clover(model, tok, prompts: list[list[int]], params, batch: int) -> dict:
    from clover.engine import Engine

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
    return {"texts": [o.text for o in outs], "tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / max(1e-9, wall),
            "tpf": tokens / max(1, passes)}  # fmt: skip


def _scores(texts: list[str], exs, words, convs) -> dict:
    from clover.evaluate import reply_right

    ok = [reply_right(t, e) for t, e in zip(texts, exs + words + convs)]
    a, b = len(exs), len(exs) + len(words)

    def mean(xs):
        return sum(xs) / len(xs) if xs else None

    return {"exact_match": mean(ok[:a]), "text_acc": mean(ok[a:b]), "multiturn_acc": mean(ok[b:])}


def run_twin(args: argparse.Namespace) -> int:
    import dataclasses

    from clover.api.settings import engine_default
    from clover.commands.common import device_setup, load_model_and_tokenizer
    from clover.data.chat import render_chat
    from clover.engine import SamplingParams
    from clover.evaluate import eval_chats, prompt_of

    t_start = time.perf_counter()
    if args.threshold is None:
        args.threshold = engine_default("threshold")
    device_setup(args, "clover bench twin")
    set_threads(args.threads)
    model, tok = load_model_and_tokenizer(args.model, None, args.device, args.dtype)
    twin, twin_tok = load_twin(args.twin)
    twin = twin.to(model.lm_head.weight.device, model.lm_head.weight.dtype)
    exs, words, convs = eval_chats(args.split, args.n, args.text, args.multiturn)
    chats = exs + words + convs
    template = getattr(tok, "chat_template", None)
    c_prompts = [tok.encode(render_chat(prompt_of(e), e.get("tools"), True, template)) for e in chats]
    t_prompts = [twin_prompt(twin_tok, e) for e in chats]
    base = SamplingParams(max_tokens=args.max_tokens, policy="ar")
    policies = {
        "ar": base,
        f"threshold@{args.threshold:g}": dataclasses.replace(base, policy="threshold", threshold=args.threshold),
        f"prefix@{args.threshold:g}": dataclasses.replace(base, policy="prefix", threshold=args.threshold),
    }
    head = f"threshold@{args.threshold:g}"
    big, k = args.batch, min(args.speed_prompts, len(chats))
    mt = args.max_tokens
    generate_twin(twin, twin_tok, t_prompts[:1], 1, 4)  # warm-up
    _clover(model, tok, c_prompts[:1], dataclasses.replace(base, max_tokens=4), 1)
    by_batch: dict[int, dict] = {big: {}, 1: {}}
    r = generate_twin(twin, twin_tok, t_prompts, big, mt)  # quality + batch-16 speed
    by_batch[big]["twin"] = {**_scores(r["texts"], exs, words, convs), **_drop(r)}
    for name, p in policies.items():
        r = _clover(model, tok, c_prompts, p, big)
        by_batch[big][name] = {**_scores(r["texts"], exs, words, convs), **_drop(r)}
    r = generate_twin(twin, twin_tok, t_prompts[:k], 1, mt)  # batch 1: the first k chats, one at a time
    by_batch[1]["twin"] = _drop(r)
    for name in ("ar", head):
        by_batch[1][name] = _drop(_clover(model, tok, c_prompts[:k], policies[name], 1))
    q, b1 = by_batch[big], by_batch[1]
    figures = {
        "split": args.split,
        "n": len(exs),
        "text_n": len(words),
        "multiturn_n": len(convs),
        "twin": str(args.twin or TWIN_DIR),
        "model": args.model or "bundled",
        "twin_exact_match": q["twin"]["exact_match"],
        "clover_ar_exact_match": q["ar"]["exact_match"],
        "clover_threshold_exact_match": q[head]["exact_match"],
        "clover_prefix_exact_match": q[f"prefix@{args.threshold:g}"]["exact_match"],
        "clover_threshold_tpf": q[head]["tpf"],
        "twin_tokens_per_s": b1["twin"]["tokens_per_s"],
        "clover_threshold_tokens_per_s": b1[head]["tokens_per_s"],
        "speedup_vs_twin": b1[head]["tokens_per_s"] / b1["twin"]["tokens_per_s"],
        "seconds_per_turn": {name: r["wall_s"] / k for name, r in b1.items()},
        "by_batch": by_batch,
    }
    rows = []
    for b in (1, big):
        for name, r in by_batch[b].items():
            pct = lambda v: "-" if v is None else f"{100 * v:.1f}"  # noqa: E731
            rows.append([b, name, pct(r.get("exact_match")), pct(r.get("text_acc")), pct(r.get("multiturn_acc")),
                         r.get("tpf", 1.0), r["tokens_per_s"], r["tokens_per_s"] / by_batch[b]["twin"]["tokens_per_s"]])  # fmt: skip
    notes = [
        f"quality: batch {big} runs over {len(exs)} tool-call turns, {len(words)} replies in words, "
        f"{len(convs)} conversations ({args.split} split); batch 1: the first {k} chats one at a time",
        "twin = the AR base under transformers generate() (greedy, its chat template); Clover = the bundled "
        "model through its engine",
        f"took {time.perf_counter() - t_start:.0f} s",
    ]
    print_table(f"clover bench twin ({args.split})", ["batch", "decoder", "tool calls %", "words %", "conversations %",
                "TPF", "tokens/s", "vs twin"], rows, notes)  # fmt: skip
    write_json(args.json, figures)
    return 0


def _drop(r: dict) -> dict:
    return {k: v for k, v in r.items() if k != "texts"}


def add_twin_args(p: argparse.ArgumentParser) -> None:
    from clover.commands.common import add_device_args

    p.add_argument("--model", help="Clover checkpoint directory (default: the bundled model)")
    p.add_argument("--twin", help="the AR twin, a Hugging Face directory (default: the bundled twin)")
    p.add_argument("--split", default="test", choices=["train", "validation", "test"])
    p.add_argument("--n", type=int, default=200, help="tool-call turns (default 200)")
    p.add_argument("--text", type=int, default=50, help="turns answered in words, and as many tool-less chats")
    p.add_argument("--multiturn", type=int, default=50, help="conversations with earlier turns")
    p.add_argument("--threshold", type=float, help="threshold/prefix confidence (default: the engine's)")
    p.add_argument("--batch", type=int, default=16, help="the larger batch size (default 16)")
    p.add_argument("--speed-prompts", type=int, default=16, help="chats run one at a time for batch 1 (default 16)")
    p.add_argument("--max-tokens", type=int, default=MAX_TOKENS, help=f"per answer (default {MAX_TOKENS})")
    p.add_argument("--threads", type=int, default=1)
    add_device_args(p)  # the twin runs on the same device, in the same dtype
    p.add_argument("--json", metavar="PATH", help="write the figures here")


BENCHMARKS["twin"] = (
    "the bundled Clover model vs its same-size AR twin (transformers generate()): quality and speed",
    add_twin_args,
    run_twin,
)
