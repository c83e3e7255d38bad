"""``clover tools TASK [--json]``: a task's tool set (the bundled model's is ``airspace2``)."""

from __future__ import annotations

import argparse
import json

from clover.data.chat import tool_signature
from clover.data.task import get_task, task_names


def cmd_tools(args: argparse.Namespace) -> int:
    tools = get_task(args.name).tools()
    if args.json:
        print(json.dumps(tools, indent=1))
    else:
        for t in tools:
            print(tool_signature(t))
    return 0


def register(sub) -> None:
    p = sub.add_parser("tools", help="print a task's tool set (OpenAI format with --json)")
    p.add_argument("name", choices=task_names())
    p.add_argument("--json", action="store_true", help="the OpenAI-format tools list, not one signature a line")
    p.set_defaults(func=cmd_tools)
