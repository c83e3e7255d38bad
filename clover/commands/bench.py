"""``clover bench NAME``: benchmarks that print a table and can write their figures as JSON.

Each module in ``MODULES`` adds its benchmarks to ``clover.bench.BENCHMARKS`` when imported;
this command gives each one a sub-command.
"""

from __future__ import annotations

import importlib

from clover.bench import BENCHMARKS

MODULES = (
    "clover.commands.bench_decode",  # decode, context
    "clover.commands.bench_serve",  # decisions, serve
    "clover.commands.bench_twin",  # twin
    "clover.commands.bench_agent",  # agent
    "clover.commands.bench_replies",  # replies
    "clover.commands.bench_quant",  # quant
    "clover.commands.bench_train",  # train-memory
    "clover.commands.bench_llamacpp",  # llama.cpp
    "clover.commands.bench_sglang",  # sglang
)


def register(sub) -> None:
    for mod in MODULES:
        importlib.import_module(mod)
    p = sub.add_parser("bench", help="benchmarks: " + ", ".join(BENCHMARKS))
    names = p.add_subparsers(dest="benchmark", required=True)
    for name, (help_text, add_args, run) in BENCHMARKS.items():
        s = names.add_parser(name, help=help_text, description=help_text)
        add_args(s)
        s.set_defaults(func=run)
