"""``clover agent``: a terminal chat like ``clover chat`` in which the tools run. Each call, its
result and what it changed in the world are printed; the world carries over from one message to
the next (``/world`` shows it, ``/reset`` starts again, ``/exit`` quits)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from rich.markup import escape
from rich.table import Table

from clover.airspace.loop import GROUNDED_REPLY, LocalModel, OpenAIModel, run_agent
from clover.airspace.world import World
from clover.api.settings import BLOCK_SETTINGS, add_decoding_flags
from clover.bench import table_console
from clover.commands.common import THREADS_HELP, add_device_args, add_threads_arg, count, device_setup
from clover.commands.threads import apply_threads


def print_world(world, console) -> None:
    t = Table(title=f"airspace world at {world.clock}", title_justify="left")
    for c in ("drone", "status", "battery", "position", "altitude", "waypoints", "mission"):
        t.add_column(c, justify="right" if c in ("battery", "altitude", "waypoints") else "left")
    for d in world.to_dict()["drones"].values():
        m = d["mission"]
        t.add_row(
            d["id"],
            d["status"],
            f"{d['battery_pct']} %",
            f"{d['lat']}, {d['lon']}",
            f"{d['altitude_m']} m",
            str(len(d["waypoints"])),
            f"{m['type']}: {m['target']}" if m else "-",
        )
    console.print(t)
    z = Table(title="no-fly zones", title_justify="left")
    for c in ("zone", "centre", "radius", "window", "active now"):
        z.add_column(c)
    for zone in world.zones.values():
        window = f"{zone.start_time or ''}-{zone.end_time or ''}" if zone.start_time or zone.end_time else "always"
        z.add_row(
            zone.name,
            f"{zone.lat}, {zone.lon}",
            f"{zone.radius_m} m",
            window,
            "yes" if zone.active_at(world.clock) else "no",
        )
    console.print(z)


def print_step(console, step: int, reply, records) -> None:
    """One step of the loop: each call, its result (or error) and the world's changes."""
    for r in records:
        args = r.arguments if isinstance(r.arguments, str) else json.dumps(r.arguments, ensure_ascii=False)
        console.print(f"[magenta]call[/] [dim](step {step})[/] {escape(r.name)}({escape(args)})")
        style = "green" if r.ok else "red"
        console.print(
            f"  [{style}]{'result' if r.ok else 'error'}[/] {escape(json.dumps(r.result, ensure_ascii=False))}"
        )
        for change in r.changes:
            console.print(f"  [yellow]world[/] {escape(change)}")
        if r.ok and not r.changes:
            console.print("  [dim]world unchanged[/]")


def run_session(model, world, console, max_steps: int = 4, system: str | None = None, errors=(ValueError,)) -> int:
    """The interactive loop: read a message, run the agent on it, print what happened."""
    start = world.copy()
    base = [{"role": "system", "content": system}] if system else []
    messages = list(base)
    print_world(world, console)
    console.print(
        "[bold]Clover agent[/] - the tools act on this world. /world shows it, /reset starts again, /exit quits"
    )
    while True:
        try:
            text = console.input("[bold green]you>[/] ").strip()
        except (EOFError, KeyboardInterrupt):
            console.print()
            return 0
        if text in ("/exit", "/quit"):
            return 0
        if text == "/world":
            print_world(world, console)
            continue
        if text == "/reset":
            world, messages = start.copy(), list(base)
            console.print("[dim](world and conversation reset)[/]")
            continue
        if not text:
            continue
        try:
            result = run_agent(
                model,
                messages + [{"role": "user", "content": text}],
                world,
                max_steps=max_steps,
                on_step=lambda s, rep, recs, _world: print_step(console, s, rep, recs),
            )
        except KeyboardInterrupt:
            console.print("[dim](interrupted; the world is as it was)[/]")
            continue
        except errors as e:
            console.print(f"[red]error[/] {escape(str(e))}")
            continue
        world, messages = result.world, result.messages
        if result.reply is not None:
            console.print(f"[bold cyan]clover>[/] {escape(result.reply)}")
        else:
            console.print(f"[dim](stopped at the step limit, {max_steps} model calls)[/]")
        fp = result.forward_passes
        passes = f", {count(fp, 'forward pass', 'forward passes')}" if fp is not None else ""
        console.print(f"[dim]{count(result.steps, 'model call')}{passes}, {result.wall_s:.2f} s[/]")


