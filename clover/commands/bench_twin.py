"""``clover bench twin``: its flags and table; what it measures is ``clover.bench.twin``."""

from __future__ import annotations

import argparse
import time

from clover.airspace.scoring import eval_chats2
from clover.api.settings import engine_default
from clover.bench import BENCHMARKS, print_table, set_threads, write_json
from clover.bench.results import Recorder
from clover.bench.twin import MAX_TOKENS, TWIN_DIR, load_twin, measure_twin
from clover.commands.common import add_device_args, add_threads_arg, device_setup, load_model_and_tokenizer, recorder


def run_twin(args: argparse.Namespace) -> int:
    rec = recorder(args)
    t_start = time.perf_counter()
    threshold = engine_default("threshold") if args.threshold is None else args.threshold
    device_setup(args, "clover bench twin")
    set_threads(args.threads)
    model, tok = load_model_and_tokenizer(args.model, args.threads, args.device, args.dtype, args.compile)
    try:
        twin, twin_tok = load_twin(args.twin)
    except FileNotFoundError as e:
        raise SystemExit(f"clover bench twin: {e}") from None
    twin = twin.to(model.lm_head.weight.device, model.lm_head.weight.dtype)
    chats = eval_chats2(args.split, args.n, args.text, args.multiturn)
    by_batch = measure_twin(
        model, tok, twin, twin_tok, chats, threshold, args.batch, args.speed_prompts, args.max_tokens
    )
    k = min(args.speed_prompts, sum(len(c) for c in chats))
    figures = _figures(args, chats, by_batch, threshold, k)
    _print(rec, args, chats, by_batch, k, time.perf_counter() - t_start)
    write_json(rec, args.json, figures)
    return 0


def _figures(args: argparse.Namespace, chats, by_batch: dict, threshold: float, k: int) -> dict:
    q, b1, head = by_batch[args.batch], by_batch[1], f"threshold@{threshold:g}"
    return {
        "split": args.split,
        "n": len(chats[0]),
        "text_n": len(chats[1]),
        "multiturn_n": len(chats[2]),
        "twin": str(args.twin or TWIN_DIR),
        "model": args.model or "bundled",
        "twin_exact_match": q["twin"]["exact_match"],
        "clover_ar_exact_match": q["ar"]["exact_match"],
        "clover_threshold_exact_match": q[head]["exact_match"],
        "clover_prefix_exact_match": q[f"prefix@{threshold:g}"]["exact_match"],
        "clover_threshold_tpf": q[head]["tpf"],
        "twin_tokens_per_s": b1["twin"]["tokens_per_s"],
        "clover_threshold_tokens_per_s": b1[head]["tokens_per_s"],
        "speedup_vs_twin": b1[head]["tokens_per_s"] / b1["twin"]["tokens_per_s"],
        "seconds_per_turn": {name: r["wall_s"] / k for name, r in b1.items()},
        "by_batch": by_batch,
    }


def _print(rec: Recorder, args: argparse.Namespace, chats, by_batch: dict, k: int, took: float) -> None:
    big = args.batch
    exs, words, convs = chats
    rows = []
    for b in (1, big):
        for name, r in by_batch[b].items():
            pct = lambda v: "-" if v is None else f"{100 * v:.1f}"
            vs_twin = r["tokens_per_s"] / by_batch[b]["twin"]["tokens_per_s"]
            rows.append(
                [
                    b,
                    name,
                    pct(r.get("exact_match")),
                    pct(r.get("text_acc")),
                    pct(r.get("multiturn_acc")),
                    r.get("tpf", 1.0),
                    r["tokens_per_s"],
                    vs_twin,
                ]
            )
    notes = [
        f"quality: batch {big} runs over {len(exs)} tool-call turns, {len(words)} replies in words, "
        f"{len(convs)} conversations ({args.split} split); batch 1: the first {k} chats one at a time",
        "twin = the AR base under transformers generate() (greedy, its chat template); Clover = the bundled "
        "model through its engine",
        f"took {took:.0f} s",
    ]
    print_table(
        rec,
        f"clover bench twin ({args.split})",
        ["batch", "decoder", "tool calls %", "words %", "conversations %", "TPF", "tokens/s", "vs twin"],
        rows,
        notes,
    )


def add_twin_args(p: argparse.ArgumentParser) -> None:
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
    add_threads_arg(p)
    add_device_args(p)  # the twin runs on the same device, in the same dtype
    p.add_argument("--json", metavar="PATH", help="write the figures here")


BENCHMARKS["twin"] = (
    "the bundled Clover model vs its same-size AR twin (transformers generate()): quality and speed",
    add_twin_args,
    run_twin,
)
