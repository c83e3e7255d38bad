"""``clover eval airspace``: the model's accuracy on the held-out splits or your own messages, per
policy (the figures come from ``clover.airspace.evaluate`` with the task's ``clover.airspace.scoring``;
``airspace2``, the task's former name, is read as ``airspace``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from clover.airspace.evaluate import evaluate_airspace, load_cases
from clover.bench import print_table, write_json
from clover.bench.aup import aup
from clover.commands.common import (
    add_device_args,
    add_threads_arg,
    device_setup,
    int_at_least,
    load_model_and_tokenizer,
    recorder,
)
from clover.data.task import ALIASES, DEFAULT_TASK, TASKS, deprecated, model_task

# the per-group breakdowns of a result, printed as their own table (the rest are the headline figures)
BREAKDOWNS = {
    "by_kind": "kind",
    "by_system_prompt": "system prompt",
    "by_unit_arithmetic": "unit arithmetic",
    "fields": "field",
    "text_by_kind": "text reply",
    "multiturn_by_kind": "multi-turn, last turn",
    "names_copied": "names copied",
    "tool_lists": "tool list",
}


def cmd_eval(args: argparse.Namespace) -> int:
    args.task = deprecated(args.task, "clover eval")
    rec = recorder(args)
    runs = _checked_settings(args)
    cases = load_cases(args.cases) if args.cases else None
    if args.tool_lists == "varied" and not (args.n or cases):
        raise SystemExit("clover eval: --tool-lists varied needs tool-call turns (--n or --cases)")
    if cases is None and not any((args.n, args.groups, args.text, args.multiturn, args.plain)):
        raise SystemExit("clover eval: nothing to evaluate (--n 0, --groups 0, --text 0, --multiturn 0, --plain 0)")
    for flag, path in (("--errors", args.errors), ("--results", args.results)):
        try:  # fail now, not after the whole run, when the file cannot be written
            if path:
                if flag == "--results":  # a result file's folder is made, as the benchmarks' --json does
                    Path(path).parent.mkdir(parents=True, exist_ok=True)
                open(path, "a", encoding="utf-8").close()
        except OSError as e:
            raise SystemExit(f"clover eval: {flag}: {path}: {e.strerror}") from None
    device_setup(args, "clover eval")
    model, tok = load_model_and_tokenizer(args.model, args.threads, args.device, args.dtype, args.compile)
    if tok is None:
        raise SystemExit(f"clover: {args.model} has no tokenizer.json; evaluation needs one")
    if args.block_size is not None:
        try:
            model.config.check_block_size(args.block_size)
        except ValueError as e:
            raise SystemExit(f"clover eval: {e}") from None
    _check_task(args.task, model.config)
    errors: list | None = [] if args.errors else None
    grammars = {"both": [False, True], "on": [True], "off": [False], "ungrounded": ["ungrounded"]}[args.grammar]
    judge = _reply_judge(args, cases)
    settings = [(g, p, t) for g in grammars for p, t in runs]
    results = [
        evaluate_airspace(
            model,
            tok,
            args.split,
            p,
            t,
            args.n,
            args.groups,
            args.block_size,
            progress=not args.json,
            errors=errors,
            cases=cases,
            grammar=g,
            n_text=args.text,
            n_multi=args.multiturn,
            n_plain=args.plain,
            grounded_reply=args.grounded_reply,
            reply_judge=judge,
            ends=args.ends,
        )
        for g, p, t in settings
    ]
    if args.tool_lists == "varied":
        _tool_lists(model, tok, args, cases, results, settings)
    _add_aup(results)
    if args.errors:
        with open(args.errors, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(e, ensure_ascii=False) + "\n" for e in errors)
    figures = results[0] if len(results) == 1 else results
    tables = result_tables(results, f"{args.task} {args.cases or args.split} ({args.model or 'bundled model'})")
    if args.json:
        print(json.dumps(figures))
    if judge is not None:
        tables.append(_reply_table(results, args.grounded_reply))
    for title, columns, rows in tables:  # printed (and recorded) as tables, or with --json only recorded
        if args.json:
            rec.record(title, columns, rows)
        else:
            print_table(rec, title, columns, rows)
    write_json(rec, args.results, figures)
    return 0


def _tool_lists(model, tok, args: argparse.Namespace, cases, results: list[dict], settings: list) -> None:
    """Each run's tool-call turns asked again with their tool lists varied
    (``clover.airspace.tool_lists``): its figures added to the run's result."""
    from clover.airspace.scoring import eval_chats2  # deferred: the corpus is large to import
    from clover.airspace.tool_lists import evaluate_tool_lists

    exs = eval_chats2(args.split, args.n, cases=cases)[0]
    for r, (g, p, t) in zip(results, settings):
        run = {
            "policy": p,
            "threshold": t,
            "block_size": args.block_size,
            "grammar": g,
            "exact_match": r["exact_match"],
        }
        r.update(evaluate_tool_lists(model, tok, exs, run, args.tool_seed, progress=not args.json))


