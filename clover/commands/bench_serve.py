"""``clover bench decisions`` and ``clover bench serve``.

decisions: on the decision test groups, the same model answers each group ``joint`` (one
request, all answer slots in one block) and ``independent`` (one request per question): group
all-correct rate, per-question accuracy, wall time per group. This module keeps its flags and
table; ``clover.bench.joint_vs_independent`` measures.

serve: a live ``clover serve`` on 127.0.0.1 (a subprocess on a free port) and N concurrent
streaming clients (official ``openai`` client) on the airspace test prompts: requests/s,
tokens/s, p50/p95 latency and time to first token, errors (``clover.bench.serve_clients``
measures). With ``--long-prompt N`` instead: the engine stepped as the server's thread steps it,
streams decoding while an N-token prompt arrives, their worst gap between tokens with the prompt
prefilled whole and in chunks (``clover.bench.serve_gaps`` measures).
"""

from __future__ import annotations

import argparse

from clover.api.loading import load_engine, load_model_dir
from clover.bench import BENCHMARKS, print_table, set_threads, write_json
from clover.bench.joint_vs_independent import measure_decisions
from clover.bench.serve_clients import measure_serve, server_flags
from clover.commands.common import (
    THREADS_HELP,
    add_device_args,
    add_threads_arg,
    device_setup,
    int_at_least,
    positive_int,
    recorder,
)
from clover.commands.threads import apply_threads
from clover.engine import PREFILL_CHUNK


# -- decisions -----------------------------------------------------------------------------------
def add_decisions_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="Clover checkpoint directory (default: the bundled model)")
    p.add_argument("--n", type=int, default=100, help="decision groups of the split")
    p.add_argument("--split", default="test", choices=["train", "validation", "test"])
    p.add_argument("--block-size", type=int, help="default: the model's, or the smallest that holds the answers")
    p.add_argument("--policy", help="answer slots' policy (default: /v1/decisions' own, DEFAULT_POLICY)")
    p.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="answer slots' commit threshold (default: /v1/decisions' own, "
        "clover.api.joint_decisions.DEFAULT_THRESHOLD)",
    )
    p.add_argument("--no-sequential", action="store_true", help="skip the one-call-per-question timing")
    add_threads_arg(p)
    add_device_args(p)
    p.add_argument("--json", metavar="PATH", help="write the figures here")


def run_decisions(args: argparse.Namespace) -> int:
    from clover.api.joint_decisions import DEFAULT_POLICY, DEFAULT_THRESHOLD  # deferred: loads torch

    rec = recorder(args)
    device_setup(args, "clover bench decisions")
    set_threads(args.threads)
    args.threshold = DEFAULT_THRESHOLD if args.threshold is None else args.threshold
    args.policy = args.policy or DEFAULT_POLICY
    try:
        # no prefix cache: every mode replays the same groups, and each should pay its whole prefill
        engine = load_engine(
            args.model, max_batch_size=16, prefix_cache_mb=0, device=args.device, dtype=args.dtype, compile=args.compile
        )
    except FileNotFoundError as e:
        raise SystemExit(f"clover bench decisions: {e}") from None
    args.threads = apply_threads(engine.model, args.threads)
    try:
        figures, res = measure_decisions(
            engine, args.split, args.n, args.policy, args.threshold, args.block_size, not args.no_sequential
        )
    except ValueError as e:
        raise SystemExit(f"clover bench decisions: {e}") from None
    figures["model"] = str(args.model or "bundled default")
    j, n, asked = res["joint"], figures["n_groups"], figures["n_groups"] + figures["skipped_groups"]
    rows = [
        [m, r["group_acc"], r["question_acc"], 1e3 * r["s_per_group"], r["passes_per_group"]] for m, r in res.items()
    ]
    print_table(
        rec,
        f"clover bench decisions ({n} {args.split} groups, {figures['n_questions']} questions, {args.policy} "
        f"{args.threshold}, {args.threads} thread(s))",
        ["mode", "group all-correct", "question acc", "ms / group", "request passes / group"],
        rows,
        [
            f"joint block size x blocks spanned: {j['blocks']}",
            f"{asked - n} of {asked} groups skipped: an option this layout cannot hold",
            "ms / group: wall time of the whole call, answer probabilities included (they are the decode's logprobs)",
            f"joint vs independent: {figures['group_acc_gain_points']:+.1f} points, "
            f"{figures['speedup_vs_independent']:.2f}x faster per group",
        ],
    )
    write_json(rec, args.json, figures)
    return 0


