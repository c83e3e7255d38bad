"""Every measurement ``clover bench`` makes, one module per benchmark (``decode``, ``context``,
``joint_vs_independent``, ``twin``, ``agent``, ``quant``, ``train_memory``, ``llamacpp``,
``sglang``, and ``passes``, the timing of one pass), and what the benchmarks share: the registry
``clover bench`` reads and the helpers that print a table and write the figures as a result file
(``clover.bench.results``: the command, the commit, the machine, the date, the figures and every
table printed, kept by the command's ``Recorder``), also used by the scripts in ``benchmarks/``.

A benchmark's flags, the calls into its module here and its table are a command module
(``clover.commands.bench.MODULES`` lists them), which adds its entries to ``BENCHMARKS`` when
imported, e.g.::

    from clover.bench import BENCHMARKS
    BENCHMARKS["decode"] = ("help text", add_args, run)   # add_args(parser); run(args) -> exit code

``run`` prints its tables with ``print_table(rec, …)`` and writes its figures with
``write_json(rec, args.json, figures)``, ``rec`` being the command's ``Recorder``
(``clover.commands.common.recorder(args)``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from rich.markup import escape
from rich.table import Table

from clover.bench.results import Recorder, table

BENCHMARKS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {}


# -- helpers shared by the benchmarks ----------------------------------------------------------
def set_threads(n: int | None) -> None:
    """``--threads`` given: torch's CPU threads (None: left to the command's default, set once the
    model is known); and denormals flushed (fast-decaying GDN heads otherwise hit slow ones)."""
    import torch  # deferred: listing the benchmarks (clover --help) needs no torch

    if n:
        torch.set_num_threads(n)
    torch.set_flush_denormal(True)


# the width a table may take when stdout is a pipe or a file: no terminal to fit, so it prints whole
# (rich would otherwise fit it to 80 columns and cut its cells: "defau…")
UNBOUNDED_WIDTH = 1000


def table_console():
    """A rich Console for tables: the terminal's width on a terminal; a pipe or a file gets each
    table whole (``COLUMNS``, when set, still wins)."""
    from rich.console import Console  # deferred: rich only when a table is printed

    console = Console()
    if console.is_terminal or "COLUMNS" in os.environ:
        return console
    return Console(width=UNBOUNDED_WIDTH)


def print_table(
    recorder: Recorder | None, title: str, columns: list[str], rows: list[list], notes: list[str] = ()
) -> None:
    """Print a table and record it in ``recorder`` (cells as printed; None: printed only) for the
    result file ``write_json`` writes."""
    if recorder is None:
        cells = table(title, columns, rows, notes)
    else:
        _check_recorder(recorder, "print_table")
        cells = recorder.record(title, columns, rows, notes)
    t = Table(title=title)
    for i, c in enumerate(cells["columns"]):
        t.add_column(escape(c), justify="left" if i == 0 else "right")
    for r in cells["rows"]:
        t.add_row(*map(escape, r))  # the cells as recorded: a "[x]" in one is text, not rich markup
    console = table_console()
    console.print(t)
    for n in cells["notes"]:
        console.print(f"[dim]{n}[/]")


def write_json(recorder: Recorder, path: str | None, figures) -> None:
    """``path`` given: write ``figures`` as a result file (``clover.bench.results``), with the
    command line, the commit, the machine, the date and the tables ``recorder`` holds."""
    _check_recorder(recorder, "write_json")
    if path:
        recorder.write(path, figures)


def _check_recorder(recorder, what: str) -> None:
    if not isinstance(recorder, Recorder):
        raise TypeError(f"{what} takes the command's Recorder first (clover.bench.results), got {recorder!r}")
