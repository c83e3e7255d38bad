"""The stand-alone benchmark scripts run and write what they print (tiny settings)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_profile_decode_charges_the_wall_time_to_regions(tmp_path):
    out = tmp_path / "p.json"
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "profile_decode.py"),
        "--n",
        "1",
        "--max-tokens",
        "12",
        "--json",
        str(out),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the script imports clover, installed or not
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(out.read_text())["figures"]
    assert d["tokens"] > 0 and d["passes"] > 0
    for shares in (d["regions_share"], d["op_kinds_share"]):
        assert 0.9 < sum(shares.values()) < 1.1  # operator time + Python/framework time = wall time
    assert d["regions_share"]["MoE / MLP / norms"] > 0 and "where decode time goes" in r.stdout


def test_tables_print_whole_to_a_pipe_or_a_file(tmp_path):
    """A table read from a pipe or a file has no terminal width to fit: every cell comes whole
    (rich would cut them to 80 columns: "defau…")."""
    cells = ["default (prefix τ 0.97) " * 3, "compound messages with several actions " * 2, "speed-up vs ar " * 3]
    code = (
        "from clover.bench import print_table; import sys, json; "
        "c = json.loads(sys.argv[1]); print_table('t', ['decoder', 'kind', 'speed'], [c])"
    )
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    piped = subprocess.run([sys.executable, "-c", code, json.dumps(cells)], capture_output=True, text=True, env=env)
    with open(tmp_path / "out.txt", "w") as f:
        subprocess.run([sys.executable, "-c", code, json.dumps(cells)], stdout=f, env=env, check=True)
    for out in (piped.stdout, (tmp_path / "out.txt").read_text()):
        assert "…" not in out and all(c.strip() in out for c in cells), out
    narrow = subprocess.run(
        [sys.executable, "-c", code, json.dumps(cells)], capture_output=True, text=True, env={**env, "COLUMNS": "60"}
    )
    assert not all(c.strip() in narrow.stdout for c in cells)  # COLUMNS, when set, still decides