# -- serve ---------------------------------------------------------------------------------------
def add_serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="Clover checkpoint directory (default: the bundled model)")
    p.add_argument("--concurrency", default="1,8,32", help="concurrent streaming clients, one run each")
    p.add_argument("--requests-per-client", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--max-batch-size", type=int, default=32)
    p.add_argument(
        "--prefill-chunk",
        type=int_at_least(0),
        default=PREFILL_CHUNK,
        metavar="TOKENS",
        help="the server's prompt tokens prefilled per engine step (0: each prompt whole)",
    )
    p.add_argument(
        "--long-prompt",
        type=positive_int,
        metavar="TOKENS",
        help="instead: --streams streams decoding while a prompt of this many tokens arrives; their worst "
        "gap between tokens, the prompt prefilled whole and in --prefill-chunk chunks",
    )
    p.add_argument("--streams", type=positive_int, default=8, help="with --long-prompt: the streams decoding")
    p.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="with --long-prompt: gaps in wall time, or in this process's CPU time (the work, whatever "
        "else runs on the machine; the same as wall time with one thread on an idle machine)",
    )
    add_threads_arg(p, THREADS_HELP + " (the server's)")
    add_device_args(p)
    p.add_argument("--json", metavar="PATH", help="write the figures here")


def run_serve(args: argparse.Namespace) -> int:
    rec = recorder(args)
    levels = [int(x) for x in args.concurrency.split(",") if x]
    device_setup(args, "clover bench serve")  # before a server starts
    if args.long_prompt:
        return run_long_prompt(args)
    flags = server_flags(args.model, args.max_batch_size, args.prefill_chunk, args.device, args.dtype, args.compile)
    figures = measure_serve(
        flags, args.threads, levels, args.requests_per_client, args.max_tokens, max_batch_size=args.max_batch_size
    )
    keys = ("clients", "requests", "requests_per_s", "tokens_per_s", "p50_latency_s", "p95_latency_s", "p50_ttft_s")
    rows = [[*(r[k] for k in keys), r["errors"]] for r in figures["levels"]]
    print_table(
        rec,
        f"clover bench serve ({args.model or 'bundled model'}, max_tokens {args.max_tokens}, batch "
        f"{args.max_batch_size}, --device {args.device} --dtype {args.dtype}, "
        f"{args.threads or 'default'} server thread(s))",
        ["clients", "requests", "req/s", "tok/s", "p50 s", "p95 s", "p50 TTFT s", "errors"],
        rows,
        [
            "streaming chat completions with the airspace tools, official openai client, server in a subprocess "
            "(prefix cache off: the bench's prompts repeat)"
        ],
    )
    write_json(rec, args.json, figures)
    return 1 if figures["errors"] else 0


def run_long_prompt(args: argparse.Namespace) -> int:
    from clover.bench.serve_gaps import measure_long_prompt  # deferred: loads torch, not for clover --help

    rec = recorder(args)
    set_threads(args.threads)
    if not args.prefill_chunk:
        raise SystemExit("clover bench serve: --long-prompt compares whole prompts with chunks: --prefill-chunk > 0")
    model, tokenizer = load_model_dir(args.model, args.threads, args.device, args.dtype, args.compile)
    args.threads = apply_threads(model, args.threads)
    figures = measure_long_prompt(
        model, tokenizer, args.long_prompt, args.streams, args.prefill_chunk, args.clock, args.threads
    )
    rows = [
        [
            "whole prompt" if r["prefill_chunk"] == 0 else f"chunks of {r['prefill_chunk']}",
            r["max_gap_ms_alone"],
            r["max_gap_ms_long_prompt"],
            r["gap_ratio"],
            r["max_gap_ms_long_first_block"],
            r["long_prompt_prefill_s"],
            r["long_prompt_ttft_s"],
        ]
        for r in (figures["whole_prompt"], figures)
    ]
    print_table(
        rec,
        f"clover bench serve --long-prompt {args.long_prompt} ({args.streams} streams, "
        f"{args.model or 'bundled model'}, block {figures['block_size']}, {figures['device']} {figures['dtype']}, "
        f"{args.threads} thread(s), {args.clock} clock)",
        [
            "prefill",
            "worst gap alone ms",
            "worst gap, its prefill ms",
            "ratio",
            "worst gap, its 1st block ms",
            "its prefill s",
            "its TTFT s",
        ],
        rows,
        [
            f"weights: {figures['weights']}",
            "gap: between a stream's consecutive text deltas (a block each); alone: before the long prompt "
            "arrives; its prefill: from its arrival to the step it joins the batch in; its 1st block: then "
            "until its first text",
        ],
    )
    write_json(rec, args.json, figures)
    return 0


BENCHMARKS["decisions"] = (
    "joint vs independent decisions on the decision test groups: accuracy and time per group",
    add_decisions_args,
    run_decisions,
)
BENCHMARKS["serve"] = (
    "N concurrent streaming clients against a live server: req/s, tok/s, p50/p95 latency, errors",
    add_serve_args,
    run_serve,
)
