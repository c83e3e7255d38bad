"""``clover tools [TASK] [--json]``: a task's tool set (default: the bundled model's task, ``airspace``)."""

from __future__ import annotations

import argparse
import json

from clover.data.chat import tool_signature
from clover.data.task import ALIASES, DEFAULT_TASK, deprecated, get_task, task_names


def cmd_tools(args: argparse.Namespace) -> int:
    tools = get_task(deprecated(args.name, "clover tools")).offered()
    if args.json:
        print(json.dumps(tools, indent=1))
    else:
        for t in tools:
            print(tool_signature(t))
    return 0


def register(sub) -> None:
    p = sub.add_parser("tools", help="print a task's tool set (OpenAI format with --json)")
    p.add_argument(
        "name", nargs="?", default=DEFAULT_TASK, choices=[*task_names(), *ALIASES], help=f"default: {DEFAULT_TASK}"
    )
    p.add_argument("--json", action="store_true", help="the OpenAI-format tools list, not one signature a line")
    p.set_defaults(func=cmd_tools)
