"""The bundled model's accuracy on the test split, as README.md, the model card and
docs/benchmarks.md show it: one command, one result file, five tables.

    python benchmarks/accuracy_tables.py --json benchmarks/results/accuracy.json
    python benchmarks/accuracy_tables.py --n 2 --text 1 --multiturn 1 --plain 1 --groups 1   # a smoke run

Five evaluations of ``clover eval airspace`` (``clover.airspace.scoring``) in one process:
the ``--n`` tool-call turns under ``ar`` and the default policy as the server decodes them (the
tool-call grammar, grounded arguments copied from the conversation) and under the default with
the model alone (no grammar); then the other turns (``--text`` replies in words and as many
chats without tools, ``--multiturn`` conversations, ``--plain`` plain texts, ``--groups``
decision groups) under ``ar`` and the default, as the server decodes them. The tool-call turns
run apart from the others so that their tokens per pass are their own.

Tables: 0, README.md's "what to expect" (the kinds of turn as rows, ``ar`` and the default as
columns); 1, docs/benchmarks.md's grounded arguments on the test split (one row per decoding);
2, the model card's accuracy (the tool-call figures, one column per decoding); 3, the model
card's replies in words and conversations per kind; 4, the gold names per family by where the
default's name ends (right, cut short, run long, another span: ``clover eval``'s table).
Replies in words, a conversation's last turn in words and plain text are judged by what they say
(``clover.airspace.textscore``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # clover from this tree when run as a script

from clover.bench import print_table, set_threads, write_json
from clover.bench.results import Recorder

# the five runs: (name, policy ("default": the default policy), grammar, the tool-call turns or the others)
RUNS = [
    ("ar calls", "ar", True, "calls"),
    ("default calls", "default", True, "calls"),
    ("default calls alone", "default", False, "calls"),
    ("ar rest", "ar", True, "rest"),
    ("default rest", "default", True, "rest"),
]


def measure(model, tok, args) -> dict[str, dict]:
    """The five evaluations' figures, by run name."""
    from clover.airspace.evaluate import evaluate_airspace  # deferred: torch
    from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD  # deferred: torch

    out = {}
    for name, policy, grammar, part in RUNS:
        counts = (
            dict(n=args.n, n_groups=0, n_text=0, n_multi=0, n_plain=0)
            if part == "calls"
            else dict(n=0, n_groups=args.groups, n_text=args.text, n_multi=args.multiturn, n_plain=args.plain)
        )
        policy = DEFAULT_POLICY if policy == "default" else policy
        out[name] = evaluate_airspace(
            model, tok, args.split, policy, DEFAULT_THRESHOLD, grammar=grammar, progress=True, **counts
        )
    return out


# the corpus's kinds of turn as the model card names them
KINDS = {
    "clarify": "a question for a missing argument",
    "missing_tool": "a decline: the tool is not offered",
    "no_tool": "small talk or a question out of scope",
    "no_tools": "a chat that offers no tools",
    "unserved": "a request no tool serves",
    "follow_up": "a request referring back (a call)",
    "tool_call": "a new request (one call)",
    "compound": "a new request (several calls)",
}


def _pct(x: float, digits: int = 0) -> str:
    return f"{100 * x:.{digits}f} %"


def _single_compound(r: dict) -> str:
    k = r["by_kind"]
    return f"{100 * k.get('tool_call', 0):.0f} / {100 * k.get('compound', 0):.0f} %"


def _names(r: dict) -> str:
    n = r["names_copied"]
    return f"{100 * n.get('trained', 0):.0f} / {100 * n.get('held out', 0):.0f} %"


def _invented(r: dict) -> str:
    return f"{r['ungrounded_args']} of {r['grounded_args']}"


