"""``clover bench NAME``: benchmarks that print a table and can write their figures as JSON.

Each part of Clover contributes its benchmarks: a module listed in ``MODULES`` adds entries
to ``BENCHMARKS`` when imported, e.g.::

    from clover.bench import BENCHMARKS
    BENCHMARKS["decode"] = ("help text", add_args, run)   # add_args(parser); run(args) -> exit code

Modules that do not exist yet are skipped.
"""

from __future__ import annotations

import argparse
import importlib
import json
from collections.abc import Callable
from pathlib import Path

BENCHMARKS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {}
MODULES = ("clover.engine.bench", "clover.server.bench", "clover.bench_twin", "clover.agent.bench")


def _discover() -> None:
    for mod in MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise


def register(sub) -> None:
    _discover()
    p = sub.add_parser("bench", help="benchmarks: " + ", ".join(BENCHMARKS))
    names = p.add_subparsers(dest="benchmark", required=True)
    for name, (help_text, add_args, run) in BENCHMARKS.items():
        s = names.add_parser(name, help=help_text, description=help_text)
        add_args(s)
        s.set_defaults(func=run)


# -- helpers shared by the benchmarks ----------------------------------------------------------
def set_threads(n: int) -> None:
    """Benchmarks default to one thread: on a small shared CPU more threads often run slower."""
    import torch

    torch.set_num_threads(n)
    torch.set_flush_denormal(True)


def print_table(title: str, columns: list[str], rows: list[list], notes: list[str] = ()) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title)
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 else "right")
    for r in rows:
        t.add_row(*[f"{v:.3g}" if isinstance(v, float) else str(v) for v in r])
    console = Console()
    console.print(t)
    for n in notes:
        console.print(f"[dim]{n}[/]")


def write_json(path: str | None, figures: dict) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(figures, indent=1) + "\n")
