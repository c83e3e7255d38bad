"""Regenerate the tables in README.md and docs/*.md from the result files they name.

    python benchmarks/docs_tables.py           # rewrite every marked table (make docs-tables)
    python benchmarks/docs_tables.py --check   # exit 1, naming each table that differs from its file
    python benchmarks/docs_tables.py --list    # each result file: command, commit, date, pages, tables
    python benchmarks/docs_tables.py --rerun decisions context   # run their commands again, then rewrite

A marked table sits between two comments; everything between them is generated:

    <!-- results: benchmarks/results/context.json table 0 -->
    | … the table, then a line naming the command, the commit and the machine … |
    <!-- /results -->

After the path: ``table N`` (the N-th table the command printed, from 0; default 0),
``columns=A,B`` and ``rows=A,B`` (each a column's title or a row's first cell, else an index
from 0; default all; in the order given). Values with spaces are quoted:
``columns="tool calls %",TPF``. The result files are those ``clover bench … --json PATH``,
``clover eval … --results PATH`` and the scripts' ``--json PATH`` write (``clover.bench.results``).
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # clover from this tree when run as a script

from clover.bench.results import RESULTS_DIR, read_result, render, short_commit

ROOT = Path(__file__).parents[1]
OPEN = re.compile(r"^<!-- results: (?P<spec>.+?) -->\s*$")
CLOSE = re.compile(r"^<!-- /results -->\s*$")


def pages(root: Path = ROOT) -> list[Path]:
    return [p for p in (root / "README.md", *sorted((root / "docs").glob("*.md"))) if p.exists()]


@dataclass(frozen=True)
class Spec:
    path: str  # the result file, relative to the checkout
    table: int = 0
    columns: list[str] | None = None
    rows: list[str] | None = None


def parse_spec(spec: str) -> Spec:
    """``PATH [table N] [columns=A,B] [rows=A,B]`` → a Spec; a clear error for anything else."""
    try:
        words = shlex.split(spec)
    except ValueError as e:
        raise ValueError(f"cannot read {spec!r}: {e}") from None
    if not words:
        raise ValueError("no result file named")
    path, table, columns, rows = words[0], 0, None, None
    rest = words[1:]
    while rest:
        w = rest.pop(0)
        if w == "table" and rest and rest[0].isdigit():
            table = int(rest.pop(0))
        elif w.startswith("columns="):
            columns = [c.strip() for c in w.removeprefix("columns=").split(",") if c.strip()]
        elif w.startswith("rows="):
            rows = [r.strip() for r in w.removeprefix("rows=").split(",") if r.strip()]
        else:
            raise ValueError(f"{w!r} in {spec!r}: expected 'table N', 'columns=…' or 'rows=…'")
    return Spec(path, table, columns, rows)


@dataclass(frozen=True)
class Block:
    where: str  # "docs/page.md:LINE" of the opening marker
    spec: str
    start: int  # index of the opening marker's line
    end: int  # index of the closing marker's line
    body: str  # what sits between them now


def blocks(text: str, name: str) -> list[Block]:
    """Every marked table of a page, in order; an opening marker with no closing one (or a closing
    one with no opening one) is an error naming the line. Markers inside a fenced code block are
    text, not markers (a page may show one)."""
    lines, out, open_at, fenced = text.split("\n"), [], None, False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced:
            continue
        if OPEN.match(line):
            if open_at is not None:
                raise ValueError(f"{name}:{i + 1}: a results marker inside the one opened at line {open_at + 1}")
            open_at = i
        elif CLOSE.match(line):
            if open_at is None:
                raise ValueError(f"{name}:{i + 1}: '<!-- /results -->' with no '<!-- results: … -->' before it")
            spec = OPEN.match(lines[open_at])["spec"]
            out.append(Block(f"{name}:{open_at + 1}", spec, open_at, i, "\n".join(lines[open_at + 1 : i])))
            open_at = None
    if open_at is not None:
        raise ValueError(f"{name}:{open_at + 1}: '<!-- results: … -->' is never closed by '<!-- /results -->'")
    return out


def generate(spec: str, root: Path = ROOT) -> str:
    """What belongs between the markers for ``spec``."""
    s = parse_spec(spec)
    return render(read_result(root / s.path, s.path), s.table, s.columns, s.rows)


def refresh(text: str, name: str, root: Path = ROOT) -> tuple[str, list[str]]:
    """``text`` with every marked table regenerated, and where each one that changed sits."""
    lines, stale = text.split("\n"), []
    for b in reversed(blocks(text, name)):  # from the end, so earlier line numbers hold
        try:
            new = generate(b.spec, root)
        except ValueError as e:
            raise ValueError(f"{b.where}: {e}") from None
        if new != b.body:
            stale.append(f"{b.where} ({b.spec})")
            lines[b.start + 1 : b.end] = new.split("\n")
    return "\n".join(lines), stale[::-1]


def result_files(root: Path = ROOT) -> dict[str, Path]:
    """The result files in benchmarks/results, by name (the file's stem)."""
    return {f.stem: f for f in sorted((root / RESULTS_DIR).glob("*.json"))}


def rerun_argv(command: str) -> list[str]:
    """A result file's command as this interpreter runs it: ``clover …`` as ``python -m clover …``,
    ``python …`` with this Python (the environment the tables are regenerated in)."""
    words = shlex.split(command)
    if words[:1] == ["clover"]:
        return [sys.executable, "-m", "clover", *words[1:]]
    if words[:1] == ["python"]:
        return [sys.executable, *words[1:]]
    raise ValueError(f"cannot rerun {command!r}: a result's command starts with clover or python")


def _list(root: Path = ROOT) -> None:
    quoted: dict[str, list[str]] = {}
    for page in pages(root):
        name = page.relative_to(root).as_posix()
        for b in blocks(page.read_text(encoding="utf-8"), name):
            quoted.setdefault(Path(parse_spec(b.spec).path).stem, []).append(b.where)
    for name, f in result_files(root).items():
        r = read_result(f, f.relative_to(root).as_posix())
        print(f"{name}: {r['date']} at {short_commit(r)}: {r['command']}")
        print(f"    quoted by: {', '.join(quoted.get(name, [])) or 'no page'}")
        for i, t in enumerate(r["tables"]):
            print(f"    table {i}: {t['title']} ({len(t['rows'])} rows: {', '.join(t['columns'])})")


def _rerun(names: list[str], root: Path = ROOT) -> int:
    files = result_files(root)
    names = list(files) if names == ["all"] else names
    unknown = [n for n in names if n not in files]
    if unknown:
        raise SystemExit(f"docs_tables: no result file {', '.join(unknown)}; there are {', '.join(files)}")
    for n in names:
        command = read_result(files[n])["command"]
        print(f"docs_tables: {n}: {command}", file=sys.stderr)
        code = subprocess.run(rerun_argv(command), cwd=root).returncode
        if code:
            print(
                f"docs_tables: {n}: exit status {code}; its result file is left as the command left it", file=sys.stderr
            )
            return code
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 when a marked table is stale")
    ap.add_argument("--list", action="store_true", help="list the result files: command, commit, date, pages, tables")
    ap.add_argument(
        "--rerun",
        nargs="+",
        metavar="NAME",
        help="run these result files' commands again (NAME: a file's stem, or all), then regenerate every marked table",
    )
    args = ap.parse_args(argv)
    if args.list:
        _list()
        return 0
    if args.rerun and _rerun(args.rerun):
        return 1
    stale, errors, count = [], [], 0
    for page in pages():
        name = page.relative_to(ROOT).as_posix()
        text = page.read_text(encoding="utf-8")
        try:
            new, changed = refresh(text, name)
            count += len(blocks(text, name))
        except ValueError as e:
            errors.append(str(e))
            continue
        stale += changed
        if changed and not args.check:
            page.write_text(new, encoding="utf-8")
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    verb = "stale" if args.check else "regenerated"
    for s in stale:
        print(f"{verb}: {s}")
    print(f"{count} marked table(s), {len(stale)} {verb}", file=sys.stderr)
    return 1 if errors or (stale and args.check) else 0


if __name__ == "__main__":
    raise SystemExit(main())
