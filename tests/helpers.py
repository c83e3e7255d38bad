"""Helpers for the tests of the checkout-only scripts in ``benchmarks/``."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def benchmark_script(name: str):
    """The script ``benchmarks/NAME.py`` imported as a module (its ``main`` not run), registered in
    ``sys.modules`` under NAME as an import would be (dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