def tables(f: dict[str, dict]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, columns, rows) of the five tables, from ``measure``'s figures."""
    from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD  # deferred: torch

    ar, d, alone = f["ar calls"], f["default calls"], f["default calls alone"]
    ar_rest, d_rest = f["ar rest"], f["default rest"]
    default = f"{DEFAULT_POLICY} τ {DEFAULT_THRESHOLD:g}"
    readme = [
        [
            f"tool calls, exact match ({d['n']} messages), the server's decoding",
            _pct(ar["exact_match"], 1),
            f"{_pct(d['exact_match'], 1)} at {d['tpf']:.1f} tokens per pass",
        ],
        [
            "the same, the model alone (--grammar off)",
            "-",
            f"{_pct(alone['exact_match'], 1)} at {alone['tpf']:.1f} tokens per pass",
        ],
    ]
    rest = [
        ("text_acc", "text_turns", "replies in words, the corpus's reply: small talk, declines, questions, no tools"),
        ("multiturn_acc", "multiturn_n", "conversations, last turn right (calls or the corpus's reply)"),
        ("plain_acc", "plain_n", 'plain text continued as the held-out line, numbers aside ("Drone 17 is ...")'),
        ("decision_group_acc", "decision_groups", "decision groups, all answers right"),
    ]
    readme += [[f"{label} ({d_rest[n]})", _pct(ar_rest[k]), _pct(d_rest[k])] for k, n, label in rest if d_rest.get(n)]
    grounded = [
        [
            label,
            _pct(r["exact_match"], 1),
            _single_compound(r),
            f"{r['tpf']:.2f}",
            _invented(r),
            _names(r),
            f"{100 * r['fields'].get('lat', 0):.0f}, {100 * r['fields'].get('lon', 0):.0f} %",
            _pct(r["fields"].get("radius_m", 0)),
        ]
        for label, r in (
            ("default, the model alone", alone),
            ("default, server's decoding (grounded)", d),
            ("ar, server's decoding (grounded)", ar),
        )
    ]
    card = [
        [
            "exact match (single / compound)",
            *[f"{_pct(r['exact_match'], 1)} ({_single_compound(r)})" for r in (d, ar, alone)],
        ],
        ["grounded arguments not in the message", *[_invented(r) for r in (d, ar, alone)]],
        ["names, trained / held-out families", *[_names(r) for r in (d, ar, alone)]],
        ["tokens per pass", *[f"{r['tpf']:.2f}" for r in (d, ar, alone)]],
    ]
    per_kind = [
        [f"{label}: {KINDS.get(k, k)}", str(n), _pct(ar_rest[by].get(k, 0)), _pct(d_rest[by].get(k, 0))]
        for by, label in (("text_by_kind", "reply in words"), ("multiturn_by_kind", "conversation, last turn"))
        for k, n in d_rest.get(by.replace("_by", "_n_by"), {}).items()
    ]
    per_kind += [
        [
            "replies in words that call no tool, whatever they say (not a score)",
            str(d_rest["text_turns"]),
            _pct(ar_rest["text_no_call"]),
            _pct(d_rest["text_no_call"]),
        ]
    ]
    return [
        (
            "the bundled model on the test split",
            ["measured on the test split", "ar (1 position per pass)", f"default: {default}"],
            readme,
        ),
        (
            f"grounded arguments: {d['n']} tool-call turns of the test split",
            [
                "decoding",
                "exact match",
                "single / compound",
                "TPF",
                "grounded args not in their source",
                "names: trained / held-out families",
                "lat, lon",
                "radius (as the world reads it)",
            ],
            grounded,
        ),
        (
            f"tool calls as the server decodes them ({d['n']} turns of the test split)",
            ["tool calls", f"default ({default})", "ar", "the model alone (default)"],
            card,
        ),
        (
            "replies in words and conversations by kind (test split), judged by what they say",
            ["kind", "turns", "ar", f"default ({default})"],
            per_kind,
        ),
        _edges(d),
    ]


def _edges(r: dict) -> tuple[str, list[str], list[list[str]]]:
    """Table 4: the test split's gold names per family under the default as the server decodes
    them, by where the answer's name ends (``clover eval``'s table of them, one run)."""
    from clover.commands.eval import edge_table

    title, columns, rows = edge_table([r])
    return (
        f"gold names by where the answer's name ends ({r['n']} turns of the test split, default, server's decoding)",
        columns[1:],
        [row[1:] for row in rows],
    )


def main(argv: list[str] | None = None) -> None:
    rec = Recorder()  # the result file: this command line, its start, the tables printed
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="checkpoint directory (default: the bundled model)")
    ap.add_argument("--split", default="test", choices=["train", "validation", "test"])
    ap.add_argument("--n", type=int, default=200, help="tool-call turns")
    ap.add_argument("--text", type=int, default=100, help="turns answered in words, and as many chats without tools")
    ap.add_argument("--multiturn", type=int, default=100, help="conversations with earlier turns")
    ap.add_argument("--plain", type=int, default=20, help="plain-text prompts")
    ap.add_argument("--groups", type=int, default=50, help="decision groups")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", metavar="PATH", help="write the result file here")
    args = ap.parse_args(argv)
    if args.n < 1 or min(args.text, args.multiturn, args.plain, args.groups) < 0:
        raise SystemExit("accuracy_tables: --n must be at least 1 and the other counts at least 0")
    if not any((args.text, args.multiturn, args.plain, args.groups)):
        raise SystemExit("accuracy_tables: --text, --multiturn, --plain and --groups are all 0: nothing but tool calls")
    from clover.commands.common import load_model_and_tokenizer  # deferred: torch

    set_threads(args.threads)
    model, tok = load_model_and_tokenizer(args.model, args.threads)
    figures = measure(model, tok, args)
    for title, columns, rows in tables(figures):
        print_table(rec, title, columns, rows)
    write_json(rec, args.json, figures)


if __name__ == "__main__":
    main()
