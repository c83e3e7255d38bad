"""The llama.cpp back end's tests run against the built library (``make llama-cpp``) and skip
with the reason when it is not built; with ``CLOVER_REQUIRE_LLAMACPP=1`` (CI, which builds it)
a missing library fails them instead."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def libclover():
    pytest.importorskip("gguf")
    from clover.backends.llamacpp import available, load_library

    reason = available()
    if reason is not None:
        if os.environ.get("CLOVER_REQUIRE_LLAMACPP") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return load_library()
