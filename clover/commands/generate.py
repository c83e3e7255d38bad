"""``clover generate``: one completion (or one chat turn with ``--chat``) from the terminal."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from clover.api.structured import tools_grammar
from clover.commands.common import (
    add_decoding_args,
    add_graphs_arg,
    count,
    decoding_setup,
    encode_prompt,
    offered_tools,
)
from clover.data.chat import parse_assistant, render_chat
from clover.engine.grammar import GrammarError, choice_grammar, json_grammar, regex_grammar
from clover.engine.grammar.grounding import source_texts


def cmd_generate(args: argparse.Namespace) -> int:
    from clover.engine import Engine, Finished, TextDelta  # deferred: loads torch, not for clover --help

    text = args.prompt
    if text == "-":  # the prompt from stdin, as `echo hi | clover generate -`
        text = sys.stdin.read()
        if text.endswith("\n"):
            text = text[:-1]
    params, model, tokenizer = decoding_setup(args)
    if args.chat:
        system = [{"role": "system", "content": args.system}] if args.system else []
        messages = system + [{"role": "user", "content": text}]
        text = render_chat(messages, offered_tools(args, model), True, getattr(tokenizer, "chat_template", None))
    elif args.system:
        raise SystemExit("clover: --system needs --chat (a plain completion has no system turn)")
    if args.json_schema is not None:
        params.grammar = _schema_grammar(args.json_schema)
    elif args.regex is not None or args.choice:
        params.grammar = _text_grammar(args.regex, args.choice)
    elif args.chat:
        params.grammar = tools_grammar(offered_tools(args, model))
        if params.grammar is not None:  # x-grounded arguments: copied from the message
            params.grammar = params.grammar.with_sources(source_texts(messages))
    try:
        engine = Engine(model, tokenizer, cuda_graphs=args.cuda_graphs)
    except ValueError as e:  # a model left on the CPU (a quantized checkpoint) or run by llama.cpp
        raise SystemExit(f"clover: --cuda-graphs: {e}") from None
    out = None
    try:
        for ev in engine.stream(encode_prompt(tokenizer, text), params):
            if isinstance(ev, TextDelta) and not args.json:
                sys.stdout.write(ev.text)
                sys.stdout.flush()
            elif isinstance(ev, Finished):
                out = ev.output
    except ValueError as e:
        raise SystemExit(f"clover: {e}") from None
    if args.json:
        d = {"text": out.text, "token_ids": out.token_ids, "finish_reason": out.finish_reason, "stats": out.stats}
        if args.chat:
            d["content"], d["tool_calls"] = parse_assistant(out.text or "")
        print(json.dumps(d))
    else:
        print()  # the streamed text ends with a newline, as a command's output does
        s = out.stats
        print(
            f"[{out.finish_reason}: {count(s['tokens'], 'token')}, {count(s['forward_passes'], 'pass', 'passes')}, "
            f"TPF {s['tpf']:.2f}, {s['tokens_per_s']:.1f} tok/s, TTFT {s['ttft_s'] * 1e3:.0f} ms]",
            file=sys.stderr,
        )
    text = (out.text or "").strip()
    if not args.chat and (not text or "tool_call>" in text):  # a chat model after a bare prompt: nothing, or markup
        print(
            "clover generate: the model wrote " + ("nothing" if not text else "chat markup") + " after this plain "
            "prompt; a chat model answers a user turn: try --chat (the prompt as a user message of its chat template)",
            file=sys.stderr,
        )
    return 0


def _schema_grammar(spec: str):
    """``--json-schema``: a JSON Schema given inline or as a file; ``{}`` is any JSON value."""
    inline = spec.lstrip().startswith(("{", "true"))
    if not inline and not Path(spec).is_file():
        try:
            json.loads(spec)
        except ValueError:  # neither a file nor inline JSON: most likely a mistyped file name
            what = "a directory, not a file" if Path(spec).is_dir() else "no such file"
            raise SystemExit(f"clover: --json-schema: {spec}: {what} (and not an inline JSON schema)") from None
    try:
        text = Path(spec).read_text() if not inline and Path(spec).is_file() else spec
        return json_grammar(json.loads(text))
    except (OSError, ValueError) as e:  # GrammarError and JSONDecodeError are ValueErrors
        kind = "schema" if isinstance(e, GrammarError) else "JSON"
        raise SystemExit(f"clover: --json-schema: not a usable {kind}: {e}") from None


def _text_grammar(pattern: str | None, choices: list[str] | None):
    """``--regex`` (the whole output matches it) or ``--choice`` (the output is one of these)."""
    try:
        return regex_grammar(pattern) if pattern is not None else choice_grammar([("", choices)])
    except GrammarError as e:
        raise SystemExit(f"clover: --{'regex' if pattern is not None else 'choice'}: {e}") from None


def register(sub) -> None:
    g = sub.add_parser("generate", help="complete a prompt (or one chat turn with --chat)")
    g.add_argument("prompt", help="prompt text ('-': read it from stdin)")
    g.add_argument("--chat", action="store_true", help="wrap the prompt as a user turn of the chat template")
    g.add_argument("--json", action="store_true", help="print one JSON object (text, token ids, stats)")
    g.add_argument("--system", help="system prompt (with --chat)")
    structured = g.add_mutually_exclusive_group()
    structured.add_argument(
        "--json-schema",
        metavar="SCHEMA",
        help="constrain the output to JSON valid for this JSON Schema "
        '(inline or a file; {"type": "object"}: any object)',
    )
    structured.add_argument("--regex", metavar="PATTERN", help="constrain the output to a full match of this pattern")
    structured.add_argument(
        "--choice",
        metavar="TEXT",
        nargs="+",
        action="extend",
        help="the output is one of these (--choice yes no, or --choice yes --choice no)",
    )
    add_decoding_args(g)
    add_graphs_arg(g)
    g.set_defaults(func=cmd_generate)