def _reply_table(results: list[dict], grounded_reply: bool) -> tuple[str, list[str], list[list[str]]]:
    """(title, columns, rows) of the replies after tool results, one row per run."""
    rows = [
        [r["policy"], r["replies_after_tools"]["n"]]
        + [f"{100 * r['replies_after_tools'][k]:.1f} %" for k in ("ids_grounded", "well_formed", "faithful")]
        for r in results
    ]
    head = "conversations answered in words after tool results" + (", grounded_reply" if grounded_reply else "")
    return head, ["decoding", "replies", "ids grounded", "words well formed", "faithful"], rows


def _reply_judge(args: argparse.Namespace, cases):
    """The judge of the conversations' replies after tool results (``clover.bench.replies``), its
    vocabulary the evaluated task's reply vocabulary; None without conversations or a vocabulary."""
    from clover.bench.replies import reply_check, task_vocabulary  # deferred: the task's corpus
    from clover.data.task import get_task

    if args.grounded_reply and args.grammar != "on":
        raise SystemExit(
            "clover eval: --grounded-reply holds the text around the tool-call grammar: needs --grammar on"
        )
    t = get_task(args.task)
    if not args.multiturn or cases is not None or t.reply_vocabulary is None:
        return None
    vocabulary = task_vocabulary(t)
    return lambda reply, messages: reply_check(reply, messages, vocabulary)


def _check_task(task: str, config) -> None:
    """One line on stderr when the model was trained for another task than the one evaluated:
    its figures then say how it copes with tools it never saw."""
    own = model_task(config, default=True).name
    if own != task:
        print(f"clover eval: note: this model was trained for {own!r}, not {task!r}", file=sys.stderr)


def _checked_settings(args: argparse.Namespace) -> list[tuple[str, float]]:
    """The (policy, threshold) runs of ``--policy`` x ``--threshold``, each checked with the run's
    settings before the model loads. ``default`` is the default policy; no ``--threshold``: the
    default threshold; policies that read no threshold (``ar``, ``fixed``) run once."""
    from clover.engine import SamplingParams  # deferred: loads torch, not for clover --help
    from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD, POLICIES  # deferred: loads torch

    names = [p.strip() for p in args.policy.split(",") if p.strip()]
    policies = [DEFAULT_POLICY if p == "default" else p for p in names]
    bad = [p for p in policies if p not in POLICIES]
    if bad or not policies:
        known = ", ".join(["default", *sorted(POLICIES)])
        raise SystemExit(f"clover: unknown policy {bad or args.policy!r}; choose from {known}")
    try:
        taus = [float(t) for t in args.threshold.split(",") if t.strip()] if args.threshold else [DEFAULT_THRESHOLD]
    except ValueError:
        raise SystemExit(
            f"clover eval: --threshold takes numbers separated by commas, not {args.threshold!r}"
        ) from None
    runs = list(dict.fromkeys((p, t) for p in policies for t in (taus if POLICIES[p].reads_threshold else taus[:1])))
    try:  # the settings every column decodes with
        for p, t in runs:
            SamplingParams(policy=p, threshold=t, block_size=args.block_size)
    except ValueError as e:
        raise SystemExit(f"clover eval: {e}") from None
    return runs


