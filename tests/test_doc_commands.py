"""Every ``clover …`` command in a fenced code block of README.md and docs/*.md works as written.

Each one (lines ending in a backslash joined, ``python -m clover`` and ``$(clover …)`` included)
is parsed by the command line's own parser, ``clover.cli.build_parser``, then put through the
checks its command makes before it loads a model (policy names and thresholds, the training
recipe), so an unknown flag, a missing or extra value, or a value outside the choices fails with
the page and line. The cheap ones (help, ``tools``, ``info``, ``export``, ``convert``,
``quantize`` of the bundled model) also run for real, in a subprocess, in the order the page gives
them, in a temporary directory per page; ``DIR`` given to ``--model`` stands for the bundled model.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shlex
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from clover.cli import COMMANDS, build_parser

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BUNDLED = ROOT / "clover" / "assets" / "default"
NOT_SHELL = {"python", "json", "jinja", "text"}  # fenced blocks that hold no commands
CHEAP = {"tools", "info", "export", "convert", "quantize"}  # seconds each on the bundled model
READS = ("--model", "--from")  # the flags naming what a cheap command reads: it runs when that exists


@dataclass(frozen=True)
class DocCommand:
    where: str  # "docs/page.md:LINE"
    text: str  # the command line as the page gives it (continuations joined)
    argv: tuple[str, ...]  # what follows ``clover``, up to the first shell operator


def shell_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, line) of each line in a fenced block meant for a shell, with lines
    ending in a backslash joined to the next."""
    out, lang, pending, start = [], None, None, 0
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith("```"):
            lang = s[3:].strip() if lang is None else None
            continue
        if lang is None or lang in NOT_SHELL:
            continue
        if pending is None:
            pending, start = "", n
        pending += (" " if pending else "") + s.removesuffix("\\").strip()
        if not s.endswith("\\"):
            out.append((start, pending))
            pending = None
    return out


def _words(line: str) -> list[str]:
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True  # comments ("# the bundled model") are dropped
    return list(lex)


def clover_argv(line: str) -> list[list[str]]:
    """The argument lists of the ``clover`` commands on a shell line: the line's own command
    (after ``VAR=value`` assignments; ``clover``, ``.../clover`` or ``... -m clover``) and each
    ``$(clover …)`` inside it."""
    found = [_words(m) for m in re.findall(r"\$\(\s*(clover\s[^)]*)\)", line)]
    found = [w[1:] for w in found if w]
    try:
        words = _words(line)
    except ValueError:  # an unclosed quote: not a command line
        return found
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", words[0]):
        words = words[1:]
    if words and (words[0] == "clover" or words[0].endswith("/clover")):
        rest = words[1:]
    elif "-m" in words and words.index("-m") + 1 < len(words) and words[words.index("-m") + 1] == "clover":
        rest = words[words.index("-m") + 2 :]
    else:
        return found
    ops = [i for i, w in enumerate(rest) if re.fullmatch(r"[;&|<>()]+", w)]
    return [rest[: ops[0]] if ops else rest, *found]


def collect(page: Path, text: str | None = None) -> list[DocCommand]:
    text = page.read_text(encoding="utf-8") if text is None else text
    name = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
    return [DocCommand(f"{name}:{n}", line, tuple(argv)) for n, line in shell_lines(text) for argv in clover_argv(line)]


@cache
def _parser():
    return build_parser()


def problem(argv: tuple[str, ...]) -> str | None:
    """What the parser, or the command's checks before it loads a model, say is wrong; None when
    the command is fine."""
    err = io.StringIO()
    try:
        with redirect_stderr(err), redirect_stdout(io.StringIO()):
            args = _parser().parse_args(list(argv))
    except SystemExit as e:
        if e.code in (0, None):  # --help, --version
            return None
        return (err.getvalue().strip().splitlines() or [str(e.code)])[-1]
    try:
        _settings_check(args)
    except SystemExit as e:
        return str(e.code)
    except ValueError as e:
        return str(e)
    return None


