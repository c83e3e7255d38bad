"""``clover tools airspace [--json]``: the default model's tool set."""

from __future__ import annotations

import argparse
import json


def cmd_tools(args: argparse.Namespace) -> int:
    from clover.data.chat import tool_signature
    from clover.data.tools import AIRSPACE_TOOLS

    if args.json:
        print(json.dumps(AIRSPACE_TOOLS, indent=1))
    else:
        for t in AIRSPACE_TOOLS:
            print(tool_signature(t))
    return 0


def register(sub) -> None:
    p = sub.add_parser("tools", help="print a bundled tool set (OpenAI format with --json)")
    p.add_argument("name", choices=["airspace"])
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_tools)
