"""The pinned build (native/llamacpp/build.sh) without building anything: the pin is the one the
Python side looks for, and a missing tool is a one-line error that names what to install."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from clover.model import llamacpp

BUILD = Path(__file__).resolve().parents[2] / "native" / "llamacpp" / "build.sh"


def test_pin_matches_python_side():
    text = BUILD.read_text()
    assert re.search(r"^PIN_VERSION=(\S+)$", text, re.M).group(1) == llamacpp.PIN_VERSION
    assert re.search(r"^PIN_SHA256=(\S+)$", text, re.M).group(1) == llamacpp.PIN_SHA256


def test_missing_compiler_is_one_line(tmp_path):
    r = subprocess.run(
        ["/bin/bash", str(BUILD)], env={"PATH": str(tmp_path)}, cwd=tmp_path, capture_output=True, text=True
    )
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "cmake" in lines[0] and "apt install g++ cmake" in lines[0]


def test_library_path_follows_the_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("CLOVER_LLAMACPP_LIB", raising=False)
    monkeypatch.setenv("CLOVER_LLAMACPP_CACHE", str(tmp_path))
    assert llamacpp.library_path() == tmp_path / llamacpp.PIN / "lib" / "libclover.so"


def test_missing_library_says_how_to_build(monkeypatch, tmp_path):
    monkeypatch.setenv("CLOVER_LLAMACPP_LIB", str(tmp_path / "libclover.so"))
    llamacpp.load_library.cache_clear()
    try:
        reason = llamacpp.available()
    finally:
        llamacpp.load_library.cache_clear()
    assert reason is not None and "make llama-cpp" in reason