def cmd_agent(args: argparse.Namespace) -> int:
    if args.model_dir is not None:
        if args.model is not None and args.model != args.model_dir:
            raise SystemExit(f"clover agent: two models given ({args.model_dir!r} and --model {args.model!r})")
        args.model = args.model_dir
    errors: tuple = (ValueError,)
    if args.base_url:
        try:
            import openai  # optional: openai (a test dependency)
        except ImportError:
            raise SystemExit("clover agent: --base-url needs the openai package (pip install openai)") from None
        errors += (openai.OpenAIError,)
        api_key = args.api_key or os.environ.get("CLOVER_API_KEY") or os.environ.get("OPENAI_API_KEY") or "none"
        try:
            model = OpenAIModel(
                args.base_url,
                api_key,
                args.model,
                policy=args.policy,
                threshold=args.threshold,
                max_tokens=args.max_tokens,
                grounded_reply=args.grounded_reply,
            )
        except openai.OpenAIError as e:
            raise SystemExit(f"clover agent: {args.base_url}: {e}") from None
    else:
        from clover.api.llm import LLM  # deferred: loads torch, not for clover --help
        from clover.engine import POLICIES  # deferred: loads torch, not for clover --help

        policy = args.policy
        if policy is not None and policy not in POLICIES:
            raise SystemExit(f"clover agent: unknown policy {policy!r}; choose from {sorted(POLICIES)}")
        device_setup(args, "clover agent")
        try:
            llm = LLM(args.model, threads=args.threads, device=args.device, dtype=args.dtype, compile=args.compile)
            apply_threads(llm.engine.model, args.threads)
            model = LocalModel(
                llm,
                policy=policy,
                threshold=args.threshold,
                max_tokens=args.max_tokens,
                grounded_reply=GROUNDED_REPLY if args.grounded_reply is None else args.grounded_reply,
            )
        except (FileNotFoundError, ValueError) as e:
            print(f"clover agent: {e}", file=sys.stderr)
            return 2
    # a pipe or a file gets the world's tables whole
    return run_session(model, World.seeded(args.world), table_console(), args.max_steps, args.system, errors)


def _at_least_one(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {v}")
    return v


def register(sub) -> None:
    p = sub.add_parser("agent", help="interactive chat in which the airspace tools act on a simulated world")
    p.add_argument("model_dir", nargs="?", metavar="MODEL", help="same as --model")
    p.add_argument(
        "--model",
        help="Clover checkpoint directory (default: the bundled model); with --base-url, "
        "the model id to send (default: the first the server lists)",
    )
    # --policy, --threshold; with --base-url sent only if given
    add_decoding_flags(p, tuple(s for s in BLOCK_SETTINGS if s.name != "block_size"))
    p.add_argument("--world", type=int, default=0, metavar="SEED", help="seed of the starting world (default 0)")
    p.add_argument(
        "--base-url",
        metavar="URL",
        help="an OpenAI-compatible endpoint instead of the model in "
        "process, e.g. http://127.0.0.1:8000/v1 (clover serve)",
    )
    p.add_argument("--api-key", help="the endpoint's key (default: $CLOVER_API_KEY, $OPENAI_API_KEY, else none)")
    p.add_argument("--max-steps", type=_at_least_one, default=4, help="model calls per message at most (default 4)")
    p.add_argument("--max-tokens", type=_at_least_one, default=320, help="new tokens per model call at most")
    p.add_argument("--system", help="system prompt")
    p.add_argument(
        "--grounded-reply",
        action=argparse.BooleanOptionalAction,
        help="hold each reply's numbers, ids and repeated names to the conversation's (docs/grounding.md, "
        "Grounded replies; default: on in this process, the server's default with --base-url)",
    )
    add_threads_arg(p, THREADS_HELP + " (in process)")
    add_device_args(p)  # in process only
    p.set_defaults(func=cmd_agent)
