"""The llama.cpp back end's tests run against the built library (``make llama-cpp``) and skip
with the reason when it is not built."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def libclover():
    pytest.importorskip("gguf")
    from clover.model.llamacpp import available, load_library

    reason = available()
    if reason is not None:
        pytest.skip(reason)
    return load_library()
