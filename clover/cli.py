"""The ``clover`` command line: one parser, one sub-command per module of ``clover.commands``
(each module's ``register(sub)`` adds its parser). Nothing in the library imports a command."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

import clover
from clover.bench.results import Recorder
from clover.commands.common import Parser
from clover.commands.threads import passive_waits

# in the order ``clover --help`` lists them
COMMANDS = (
    "clover.commands.info",
    "clover.commands.generate",
    "clover.commands.chat",
    "clover.commands.train",
    "clover.commands.serve",
    "clover.commands.convert",
    "clover.commands.export",
    "clover.commands.quantize",
    "clover.commands.tools",
    "clover.commands.bench",
    "clover.commands.eval",
    "clover.commands.agent",
)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="clover", description="Clover block-diffusion language models")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    for mod in COMMANDS:
        importlib.import_module(mod).register(sub)
    return p


def _version() -> str:
    return clover.__version__


def main(argv: list[str] | None = None) -> None:
    passive_waits()  # before anything imports torch: its OpenMP threads then sleep, not spin, when idle
    args = build_parser().parse_args(argv)

    # what the command's result file names and holds: the command as typed, its start, its tables
    args.recorder = Recorder(sys.argv[1:] if argv is None else argv)
    try:
        code = args.func(args)
        sys.stdout.flush()  # here, not at exit, so a reader gone early (`| head`) is caught below
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        code = _reader_gone()
    except RuntimeError as e:  # a missing or corrupt checkpoint: the message says which and why
        from clover.model.io import CheckpointError  # deferred: loads torch, not for clover --help

        if not isinstance(e, CheckpointError):
            raise
        print(f"clover: {e}", file=sys.stderr)
        code = 2
    sys.exit(code or 0)


def _reader_gone() -> int:
    """The reader of stdout closed it (``clover tools --json | head``): stop quietly as
    a command killed by SIGPIPE does, with no traceback. stdout is pointed at /dev/null so
    Python's final flush of what is still buffered has nowhere to fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + 13  # the shell's status for a process ended by SIGPIPE (signal 13)
