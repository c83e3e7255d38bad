"""Where `make test`'s time goes: the suite run as `make test` runs it, timed per phase, per folder and per test.

python benchmarks/test_times.py [--jobs N] [--slowest 25] [--json out.json] [-- PYTEST_ARGS ...]

Two phases, as the Makefile's ``test`` target: the tests not marked ``alone`` in ``--jobs``
processes (pytest-xdist; the default is one per core), then the ``alone`` ones in one process.
Each phase's wall time and outcome counts; each test folder's summed test time (what its tests
cost a process, setup and teardown included: under several processes the folders' sum exceeds the
wall time); and the slowest tests. Exits with pytest's status when a phase fails, so a timing that
hides a failure is never written as a result.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from clover.bench import print_table, write_json
from clover.bench.results import Recorder

ROOT = Path(__file__).resolve().parents[1]


def run_phase(marker: str, jobs: int, extra: list[str], xml: Path) -> tuple[int, float]:
    """pytest over the tests ``-m marker`` selects, in ``jobs`` processes (1: no xdist); (exit status, wall s)."""
    cmd = [sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider", "-m", marker, f"--junitxml={xml}"]
    cmd += ["-n", str(jobs)] if jobs > 1 else []
    t0 = time.perf_counter()
    rc = subprocess.run([*cmd, *extra], cwd=ROOT).returncode
    return rc, time.perf_counter() - t0


def cases(xml: Path) -> list[dict]:
    """Each test case of a junit XML file: name, folder, seconds and outcome."""
    if not xml.exists():
        return []
    out = []
    for tc in ET.parse(xml).getroot().iter("testcase"):
        outcome = "passed"
        for child in tc:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped" and outcome == "passed":
                outcome = "skipped"
        parts = (tc.get("classname") or "").split(".")
        folder = "/".join(parts[:2]) if len(parts) > 2 else parts[0]  # tests.engine.test_x -> tests/engine
        out.append(
            {
                "id": f"{'/'.join(parts)}.py::{tc.get('name')}",
                "folder": folder,
                "s": float(tc.get("time") or 0),
                "outcome": outcome,
            }
        )
    return out


def main() -> int:
    rec = Recorder()  # the result file: this command line, its start, the tables printed
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes for the parallel phase")
    ap.add_argument("--slowest", type=int, default=25, help="how many of the slowest tests to list")
    ap.add_argument("--json")
    ap.add_argument("pytest_args", nargs="*", help="after --: passed to both phases")
    args = ap.parse_args()
    phases, every = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name, marker, jobs in (("parallel", "not alone", args.jobs), ("alone", "alone", 1)):
            xml = Path(tmp) / f"{name}.xml"
            rc, wall = run_phase(marker, jobs, args.pytest_args, xml)
            got = cases(xml)
            every += got
            counts = {k: sum(c["outcome"] == k for c in got) for k in ("passed", "failed", "skipped")}
            phases.append({"phase": name, "processes": jobs, "rc": rc, "wall_s": wall, **counts})
    failed = [p for p in phases if p["rc"] not in (0, 5)]  # 5: no test selected
    rows = [[p["phase"], p["processes"], p["passed"], p["failed"], p["skipped"], round(p["wall_s"])] for p in phases]
    total = sum(p["wall_s"] for p in phases)
    rows.append(["make test", "-", *(sum(p[k] for p in phases) for k in ("passed", "failed", "skipped")), round(total)])
    print_table(rec, "make test, phase by phase", ["phase", "processes", "passed", "failed", "skipped", "wall s"], rows)
    by_folder: dict[str, list[float]] = defaultdict(list)
    for c in every:
        by_folder[c["folder"]].append(c["s"])
    summed = sum(sum(v) for v in by_folder.values()) or 1.0
    folders = sorted(by_folder.items(), key=lambda kv: -sum(kv[1]))
    print_table(
        rec,
        "test time by folder (summed over its tests)",
        ["folder", "tests", "s", "share"],
        [[f, len(v), round(sum(v)), f"{100 * sum(v) / summed:.1f} %"] for f, v in folders],
    )
    slow = sorted(every, key=lambda c: -c["s"])[: args.slowest]
    print_table(rec, f"the {len(slow)} slowest tests", ["test", "s"], [[c["id"], round(c["s"], 1)] for c in slow])
    if failed:
        print(f"not written: the {', '.join(p['phase'] for p in failed)} phase failed", file=sys.stderr)
        return failed[0]["rc"]
    write_json(
        rec,
        args.json,
        {
            "wall_s": total,
            "phases": phases,
            "folders": {f: {"tests": len(v), "s": sum(v)} for f, v in folders},
            "slowest": slow,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
