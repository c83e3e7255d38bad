"""The prepared GPU training run: ``benchmarks/gpu_train.sh --dry-run`` trains a tiny airspace2
model on the CPU, compares it with the bundled one and leaves at most 8 files in $OUT."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_dry_run_trains_compares_and_leaves_at_most_8_files(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHON": sys.executable, "OUT": str(out)}
    r = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_train.sh"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert len(files) <= 8 and "gpu_train.json" in files and "model/model.safetensors" in files, files
    d = json.loads((out / "gpu_train.json").read_text())
    assert d["dry_run"] and d["steps"] == 2 and d["val_loss"] > 0
    cmp = d["compare"]
    from clover.data import default_model_dir
    from clover.data.task import model_task
    from clover.model.io import load_config

    bundled_task = model_task(load_config(default_model_dir()), default=True).name
    assert cmp["wider"]["task"] == "airspace" and cmp["bundled"]["task"] == bundled_task
    assert set(cmp["wider"]) == {"task", "validation", "newcomer_messages", "operator_messages"}
    assert "| wider | airspace |" in (out / "gpu_train.txt").read_text()
