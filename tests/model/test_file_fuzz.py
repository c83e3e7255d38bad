"""A model file a user hands Clover cannot take the process down: GGUF files and Clover
checkpoints (config.json + safetensors), cut short, with a structural header byte flipped, or
with one thing wrong (a tensor's type or shape, a tensor missing or extra, a config field wrong
or missing, config and weights that disagree), each refused with a clean error that names the
file, by the loader and by ``clover serve`` (which exits before it listens) and ``clover
generate``. The files are loaded in a worker process (tests/model/fuzz_files.py), so that an
abort or a hang fails this test, naming the case, rather than ending the test run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.model import fuzz_files

ROOT = Path(__file__).parents[2]
TIMEOUT_S = 900  # far above the worker's need: a hang, not slowness, is what this catches


def _worker(cases: list[dict], tmp: Path) -> dict[str, dict]:
    spec = tmp / "cases.json"
    spec.write_text(json.dumps(cases))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    try:
        p = subprocess.run(
            [sys.executable, "-m", "tests.model.fuzz_files", str(spec)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        out, err, code = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out, err, code = e.stdout or "", e.stderr or "", "timeout"
        out, err = (x.decode() if isinstance(x, bytes) else x for x in (out, err))
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    started = [line["start"] for line in lines if "start" in line]
    results = {line["case"]: line for line in lines if "case" in line}
    if code != 0:
        last = started[-1] if started else "before the first case"
        pytest.fail(f"the worker ended with {code} while loading: {last}\n{err[-3000:]}")
    # nothing the native library or the loaders print reaches stderr outside the errors themselves
    assert not [ln for ln in err.splitlines() if "gguf" in ln.lower() or "ggml" in ln.lower()], err[-3000:]
    assert set(results) == {c["name"] for c in cases}
    return results


def _check(results: dict[str, dict], cases: list[dict], ok_names: set[str], families: tuple[str, ...]) -> None:
    problems = []
    for c in cases:
        r, name, path = results[c["name"]], c["name"], c["path"]
        if name in ok_names:
            if not r.get("loaded"):
                problems.append(f"{name}: the intact file did not load: {r.get('error')}")
            continue
        if r.get("loaded"):
            problems.append(f"{name}: loaded")
            continue
        where = Path(path).name
        if where not in r["error"]:
            problems.append(f"{name}: the error does not name the file: {r['error']}")
        if not set(families) & set(r["error_bases"]):
            problems.append(f"{name}: {r['error_type']} is not one of {families}: {r['error']}")
        for cmd in ("serve", "generate"):
            code, err = r[f"{cmd}_code"], r[f"{cmd}_err"]
            if code in (0, None) or "Traceback" in err or where not in err:
                problems.append(f"{name}: clover {cmd} exited {code}: {err[-500:]}")
            if cmd == "serve" and "http://" in err:
                problems.append(f"{name}: clover serve announced it was listening: {err[-300:]}")
    assert not problems, "\n".join(problems)


def test_corrupted_gguf_files_are_refused(tmp_path):
    pytest.importorskip("gguf")
    from clover.backends.llamacpp import available

    reason = available()
    if reason is not None:
        if os.environ.get("CLOVER_REQUIRE_LLAMACPP") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    cases = fuzz_files.gguf_cases(tmp_path)
    assert len(cases) >= 40
    cases.append({"name": "intact gguf", "path": str(tmp_path / "good.gguf")})
    results = _worker(cases, tmp_path)
    _check(results, cases, {"intact gguf"}, ("ValueError", "FileNotFoundError"))


def test_corrupted_checkpoints_are_refused(tmp_path):
    cases = fuzz_files.checkpoint_cases(tmp_path)
    assert len(cases) >= 25
    cases.append({"name": "intact checkpoint", "path": str(fuzz_files.BUNDLED)})
    results = _worker(cases, tmp_path)
    _check(results, cases, {"intact checkpoint"}, ("CheckpointError", "ValueError", "FileNotFoundError"))


def test_serve_exits_before_listening_on_a_bad_file(tmp_path):
    """The real command, as a process: exit code 2, no core dump (a signal), one line naming the file."""
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 9)
    ckpt = tmp_path / "cut-checkpoint"
    shutil.copytree(fuzz_files.BUNDLED, ckpt)
    (ckpt / "model.safetensors").write_bytes((fuzz_files.BUNDLED / "model.safetensors").read_bytes()[:4])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    for path in (bad, ckpt):
        p = subprocess.run(
            [sys.executable, "-m", "clover", "serve", str(path), "--port", "0", "--threads", "1"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
        assert Path(path).name in p.stderr and "Traceback" not in p.stderr and "http://" not in p.stderr
