"""The stand-alone benchmark scripts run and write what they print (tiny settings)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_profile_decode_charges_the_wall_time_to_regions(tmp_path):
    out = tmp_path / "p.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "profile_decode.py"), "--n", "1", "--max-tokens", "12",
           "--json", str(out)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the script imports clover, installed or not
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(out.read_text())
    assert d["tokens"] > 0 and d["passes"] > 0
    for shares in (d["regions_share"], d["op_kinds_share"]):
        assert 0.9 < sum(shares.values()) < 1.1  # operator time + Python/framework time = wall time
    assert d["regions_share"]["MoE / MLP / norms"] > 0 and "where decode time goes" in r.stdout