def _add_aup(results: list[dict]) -> None:
    """Each result gets its policy's AUP (``clover.bench.aup``) over the thresholds of this run,
    from the pooled accuracy of every scored answer, against the best accuracy of the run."""
    y_max = max(100 * r["overall_acc"] for r in results)
    for r in results:
        sweep = [(x["tpf"], 100 * x["overall_acc"]) for x in results if x["policy"] == r["policy"]]
        r["aup"] = aup(sweep, y_max)


def result_tables(results: list[dict], title: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, columns, rows) of the tables: the headline figures, one column per run, then
    where the tool-call misses come from, then one row per run (``run_table``), then, for a
    task with name families, the gold names by where the answer's name ends (``edge_table``)."""
    head = ["metric", *map(_column, results)]
    figures = [
        [k, *[f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for r in results]]
        for k in results[0]
        if k != "policy" and k not in BREAKDOWNS and not isinstance(results[0][k], (dict, list))  # counts per kind
    ]
    misses = [
        [f"{label}: {k}", *[f"{100 * r[group].get(k, 0):.1f} %" for r in results]]
        for group, label in BREAKDOWNS.items()
        for k in results[0].get(group, {})  # each task reports the breakdowns it has
    ]
    where = "where tool-call misses come from (accuracy per message kind, tool and argument)"
    tables = [(title, head, figures), (where, ["", *head[1:]], misses), run_table(results)]
    if any(r.get("name_edges") for r in results):
        tables.append(edge_table(results))
    return tables


def edge_table(results: list[dict]) -> tuple[str, list[str], list[list[str]]]:
    """(title, columns, rows) of the gold names per family and run, by how the answer's name
    compares (``evaluate.name_edge``: right, cut short, run long, overlapping, another span of
    the message, missing), with a total row per run."""
    from clover.airspace.evaluate import EDGE_KINDS

    columns = ["run", "name family", "names", *[k.replace("_", " ") for k in EDGE_KINDS]]
    rows = []
    for r in results:
        edges, held = r.get("name_edges") or {}, set(r.get("held_out_families", ()))
        total = dict.fromkeys(EDGE_KINDS, 0)
        for family, counts in sorted(edges.items(), key=lambda kv: (kv[0] in held, kv[0])):
            rows.append(
                [
                    _column(r),
                    family + (" (held out)" if family in held else ""),
                    str(sum(counts.values())),
                    *[str(counts.get(k, 0)) for k in EDGE_KINDS],
                ]
            )
            for k in EDGE_KINDS:
                total[k] += counts.get(k, 0)
        rows.append([_column(r), "all", str(sum(total.values())), *[str(total[k]) for k in EDGE_KINDS]])
    return "gold names of the tool calls by where the answer's name ends (counts)", columns, rows


# the per-run table's accuracy columns: (result key, the key counting its answers, heading, decimals)
RUN_COLUMNS = [
    ("exact_match", "n", "tool calls", 1),
    ("text_acc", "text_turns", "words", 1),
    ("multiturn_acc", "multiturn_n", "conversations", 0),
    ("decision_group_acc", "decision_groups", "decision groups", 0),
    ("plain_acc", "plain_n", "plain text", 0),
]


def run_table(results: list[dict]) -> tuple[str, list[str], list[list[str]]]:
    """(title, columns, rows) of one row per run: its policy and τ, exact match per kind of turn
    (the number of answers in brackets; kinds this run did not ask are left out), all turns, TPF
    and AUP (given once per policy: it scores the policy's whole sweep)."""
    from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD, POLICIES  # deferred: loads torch

    first = results[0]
    kinds = [c for c in RUN_COLUMNS if first.get(c[1])]
    columns = ["policy", "τ", *[f"{head} ({first[count]})" for _, count, head, _ in kinds], "all turns", "TPF", "AUP"]
    rows, seen = [], set()
    for r in results:
        name = r["policy"].split("+")[0]
        reads = POLICIES[name].reads_threshold
        default = name == DEFAULT_POLICY and r["threshold"] == DEFAULT_THRESHOLD
        label = r["policy"] + (" (default)" if default else "")
        accs = [f"{100 * r[key]:.{d}f} %" for key, _, _, d in kinds]
        aup_cell = "" if r["policy"] in seen else f"{r['aup']:.1f}"
        seen.add(r["policy"])
        rows.append(
            [
                label,
                f"{r['threshold']:g}" if reads else "-",
                *accs,
                f"{100 * r['overall_acc']:.1f} %",
                f"{r['tpf']:.2f}",
                aup_cell,
            ]
        )
    return "one row per run: exact match by kind of turn (answers in brackets)", columns, rows


