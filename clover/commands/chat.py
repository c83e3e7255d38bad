"""``clover chat``: a terminal chat in which the active block visibly fills in parallel (rich Live)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from rich.console import Console
from rich.live import Live
from rich.text import Text

from clover.api.structured import tools_grammar
from clover.commands.common import (
    add_decoding_args,
    add_model_positional,
    count,
    decoding_setup,
    offered_tools,
    take_model_positional,
)
from clover.data.chat import parse_assistant, render_chat
from clover.engine.grammar.grounding import source_texts
from clover.engine.outputs import Finished, StepEvent, TextDelta

MASK_GLYPH = "·"


class BlockView:
    """Final text so far, then the active block: filled positions and masks (``·``). Once the
    answer is finished only its content stays: its tool calls are printed after it, once each."""

    def __init__(self, tokenizer, prompt_len: int, block_size: int):
        self.tokenizer = tokenizer
        self.prompt_len, self.block_size = prompt_len, block_size
        self.final = ""
        self.block_start = -1
        self.block: dict[int, tuple[int, int]] = {}  # position -> (token, pass that set it)
        self.last_step = -1
        self.output = None

    def update(self, ev) -> None:
        if isinstance(ev, StepEvent):
            if ev.block_start != self.block_start:
                self.block_start, self.block = ev.block_start, {}
            for pos, tok in zip(ev.positions, ev.tokens):
                self.block[pos] = (tok, ev.step)
            self.last_step = ev.step
        elif isinstance(ev, TextDelta):
            self.final += ev.text
            self.block = {}
        elif isinstance(ev, Finished):
            self.output = ev.output
            self.block = {}

    def render(self) -> Text:
        if self.output is not None:
            return Text(parse_assistant(self.final)[0])
        t = Text(self.final)
        if self.block_start < 0:
            return t
        for pos in range(max(self.block_start, self.prompt_len), self.block_start + self.block_size):
            if pos in self.block:
                tok, step = self.block[pos]
                style = "bold yellow" if step == self.last_step else "cyan"
                t.append(self.tokenizer.decode([tok]), style=style)
            else:
                t.append(MASK_GLYPH, style="dim")
        return t


def run_chat(model, tokenizer, params, tools=None, system=None, console=None) -> int:
    from clover.engine import Engine  # deferred: loads torch, not for clover --help

    console = console or Console()
    engine = Engine(model, tokenizer)
    base = [{"role": "system", "content": system}] if system else []
    messages = list(base)
    bs = params.block_size or model.config.block_size
    console.print(f"[bold]Clover chat[/] (policy {params.policy}, block {bs}) - /reset clears, /exit quits")
    while True:
        try:
            user = console.input("[bold green]you>[/] ").strip()
        except (EOFError, KeyboardInterrupt):
            console.print()
            return 0
        if user in ("/exit", "/quit"):
            return 0
        if user == "/reset":
            messages = list(base)
            continue
        if not user:
            continue
        messages.append({"role": "user", "content": user})
        prompt = tokenizer.encode(render_chat(messages, tools, True, getattr(tokenizer, "chat_template", None)))
        view = BlockView(tokenizer, len(prompt), bs)
        try:
            with Live(view.render(), console=console, refresh_per_second=30) as live:
                turn = (
                    params
                    if params.grammar is None
                    else replace(params, grammar=params.grammar.with_sources(source_texts(messages)))
                )
                for ev in engine.stream(prompt, turn):
                    view.update(ev)
                    live.update(view.render())
            if not console.is_terminal:
                console.print()  # Live only draws its final frame here, without a line end
        except KeyboardInterrupt:
            console.print("[dim](interrupted)[/]")
            messages.pop()
            continue
        out = view.output
        content, calls = parse_assistant(out.text or "")
        for c in calls:
            console.print(f"[magenta]tool call[/] {c['name']}({json.dumps(c['arguments'])})")
        messages.append(
            {
                "role": "assistant",
                "content": content,
                "tool_calls": [
                    {"type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
                    for c in calls
                ],
            }
        )
        s = out.stats
        console.print(
            f"[dim]{count(s['tokens'], 'token')}, {count(s['forward_passes'], 'pass', 'passes')}, TPF {s['tpf']:.2f}, "
            f"{s['tokens_per_s']:.1f} tok/s[/]"
        )


def cmd_chat(args: argparse.Namespace) -> int:
    take_model_positional(args)
    params, model, tokenizer = decoding_setup(args)
    if tokenizer is None:
        raise SystemExit("clover: this checkpoint has no tokenizer.json; chat needs one")
    tools = offered_tools(args, model)
    params.grammar = tools_grammar(tools)
    return run_chat(model, tokenizer, params, tools=tools, system=args.system)


def register(sub) -> None:
    c = sub.add_parser("chat", help="interactive chat; the active block fills in place, live")
    add_model_positional(c)
    c.add_argument("--system", help="system prompt")
    add_decoding_args(c)
    c.set_defaults(func=cmd_chat)
