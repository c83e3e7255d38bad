"""``benchmarks/remeasure.sh`` and its list ``benchmarks/remeasure.txt``: every result file the docs
quote has a line, every line's command parses with its own parser and writes the file its name
says, and the script runs the lines asked for one after another, then regenerates the tables."""

from __future__ import annotations

import io
import os
import re
import shlex
import subprocess
import sys
from contextlib import redirect_stderr
from pathlib import Path

import pytest

from clover.cli import build_parser

ROOT = Path(__file__).parents[1]
SCRIPT = ROOT / "benchmarks" / "remeasure.sh"
GROUPS = {"cpu", "idle", "ranks", "llamacpp", "sglang", "stage18"}


def entries(path: Path = ROOT / "benchmarks" / "remeasure.txt") -> list[tuple[str, int, str, list[str]]]:
    out = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, minutes, group, command = line.split(None, 3)
            out.append((name, int(minutes), group, shlex.split(command)))
    return out


def _sh(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )


def test_every_line_writes_the_result_file_its_name_says_and_names_a_known_group():
    names = [n for n, *_ in entries()]
    assert len(names) == len(set(names))
    for name, minutes, group, argv in entries():
        assert group in GROUPS and minutes > 0, name
        assert argv[0] in ("clover", "python"), name
        flag = "--results" if "--results" in argv else "--json"
        assert argv[argv.index(flag) + 1] == f"benchmarks/results/{name}.json", name


def test_every_result_file_in_the_checkout_has_a_line():
    listed = {n for n, *_ in entries()}
    files = {p.stem for p in (ROOT / "benchmarks" / "results").glob("*.json")}
    assert files <= listed, f"result files remeasure.txt does not rerun: {sorted(files - listed)}"


@pytest.mark.parametrize("name,argv", [(n, a) for n, _, _, a in entries()], ids=[n for n, *_ in entries()])
def test_every_command_parses(name, argv):
    if argv[0] == "clover":
        err = io.StringIO()
        with redirect_stderr(err):
            try:
                build_parser().parse_args(argv[1:])
            except SystemExit:
                pytest.fail(f"{name}: {shlex.join(argv)}: {err.getvalue().strip()}")
    else:
        assert (ROOT / argv[1]).is_file(), f"{name}: no script {argv[1]}"


def test_the_default_set_is_the_cpu_group_with_its_estimate_first():
    r = _sh("--dry-run")
    assert r.returncode == 0, r.stderr
    cpu = [(n, m) for n, m, g, _ in entries() if g == "cpu"]
    first, *lines = r.stdout.splitlines()
    assert first.startswith(f"remeasure.sh: {len(cpu)} command(s), about {sum(m for _, m in cpu)} minutes")
    assert [line.split()[0] for line in lines] == [n for n, _ in cpu]


def test_a_subset_by_name_or_group_and_an_unknown_name_refused():
    r = _sh("--dry-run", "decode", "idle")
    idle = [n for n, _, g, _ in entries() if g == "idle"]
    assert [line.split()[0] for line in r.stdout.splitlines()[1:]] == ["decode", *idle]
    bad = _sh("--dry-run", "decode", "no-such-result")
    assert bad.returncode == 2 and "no entry or group 'no-such-result'" in bad.stderr and "decode" in bad.stderr


def test_a_run_goes_one_by_one_reports_failures_skips_unset_variables_and_regenerates(tmp_path):
    marks = tmp_path / "order.txt"
    lines = [
        f"first 1 cpu python -c \"open('{marks}', 'a').write('first\\n')\"",
        'broken 1 cpu python -c "raise SystemExit(3)"',
        f"second 1 cpu python -c \"open('{marks}', 'a').write('second\\n')\"",
        "needs 1 cpu python benchmarks/greetings.py --model stage18=$CLOVER_TEST_UNSET_DIR",
    ]
    (tmp_path / "list.txt").write_text("# a test list\n" + "\n".join(lines) + "\n")
    env = {"REMEASURE_LIST": str(tmp_path / "list.txt"), "LOG_DIR": str(tmp_path / "logs"), "PYTHON": sys.executable}
    env = {**env, "TMPDIR": str(tmp_path)}
    os.environ.pop("CLOVER_TEST_UNSET_DIR", None)
    r = _sh(**env)
    assert r.returncode == 1  # one failed
    assert marks.read_text() == "first\nsecond\n"  # in order, the batch going on past the failure
    assert "broken FAILED (exit 3)" in r.stderr and "needs skipped: $CLOVER_TEST_UNSET_DIR is not set" in r.stderr
    assert re.search(r"done: first second; failed: broken; skipped: needs", r.stdout)
    assert "regenerating the docs' tables" in r.stdout and (tmp_path / "logs" / "first.log").exists()
