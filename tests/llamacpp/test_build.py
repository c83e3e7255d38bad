"""The pinned build (native/llamacpp/build.sh) without building anything: the pin, written once,
is the one both sides read, and a missing tool is a one-line error that names what to install."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from clover.backends import llamacpp

BUILD = Path(__file__).resolve().parents[2] / "native" / "llamacpp" / "build.sh"


def test_one_pin_read_by_both_sides():
    """The pin is written once, in clover/backends/llamacpp.pin: build.sh reads the cache directory
    the Python side looks in from it, and neither writes the version or the checksum itself."""
    r = subprocess.run(["/bin/bash", str(BUILD), "pin"], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == llamacpp.PIN == f"{llamacpp.PIN_VERSION}-{llamacpp.PIN_SHA256[:12]}"
    assert re.fullmatch(r"[0-9a-f]{64}", llamacpp.PIN_SHA256) and llamacpp.PIN_PACKAGE == "llama-cpp-python"
    for text in (BUILD.read_text(), Path(llamacpp.__file__).read_text()):
        assert llamacpp.PIN_SHA256 not in text and llamacpp.PIN_VERSION not in text


def test_a_pin_file_without_its_keys_is_refused(tmp_path):
    """A pin file that lacks a key stops build.sh with one line naming the file; a line that is not
    key=value stops the Python side naming it."""
    native = tmp_path / "native" / "llamacpp"
    native.mkdir(parents=True)
    (native / "build.sh").write_text(BUILD.read_text())
    pin = tmp_path / "clover" / "backends" / "llamacpp.pin"
    pin.parent.mkdir(parents=True)
    pin.write_text("# no sha256\npackage=llama-cpp-python\nversion=0.3.36\n")
    r = subprocess.run(["/bin/bash", str(native / "build.sh"), "pin"], capture_output=True, text=True)
    assert r.returncode == 1 and r.stdout == "" and "llamacpp.pin needs package=, version= and sha256=" in r.stderr
    pin.write_text("package llama-cpp-python\n")
    with pytest.raises(ValueError, match="is not key=value"):
        llamacpp.read_pin(pin)
    pin.write_text("# comment\n\nversion = 1.0\n")
    assert llamacpp.read_pin(pin) == {"version": "1.0"}


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
