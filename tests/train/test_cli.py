"""``clover train`` from the command line: warm start, export, checkpoints, bad overrides."""

import json
import os
import subprocess
import sys
from pathlib import Path

BUNDLED = Path(__file__).parents[2] / "clover" / "assets" / "default"


def _train(*args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "clover", "train", "--recipe", "airspace", "--no-progress", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


def test_init_from_the_bundled_model_trains_checkpoints_and_exports(tmp_path):
    r = _train("--out", tmp_path / "run", "--steps", 2, "--init-from", BUNDLED, "--export", tmp_path / "exp")
    assert r.returncode == 0, r.stderr[-2000:]
    record = json.loads((tmp_path / "exp" / "training.json").read_text())
    assert record["step"] == 2 and record["init_from"] == str(BUNDLED) and record["val_loss"] > 0
    step = tmp_path / "run" / "step-00000002"
    assert (step / "model.safetensors").exists() and (step / "tokenizer.json").exists()  # a loadable model dir
    assert (tmp_path / "exp" / "tokenizer.json").read_text() == (BUNDLED / "tokenizer.json").read_text()
    evals = [
        json.loads(x)["eval"] for x in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines() if '"eval"' in x
    ]
    ce = evals[-1]["val_ce"]  # validation cross-entropy by kind of token
    assert {"digit", "word", "markup", "end"} <= set(ce) and all(v > 0 for v in ce.values())


def test_unknown_override_fields_are_refused_by_name(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"train": {"learning_rate": 1e-3}}))
    r = _train("--out", tmp_path / "run", "--config", bad, "--steps", 1)
    assert r.returncode != 0 and "unknown train field 'learning_rate'" in r.stderr
    bad.write_text(json.dumps({"model": {"hidden": 64}}))
    r = _train("--out", tmp_path / "run", "--config", bad, "--steps", 1)
    assert r.returncode != 0 and "unknown model field" in r.stderr


def test_init_from_a_model_of_another_shape_is_refused(tmp_path):
    over = tmp_path / "o.json"
    over.write_text(json.dumps({"model": {"hidden_size": 64}}))
    r = _train("--out", tmp_path / "run", "--config", over, "--init-from", BUNDLED, "--steps", 1)
    assert r.returncode != 0 and "differs from the recipe's" in r.stderr and "hidden_size" in r.stderr
