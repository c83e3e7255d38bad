"""Result files: what a benchmark or an evaluation measured, and where, as one JSON file.

A result file holds the command line as typed (``clover bench decode --threads 1 …`` or
``python benchmarks/greetings.py …``), the git commit of the checkout it ran from (and whether
the tree had changes other than result files and pages), the machine (CPU model, cores, torch version and
threads), the machine's load average when the command started and when it wrote the file, the date,
the figures, and every table the command printed, each cell exactly the string printed::

    {"command": "clover bench context --threads 1 …", "commit": "bb516b2…", "dirty": false,
     "date": "2026-12-06T18:02:11Z", "machine": {"cpu": "…", "cores": 2, "torch": "2.13.0", …},
     "load": {"start": [0.12, 0.3, 0.41], "end": [1.02, 0.61, 0.5]},
     "tables": [{"title": "…", "columns": ["…"], "rows": [["…"]], "notes": []}],
     "figures": {…}}

A path on the measuring machine is written relative to it (the checkout as ``.``, the home
folder as ``~``, the temporary folder as ``$TMPDIR``), so a result file names no local folder.

A command (or a benchmark script) makes a ``Recorder`` as it starts: it keeps the command line,
the load average at the start and the tables. ``clover.bench.print_table(recorder, …)`` records
each table it prints there, and ``clover.bench.write_json(recorder, path, figures)`` writes the
file (``Recorder.write``). ``markdown_table`` renders a recorded table as the docs show it;
``benchmarks/docs_tables.py`` puts those renderings between marker comments in README.md and
docs/*.md.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout, when clover runs from one
RESULTS_DIR = "benchmarks/results"  # result files the docs quote; their changes leave a tree clean


def load_average() -> list[float] | None:
    """The 1, 5 and 15-minute load averages, rounded to 2 places; None where the system has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def cell(v) -> str:
    """A value as a table prints it: floats to 3 significant figures (from 1,000 up, whole, with
    thousands separators rather than an exponent), the rest as ``str``."""
    if not isinstance(v, float):
        return str(v)
    return f"{v:,.0f}" if 1000 <= abs(v) < 1e15 else f"{v:.3g}"


def table(title: str, columns: list[str], rows: list[list], notes: list[str] = ()) -> dict:
    """A table as a result file keeps it: every cell the string printed (``cell``)."""
    return {
        "title": str(title),
        "columns": [str(c) for c in columns],
        "rows": [[cell(v) for v in r] for r in rows],
        "notes": [str(n) for n in notes],
    }


class Recorder:
    """One command's result file in the making: the command as typed (``clover_argv``: the
    arguments of a ``clover`` command, so a file names it even when run in-process; None: this
    process's ``sys.argv``), the load average when it started, and every table it printed, in
    order. The command line makes one per command (``args.recorder``), a script one in its ``main``."""

    def __init__(self, clover_argv: list[str] | None = None):
        self.command = command_line(clover_argv)
        self.start_load = load_average()
        self.tables: list[dict] = []

    def record(self, title: str, columns: list[str], rows: list[list], notes: list[str] = ()) -> dict:
        """Keep a table for the result file (cells as printed) and return it."""
        t = table(title, columns, rows, notes)
        self.tables.append(t)
        return t

    def result(self, figures) -> dict:
        """The result file's content: ``figures`` and the tables recorded so far."""
        commit, dirty = git_state()
        return {
            "command": self.command,
            "commit": commit,
            "dirty": dirty,
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": machine(),
            "load": {"start": self.start_load, "end": load_average()},
            "tables": [dict(t) for t in self.tables],
            "figures": figures,
        }

    def write(self, path: str | Path, figures) -> dict:
        """Write ``figures`` and the tables recorded so far as a result file at ``path`` (local
        folders scrubbed: ``scrub``)."""
        r = scrub(self.result(figures))
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(r, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        return r


def command_line(clover_argv: list[str] | None = None) -> str:
    """The command as typed: ``clover …`` for the command line (``python -m clover`` included),
    ``python PATH …`` for a script, PATH relative to the checkout when it lies inside it."""
    if clover_argv is not None:
        return shlex.join(["clover", *clover_argv])
    argv0 = sys.argv[0] if sys.argv else ""
    p = Path(argv0)
    if p.name == "clover" or (p.name == "__main__.py" and p.parent.name == "clover"):
        head = ["clover"]
    elif p.suffix == ".py":
        try:
            rel = p.resolve().relative_to(ROOT).as_posix()
        except ValueError:
            rel = argv0
        head = ["python", rel]
    else:
        head = [argv0 or "python"]
    return shlex.join([*head, *sys.argv[1:]])


def git_state(root: Path = ROOT) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the checkout at ``root``; (None, None) when it is not a git checkout
    (an installed package). Changes to result files (``benchmarks/results``) and to pages
    (``*.md``) do not count as dirty: they change no figure, and writing a result file or
    regenerating a page's tables must not mark the next result."""

    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.stdout if r.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit or not (root / ".git").exists():
        return None, None
    status = git("status", "--porcelain", "--", ".", f":(exclude){RESULTS_DIR}", ":(exclude,glob)**/*.md")
    return commit.strip(), None if status is None else bool(status.strip())


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    """The machine a result was measured on. torch's version and threads only when the command
    loaded torch (importing it here would cost a listing command seconds)."""
    m = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        m["torch"] = torch.__version__
        m["threads"] = torch.get_num_threads()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            m["gpu"] = torch.cuda.get_device_name()
    return m


def local_places() -> list[tuple[str, str]]:
    """(folder, how a result file writes it): the checkout, the temporary folder and the home
    folder of this machine, longest first so the most specific one is replaced."""
    places = [(str(ROOT), "."), (tempfile.gettempdir(), "$TMPDIR"), (str(Path.home()), "~")]
    return sorted(((p.rstrip("/"), s) for p, s in places if len(p.rstrip("/")) > 1), key=lambda x: -len(x[0]))


def scrub(value, places: list[tuple[str, str]] | None = None):
    """``value`` (a result's JSON) with every local folder in its strings written as
    ``local_places`` says; other values unchanged."""
    places = local_places() if places is None else places
    if isinstance(value, str):
        for folder, shown in places:
            value = re.sub(re.escape(folder) + r"(?=/|\b|$)", lambda _m, s=shown: s, value)
        return value
    if isinstance(value, dict):
        return {k: scrub(v, places) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v, places) for v in value]
    return value