def _column(r: dict) -> str:
    from clover.engine.policies import POLICIES  # deferred: loads torch, not for clover --help

    name = r["policy"].split("+")[0]
    return r["policy"] + (f" τ {r['threshold']:g}" if POLICIES[name].reads_threshold else "")


def _add_decoding_args(p) -> None:
    """How the turns are decoded and asked: the grammar, the tool lists, grounded replies, span ends."""
    p.add_argument(
        "--grammar",
        choices=["on", "off", "both", "ungrounded"],
        default="on",
        help="on (default): decode the tool-call turns as the server does, under the tool-call grammar of their "
        "tools with x-grounded arguments copied from the conversation; off: the model alone; both: each policy "
        "both ways; ungrounded: the grammar without grounding",
    )
    p.add_argument(
        "--tool-lists",
        choices=["standard", "varied"],
        default="standard",
        help="varied: also ask each tool-call turn with its tool list as agent frameworks send it "
        "(a subset, another order, held-out descriptions, schema details, all at once, the needed tool missing), "
        "exact match per kind beside the standard list's",
    )
    p.add_argument("--tool-seed", type=int, default=0, help="the seed the varied tool lists are drawn from")
    p.add_argument(
        "--grounded-reply",
        action="store_true",
        help="hold every reply in words to its conversation's numbers, ids and names, as a request with "
        "grounded_reply (docs/grounding.md, Grounded replies; needs --grammar on)",
    )
    p.add_argument(
        "--ends",
        choices=["token", "span"],
        help="where a grounded string ends (--grammar on): token, the model's next token; span, the ways it may "
        "go on scored whole (docs/grounding.md, Where a span ends); default: the grammar's",
    )


def register(sub) -> None:
    _count = int_at_least(0)

    p = sub.add_parser("eval", help="evaluate a model on a task")
    p.add_argument(
        "task",
        nargs="?",
        default=DEFAULT_TASK,
        choices=[*TASKS, *ALIASES],
        help="airspace (default): the bundled model's task (extraction tools, held-out name families, "
        "follow-ups, plain text); airspace2: its former name",
    )
    p.add_argument("--model", help="checkpoint directory (default: the bundled model)")
    p.add_argument(
        "--policy",
        default="default",
        help="'default' (the default policy) or a registered policy's name (an unknown one lists them); several "
        "comma-separated: one column each",
    )
    p.add_argument(
        "--threshold",
        help="confidence to commit a position (default: the default policy's); several comma-separated: a sweep "
        "(each policy that reads a threshold runs at each, and gets its AUP over the sweep)",
    )
    p.add_argument("--block-size", type=int, help="tokens per block (default: the model's)")
    p.add_argument("--split", default="test", choices=["train", "validation", "test"], help="the corpus split to score")
    p.add_argument("--n", type=_count, default=200, help="tool-call turns")
    p.add_argument("--groups", type=_count, default=50, help="decision groups")
    p.add_argument(
        "--text", type=_count, default=100, help="turns answered in words, and as many chats offering no tools"
    )
    p.add_argument(
        "--multiturn", type=_count, default=100, help="conversations with earlier turns (the last turn is scored)"
    )
    p.add_argument("--plain", type=_count, default=20, help="plain-text prompts continued without the chat template")
    add_threads_arg(p)
    add_device_args(p)
    _add_decoding_args(p)
    p.add_argument("--json", action="store_true", help="print the figures as JSON instead of tables")
    p.add_argument(
        "--results",
        metavar="PATH",
        help="also write a result file here: the command, the commit, the "
        "machine, the date, the figures and the tables (as benchmarks/results/ holds them)",
    )
    p.add_argument("--errors", metavar="PATH", help="write the failed tool-call turns here (JSON lines)")
    p.add_argument(
        "--cases",
        metavar="JSONL",
        help="score these messages instead of the split's tool-call turns: "
        '{"message", "gold", "system"?} per line, e.g. benchmarks/operator_messages.jsonl',
    )
    p.set_defaults(func=cmd_eval)
