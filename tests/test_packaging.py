"""What a new user meets before any code runs: the package metadata and the Makefile's set-up."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_the_license_is_an_spdx_string_that_setuptools_reads_without_a_warning():
    """A ``{text = ...}`` table is deprecated (setuptools warns on every install); an SPDX
    expression needs setuptools 77 or later in the build requirements."""
    text = (ROOT / "pyproject.toml").read_text()  # read as text: tomllib needs Python 3.11
    assert re.search(r'^license = "Apache-2.0"$', text, re.M)
    assert int(re.search(r'^requires = \["setuptools>=(\d+)"\]', text, re.M).group(1)) >= 77


def test_the_makefile_never_installs_the_cuda_torch_without_a_gpu():
    """Without nvidia-smi on Linux, torch comes as the CPU build: pip's own choice only when it
    is one (a local wheel), else PyTorch's CPU index."""
    make = (ROOT / "Makefile").read_text()
    assert "TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu" in make
    assert "grep -q '+cpu\"'" in make and "--index-url $(TORCH_CPU_INDEX)" in make
    assert "never pulls" not in make  # what it does is said, not promised


def test_make_test_shows_why_each_test_was_skipped():
    """`make test` runs pytest with -rs, so its summary names each skip's reason (the llama.cpp
    library not built, no Chromium), and the README says which skips wait for what."""
    make = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^test: .*\n\t(.*)$", make, re.M).group(1)
    assert re.search(r"pytest (.* )?-r[a-zA-Z]*s", recipe), recipe
    readme = (ROOT / "README.md").read_text()
    assert "make llama-cpp" in readme and "Chromium" in readme