def _settings_check(args) -> None:
    """The checks a command makes on its flags before it loads a model."""
    from clover.commands.common import sampling_params, take_model_positional

    take_model_positional(args) if hasattr(args, "model_dir") else None
    if args.command == "eval":
        from clover.commands.eval import _checked_settings
        from clover.data.task import ALIASES, DEFAULT_TASK

        _checked_settings(args)
        if args.task in ALIASES:  # accepted for one release, with a note: the docs name the task
            raise SystemExit(f"{args.task!r} is the task's former name: write {ALIASES[args.task]}")
        if args.model is None and args.task != DEFAULT_TASK:  # what `clover eval` notes, as a doc error
            raise SystemExit(
                f"the bundled model was trained for {DEFAULT_TASK!r}, not {args.task!r}: evaluate "
                f"{DEFAULT_TASK}, or name the model this command is for with --model"
            )
    elif args.command == "train":
        from clover.data.task import DEFAULT_TASK, TASKS, all_recipes, canonical

        if canonical(args.recipe) != args.recipe:  # accepted for one release, with a note: the docs name the recipe
            raise SystemExit(f"{args.recipe!r} is a former name: write --recipe {canonical(args.recipe)}")
        if args.recipe not in all_recipes():
            raise SystemExit(f"unknown recipe {args.recipe!r}; choose from {sorted(all_recipes())}")
        task = next(t for t in sorted(TASKS, key=len, reverse=True) if args.recipe.split("-")[0] == t)
        if args.init_from and (ROOT / args.init_from).resolve() == BUNDLED.resolve() and task != DEFAULT_TASK:
            raise SystemExit(
                f"--init-from the bundled model (task {DEFAULT_TASK!r}) with a recipe of task {task!r}: "
                f"continue it with --recipe {DEFAULT_TASK}"
            )
    elif hasattr(args, "max_tokens") and hasattr(args, "policy"):  # generate, chat
        sampling_params(args)


def rejected(commands: list[DocCommand]) -> list[str]:
    return [f"{c.where}: clover {shlex.join(c.argv)}\n    {p}" for c in commands if (p := problem(c.argv))]


def test_the_collector_finds_the_commands_in_every_form():
    page = ROOT / "docs" / "example.md"
    text = "\n".join(
        [
            "```bash",
            "OMP_NUM_THREADS=1 clover eval airspace2 --n 5 \\",
            "    --json > out.json   # a comment",
            'curl -d "{\\"tools\\": $(clover tools airspace2 --json)}" http://x',
            "torchrun --nproc_per_node=2 -m clover train --recipe airspace",
            "# clover serve: a comment, not a command",
            "```",
            "```python",
            "from clover import LLM  # clover serve",
            "```",
            "clover info  (prose, not a block)",
        ]
    )
    got = [(c.where, c.argv) for c in collect(page, text)]
    assert got == [
        ("docs/example.md:2", ("eval", "airspace2", "--n", "5", "--json")),
        ("docs/example.md:4", ("tools", "airspace2", "--json")),
        ("docs/example.md:5", ("train", "--recipe", "airspace")),
    ]


@pytest.mark.parametrize(
    "line, says",
    [
        ("clover eval airspace2 --json out.json", "unrecognized arguments: out.json"),
        ("clover generate hi --regex A B", "unrecognized arguments: B"),
        ("clover generate --chat", "required: prompt"),
        ("clover eval airspace3", "invalid choice: 'airspace3'"),
        ("clover eval airspace2 --n 5", "'airspace2' is the task's former name: write airspace"),
        ("clover eval airspace2 --policy ar,bogus", "unknown policy"),
        ("clover generate hi --policy bogus", "bogus"),
        ("clover train --recipe nope --out RUN", "unknown recipe 'nope'"),
        ("clover train --recipe airspace2 --init-from clover/assets/default", "former name: write --recipe airspace"),
        ("clover export gguf --out F --type q5", "invalid choice: 'q5'"),
        ("clover bench decode --json", "expected one argument"),
        ("clover serve --nope", "unrecognized arguments: --nope"),
        ("clover train --data chats.jsonl [--init-from DIR]", "unrecognized arguments"),
    ],
)
def test_a_command_the_parser_rejects_is_reported_with_its_page_and_line(line, says):
    page = ROOT / "docs" / "example.md"
    commands = collect(page, f"text\n```bash\n{line}\n```\n")
    (report,) = rejected(commands)
    assert report.startswith("docs/example.md:3: clover ") and says in report, report


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_documented_command_parses(page):
    bad = rejected(collect(page))
    assert not bad, f"{len(bad)} command(s) in {page.name} that clover rejects:\n" + "\n".join(bad)


def test_the_pages_document_commands():
    """The collector sees the pages' commands (an empty harvest would pass the test above)."""
    commands = [c for p in PAGES for c in collect(p)]
    assert len(commands) >= 40
    assert {c.argv[0] for c in commands} >= {"eval", "bench", "export", "convert", "train", "quantize", "tools"}
    runs = {c.argv[0] for c in commands if _runnable(c.argv, ROOT / "nowhere")}
    assert runs >= {"tools", "info", "export", "quantize"}
    assert sum(len(prose_spans(p)) for p in PAGES) >= 80  # and the synopses in running text


def test_every_command_has_help():
    """``clover --help`` and ``clover COMMAND --help`` (the README's way to every flag) print."""
    for name in [None, *(m.rsplit(".", 1)[1] for m in COMMANDS)]:
        out = io.StringIO()
        with pytest.raises(SystemExit) as e, redirect_stdout(out):
            _parser().parse_args([name, "--help"] if name else ["--help"])
        assert e.value.code == 0 and "usage: clover" in out.getvalue()


