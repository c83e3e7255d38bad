"""What the benchmarks share: the registry ``clover bench`` reads and the helpers that print a
table and write the figures as JSON (also used by the scripts in ``benchmarks/``).

A benchmark module (``clover.commands.bench.MODULES`` lists them) adds its entries to
``BENCHMARKS`` when imported, e.g.::

    from clover.bench import BENCHMARKS
    BENCHMARKS["decode"] = ("help text", add_args, run)   # add_args(parser); run(args) -> exit code
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

BENCHMARKS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {}


# -- helpers shared by the benchmarks ----------------------------------------------------------
def set_threads(n: int) -> None:
    """Benchmarks default to one thread: on a small shared CPU more threads often run slower."""
    import torch  # deferred: listing the benchmarks (clover --help) needs no torch

    torch.set_num_threads(n)
    torch.set_flush_denormal(True)


def print_table(title: str, columns: list[str], rows: list[list], notes: list[str] = ()) -> None:
    from rich.console import Console  # deferred: rich only when a table is printed
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
