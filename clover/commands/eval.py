"""``clover eval airspace``: the model's accuracy on the held-out splits or your own messages,
per policy (the figures come from ``clover.evaluate``)."""

from __future__ import annotations

import argparse
import json

from clover.commands.common import add_device_args, device_setup, int_at_least, load_model_and_tokenizer, positive_int
from clover.evaluate import evaluate_airspace, load_cases

# the per-group breakdowns of a result, printed as their own table (the rest are the headline figures)
BREAKDOWNS = {"by_kind": "kind", "by_system_prompt": "system prompt", "by_unit_arithmetic": "unit arithmetic",
              "fields": "field", "text_by_kind": "text reply", "multiturn_by_kind": "multi-turn, last turn"}  # fmt: skip


def cmd_eval(args: argparse.Namespace) -> int:
    policies = _checked_settings(args)
    cases = load_cases(args.cases) if args.cases else None
    if cases is None and args.n == 0 and args.groups == 0 and args.text == 0 and args.multiturn == 0:
        raise SystemExit("clover eval: nothing to evaluate (--n 0, --groups 0, --text 0 and --multiturn 0)")
    if args.errors:  # fail now, not after the whole run, when the file cannot be written
        try:
            open(args.errors, "a", encoding="utf-8").close()
        except OSError as e:
            raise SystemExit(f"clover eval: --errors: {args.errors}: {e.strerror}") from None
    device_setup(args, "clover eval")
    model, tok = load_model_and_tokenizer(args.model, args.threads, args.device, args.dtype)
    if tok is None:
        raise SystemExit(f"clover: {args.model} has no tokenizer.json; evaluation needs one")
    if args.block_size is not None:
        try:
            model.config.check_block_size(args.block_size)
        except ValueError as e:
            raise SystemExit(f"clover eval: {e}") from None
    errors: list | None = [] if args.errors else None
    results = [
        evaluate_airspace(
            model,
            tok,
            args.split,
            p,
            args.threshold,
            args.n,
            args.groups,
            args.block_size,
            progress=not args.json,
            errors=errors,
            cases=cases,
            grammar=g,
            n_text=args.text,
            n_multi=args.multiturn,
        )  # fmt: skip
        for g in ([False, True] if args.grammar == "both" else [args.grammar == "on"])
        for p in policies
    ]
    if args.errors:
        with open(args.errors, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(e, ensure_ascii=False) + "\n" for e in errors)
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else results))
    else:
        print_results(results, f"airspace {args.cases or args.split} ({args.model or 'bundled model'})")
    return 0


def _checked_settings(args: argparse.Namespace) -> list[str]:
    """The policies of ``--policy``, each checked with the run's settings before the model loads."""
    from clover.engine import SamplingParams
    from clover.engine.policies import POLICIES

    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    bad = [p for p in policies if p not in POLICIES]
    if bad or not policies:
        raise SystemExit(f"clover: unknown policy {bad or args.policy!r}; choose from {sorted(POLICIES)}")
    try:  # the settings every column decodes with
        for p in policies:
            SamplingParams(policy=p, threshold=args.threshold, block_size=args.block_size)
    except ValueError as e:
        raise SystemExit(f"clover eval: {e}") from None
    return policies


def print_results(results: list[dict], title: str) -> None:
    """The headline figures, one column per run, then where the tool-call misses come from."""
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title)
    t.add_column("metric")
    for r in results:
        t.add_column(r["policy"], justify="right")
    for k in results[0]:
        if k != "policy" and k not in BREAKDOWNS:
            t.add_row(k, *[f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for r in results])
    Console().print(t)
    w = Table(title="where tool-call misses come from (accuracy per message kind, tool and argument)")
    w.add_column("")
    for r in results:
        w.add_column(r["policy"], justify="right")
    for group, label in BREAKDOWNS.items():
        for k in results[0][group]:
            w.add_row(f"{label}: {k}", *[f"{100 * r[group].get(k, 0):.1f} %" for r in results])
    Console().print(w)


def register(sub) -> None:
    _count = int_at_least(0)

    p = sub.add_parser("eval", help="evaluate a model on a task")
    p.add_argument("task", choices=["airspace"])
    p.add_argument("--model", help="checkpoint directory (default: the bundled model)")
    p.add_argument(
        "--policy",
        default="threshold",
        help="ar, threshold, prefix, fixed or edit; several comma-separated: one column each",
    )
    p.add_argument(
        "--threshold", type=float, default=0.9, help="confidence to commit a position (threshold, prefix, edit)"
    )
    p.add_argument("--block-size", type=int, help="tokens per block (default: the model's)")
    p.add_argument("--split", default="test", choices=["train", "validation", "test"], help="the corpus split to score")
    p.add_argument("--n", type=_count, default=200, help="tool-call turns")
    p.add_argument("--groups", type=_count, default=50, help="decision groups")
    p.add_argument(
        "--text", type=_count, default=50, help="turns answered in words, and as many chats offering no tools"
    )
    p.add_argument(
        "--multiturn", type=_count, default=50, help="conversations with earlier turns (the last turn is scored)"
    )
    p.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads")
    add_device_args(p)
    p.add_argument(
        "--grammar",
        choices=["off", "on", "both"],
        default="off",
        help="decode the tool-call turns under the tool-call grammar of their tools, as the server does "
        "(off: the model alone; both: each policy both ways)",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("--errors", metavar="PATH", help="write the failed tool-call turns here (JSON lines)")
    p.add_argument("--cases", metavar="JSONL", help='score these messages instead of the split\'s tool-call turns: '
                   '{"message", "gold", "system"?} per line, e.g. benchmarks/operator_messages.jsonl')  # fmt: skip
    p.set_defaults(func=cmd_eval)