def _runnable(argv: tuple[str, ...], cwd: Path) -> list[str] | None:
    """The command as it runs in ``cwd`` (repository paths made absolute, ``--model DIR`` the
    bundled model), or None when it is not a cheap one or what it reads is not there."""
    if not argv or not (argv[0] in CHEAP or "--help" in argv or "-h" in argv):
        return None
    out = list(argv)
    for i, w in enumerate(out):
        if i > 0 and out[i - 1] == "--model" and w == "DIR":
            out[i] = str(BUNDLED)
        elif "/" in w and not Path(w).is_absolute() and (ROOT / w).exists() and not (cwd / w).exists():
            out[i] = str(ROOT / w)
    for flag in READS:
        if flag in out and not Path(cwd, out[out.index(flag) + 1]).exists():
            return None
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_cheap_commands_run(page, tmp_path):
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    seen = set()
    for c in collect(page):
        argv = _runnable(c.argv, tmp_path)
        if argv is None or c.argv in seen:
            continue
        seen.add(c.argv)
        r = subprocess.run(
            [sys.executable, "-m", "clover", *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        said = f"{c.where}: clover {shlex.join(c.argv)} exited {r.returncode}:\n{r.stderr[-2000:]}"
        assert r.returncode == 0 and "Traceback" not in r.stderr, said
        if "--json" in argv:
            json.loads(r.stdout)  # what --json promises


# a span of prose naming what clover does not have, on purpose
NOT_THERE = {"clover convert --bits": "docs/quantization.md, 'Not done'"}


def _subcommands(parser) -> dict | None:
    return next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def prose_problems(span: str) -> list[str]:
    """What is wrong with a ``clover …`` synopsis in running text (``--bits 8\\|4``, ``[--json]``):
    a command that does not exist, a flag its parser lacks, a value outside a flag's choices.
    Placeholders (``DIR``, ``...``) and the number of values are not checked."""
    words = span.replace("\\|", "|").split()[1:]
    parsers, i = [_parser()], 0
    while i < len(words) and all(_subcommands(p) for p in parsers) and re.fullmatch(r"[a-z][\w.|-]*", words[i]):
        names = words[i].split("|")
        unknown = [n for p in parsers for n in names if n not in _subcommands(p)]
        if unknown:
            return [f"no command {unknown[0]!r}"]
        parsers, i = [_subcommands(p)[n] for p in parsers for n in names], i + 1
    out = []
    for p in parsers:
        flags = {o: a for a in p._actions for o in a.option_strings}
        for j, w in enumerate(words):
            if not (m := re.match(r"[\[(]*(--?[a-z][\w-]*)", w)):
                continue
            action = flags.get(m.group(1))
            if action is None:
                out.append(f"{p.prog}: no flag {m.group(1)}")
            elif action.choices and "=" not in w and j + 1 < len(words):
                values = words[j + 1].strip("[](),").split("|")
                if all(v and not v.startswith("-") and not v.isupper() and "." * 3 not in v for v in values):
                    bad = [v for v in values if _typed(action, v) not in action.choices]
                    out += [f"{p.prog} {m.group(1)}: {v!r} is not one of {list(action.choices)}" for v in bad]
    return out


def _typed(action, value: str):
    try:
        return (action.type or str)(value)
    except (ValueError, TypeError, argparse.ArgumentTypeError):
        return value


def prose_spans(page: Path) -> list[tuple[str, str]]:
    """("page:line", span) of each ``clover …`` code span outside the fenced blocks."""
    out, fenced = [], False
    for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            out += [(f"{page.relative_to(ROOT)}:{n}", s) for s in re.findall(r"`(clover [^`]+)`", line)]
    return out


@pytest.mark.parametrize(
    "span, says",
    [
        ("clover bench decode\\|nope [--json PATH]", "no command 'nope'"),
        ("clover serve [--port 8000] [--hots H]", "no flag --hots"),
        ("clover info [--bits 16\\|8\\|3]", "'3' is not one of [16, 8, 4]"),
        ("clover info --bits eight", "'eight' is not one of [16, 8, 4]"),
        ("clover generate\\|chat --policy P --device auto\\|gpu", "'gpu' is not one of"),
    ],
)
def test_a_wrong_synopsis_in_prose_is_reported(span, says):
    assert any(says in p for p in prose_problems(span)), prose_problems(span)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_named_in_prose_exists(page):
    bad = [f"{where}: `{s}`: {p}" for where, s in prose_spans(page) if s not in NOT_THERE for p in prose_problems(s)]
    assert not bad, "\n".join(bad)