def read_result(path: str | Path, shown: str | None = None) -> dict:
    """A result file, checked for the keys a table needs; a clear error otherwise (naming the file
    as ``shown``, when given)."""
    shown = shown or str(path)
    try:
        r = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{shown}: no such result file") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{shown}: not valid JSON ({e})") from None
    missing = [k for k in ("command", "commit", "tables", "figures") if not isinstance(r, dict) or k not in r]
    if missing:
        raise ValueError(f"{shown}: not a result file (no {', '.join(missing)})")
    return r


def _md(s: str) -> str:
    """A cell for a markdown table: pipes escaped, line breaks as spaces."""
    return " ".join(str(s).split("\n")).replace("|", "\\|")


def _pick(names: list[str], want: list[str] | None, what: str) -> list[int]:
    """Indexes of ``want`` in ``names``, each one a name (first match) or else an index from 0
    (negative from the end); all when None."""
    if want is None:
        return list(range(len(names)))
    out = []
    for w in want:
        if w in names:
            out.append(names.index(w))
        elif w.strip().lstrip("-").isdigit():
            i = int(w)
            if not -len(names) <= i < len(names):
                raise ValueError(f"{what} {i} out of range: the table has {len(names)}")
            out.append(i % len(names))
        else:
            raise ValueError(f"no {what} {w!r}; the table has {', '.join(map(repr, names))}")
    return out


def markdown_table(columns: list[str], rows: list[list[str]]) -> str:
    """``| a | b |`` / ``| --- | --- |`` / one line per row, as the docs write tables."""
    if any(len(r) != len(columns) for r in rows):
        raise ValueError(f"every row needs {len(columns)} cells, one per column")
    lines = ["| " + " | ".join(map(_md, columns)) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(map(_md, r)) + " |" for r in rows]
    return "\n".join(lines)


def select(table: dict, columns: list[str] | None = None, rows: list[str] | None = None) -> tuple[list, list]:
    """A recorded table's columns and rows, cut to ``columns`` (indexes or titles) and ``rows``
    (indexes or first cells), in the order asked."""
    cols = _pick(table["columns"], columns, "column")
    picked = _pick([r[0] if r else "" for r in table["rows"]], rows, "row")
    return [table["columns"][i] for i in cols], [[table["rows"][j][i] for i in cols] for j in picked]


def short_commit(r: dict) -> str:
    """A result's commit as the docs name it: 10 hex digits, ``+`` when the tree had changes."""
    return (r.get("commit") or "no commit")[:10] + ("+" if r.get("dirty") else "")


def provenance(r: dict) -> str:
    """The line under a table: the command, the commit (``+`` when the tree had changes), the date,
    the machine and its 1-minute load average at the start and the end (where the file has them)."""
    commit = short_commit(r)
    m = r.get("machine") or {}
    load = r.get("load") or {}
    start, end = load.get("start"), load.get("end")
    where = ", ".join(
        x
        for x in (
            m.get("gpu") or m.get("cpu"),
            f"{m['cores']} cores" if m.get("cores") else None,
            f"{m['threads']} thread{'s' * (m['threads'] != 1)}" if m.get("threads") else None,
            f"load {start[0]:.2f} to {end[0]:.2f}" if start and end else None,
        )
        if x
    )
    date = (r.get("date") or "")[:10]
    return f"<sub>`{r['command']}` at {commit}, {date}{'; ' + where if where else ''}</sub>"


def render(r: dict, index: int = 0, columns: list[str] | None = None, rows: list[str] | None = None) -> str:
    """Table ``index`` of result ``r`` as markdown, then the line naming where it came from."""
    tables = r["tables"]
    if not -len(tables) <= index < len(tables):
        raise ValueError(f"no table {index}: the result has {len(tables)} (command: {r['command']})")
    cols, body = select(tables[index], columns, rows)
    return markdown_table(cols, body) + "\n\n" + provenance(r)
