"""Fixtures of the clover-sglang tests (run in SGLang's environment: `make test-sglang`).

SGLang's server starts in 40-70 s on a small CPU, mostly imports: each algorithm's server is
started once per session and shared by every test that needs it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
BUNDLED = Path(__file__).resolve().parents[3] / "clover" / "assets" / "default"


@pytest.fixture(scope="session")
def hf_dir(tmp_path_factory) -> Path:
    """The bundled model as `clover export hf` writes it: the folder SGLang serves."""
    from clover.export.hf_folder import export_hf

    out = tmp_path_factory.mktemp("bundled-hf")
    export_hf(BUNDLED, out)
    return out


@pytest.fixture(scope="session")
def clover_model():
    import torch

    from clover.model.io import load_model

    torch.set_num_threads(1)
    return load_model(BUNDLED, "cpu", torch.float32).eval()


@pytest.fixture(scope="session")
def tokenizer():
    from clover.data.tokenizer import CloverTokenizer

    return CloverTokenizer.load(BUNDLED)


@pytest.fixture(scope="session")
def cases(tokenizer):
    """50 airspace test prompts (token ids) of the bundled model's own task."""
    from clover.bench.decode import airspace_cases

    return [ids for ids, _ in airspace_cases(tokenizer, 50)]


_servers: dict[tuple[str, int], object] = {}


@pytest.fixture(scope="session")
def server(hf_dir, tmp_path_factory):
    """``server(algorithm, tp_size=1)``: that algorithm's SGLang server (``tp_size`` tensor-parallel
    ranks), started on first use and kept for the session (its passes are recorded while
    ``server.logits_dir`` exists)."""
    from clover.bench.sglang import SGLangServer

    logs = tmp_path_factory.mktemp("sglang")

    def get(algorithm: str, tp_size: int = 1):
        key = (algorithm, tp_size)
        if key not in _servers:
            for s in list(_servers.values()):  # one server at a time: the machine has few cores
                s.__exit__()
            _servers.clear()
            name = algorithm if tp_size == 1 else f"{algorithm}-tp{tp_size}"
            s = SGLangServer(
                hf_dir, algorithm, logits_dir=logs / f"{name}-passes", log=logs / f"{name}.log", tp_size=tp_size
            )
            s.logits_dir = logs / f"{name}-passes"
            _servers[key] = s.__enter__()
        return _servers[key]

    yield get
    for s in _servers.values():
        s.__exit__()
    _servers.clear()


def pytest_collection_modifyitems(config, items):
    """Without SGLang's environment (`make sglang`) every test here is skipped, saying so."""
    from clover.bench.sglang import sglang_python

    try:
        sglang_python()
    except RuntimeError as e:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=str(e)))
