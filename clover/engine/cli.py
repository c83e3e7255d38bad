"""``clover generate`` and ``clover chat``: the engine from the terminal."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def load_model_and_tokenizer(model_dir: str | None, threads: int | None = None):
    """A checkpoint directory (default: the bundled model) → (model, tokenizer or None); a
    problem is a one-line ``clover: ...`` exit."""
    from clover.loading import load_checkpoint

    try:
        return load_checkpoint(model_dir, threads)
    except (FileNotFoundError, ValueError) as e:
        print(f"clover: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def int_at_least(minimum: int):
    """An argparse type: an integer >= ``minimum`` (``--threads``, counts)."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(
                f"must be a positive integer, got {v}" if minimum == 1 else f"must be >= {minimum}, got {v}"
            )
        return v

    return parse


positive_int = int_at_least(1)


def add_model_positional(p: argparse.ArgumentParser) -> None:
    """``clover serve DIR`` / ``clover chat DIR``: the model as a positional too (``vllm serve``'s form)."""
    p.add_argument("model_dir", nargs="?", metavar="MODEL", help="same as --model")


def take_model_positional(args: argparse.Namespace) -> None:
    """Fold the positional MODEL into ``args.model``; both given and different is an error."""
    given = getattr(args, "model_dir", None)
    if given is not None and args.model is not None and given != args.model:
        raise SystemExit(f"clover: two models given ({given!r} and --model {args.model!r}); pass one")
    args.model = args.model or given


def add_decoding_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="Clover checkpoint directory (default: the bundled model)")
    p.add_argument("--block-size", type=int, help="tokens per block (default: the model's)")
    p.add_argument("--policy", default="threshold", help="threshold, prefix, fixed, ar or edit")
    p.add_argument("--threshold", type=float, default=0.9, help="confidence to commit a position (threshold/edit)")
    p.add_argument("--steps-per-block", type=int, help="passes per block for --policy fixed")
    p.add_argument("--max-tokens", type=int, default=256, help="new tokens at most")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int)
    p.add_argument(
        "--tools",
        choices=["auto", "airspace", "none"],
        default="auto",
        help="tools offered in chat (auto: the airspace set for a model trained on it)",
    )
    p.add_argument("--threads", type=positive_int, help="torch CPU threads (default: torch's choice)")


def sampling_params(args: argparse.Namespace):
    from clover.engine import SamplingParams

    return SamplingParams(
        max_tokens=args.max_tokens,
        block_size=args.block_size,
        policy=args.policy,
        threshold=args.threshold,
        steps_per_block=args.steps_per_block,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        seed=args.seed,
    )


def _tools(args, model=None):
    """The tools offered in --chat: --tools airspace|none, or by default (auto) the airspace tool
    set when the model was trained for it (the bundled default), so its first run calls tools."""
    trained_for = ((model.config.extra or {}).get("recipe") if model is not None else None) == "airspace"
    if args.tools == "none" or (args.tools == "auto" and not trained_for):
        return None
    from clover.data.tools import AIRSPACE_TOOLS

    return AIRSPACE_TOOLS


def _encode(tokenizer, text: str) -> list[int]:
    if tokenizer is None:
        raise SystemExit("clover: this checkpoint has no tokenizer.json; cannot encode a text prompt")
    return tokenizer.encode(text)


def _setup(args: argparse.Namespace):
    """Checked decoding settings (a clear exit on a bad one), then the model and tokenizer."""
    try:
        params = sampling_params(args)
    except ValueError as e:
        raise SystemExit(f"clover: {e}") from None
    return (params, *load_model_and_tokenizer(args.model, args.threads))


def cmd_generate(args: argparse.Namespace) -> int:
    from clover.api.structured import tools_grammar
    from clover.engine import Engine, Finished, TextDelta

    text = args.prompt
    if text == "-":  # the prompt from stdin, as `echo hi | clover generate -`
        text = sys.stdin.read()
        if text.endswith("\n"):
            text = text[:-1]
    params, model, tokenizer = _setup(args)
    if args.chat:
        from clover.data.chat import render_chat

        system = [{"role": "system", "content": args.system}] if args.system else []
        messages = system + [{"role": "user", "content": text}]
        text = render_chat(messages, _tools(args, model), True, getattr(tokenizer, "chat_template", None))
    elif args.system:
        raise SystemExit("clover: --system needs --chat (a plain completion has no system turn)")
    if args.json_schema is not None:
        params.grammar = _schema_grammar(args.json_schema)
    elif args.regex is not None or args.choice:
        params.grammar = _text_grammar(args.regex, args.choice)
    elif args.chat:
        params.grammar = tools_grammar(_tools(args, model))
    engine = Engine(model, tokenizer)
    out = None
    try:
        for ev in engine.stream(_encode(tokenizer, text), params):
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
            from clover.data.chat import parse_assistant

            d["content"], d["tool_calls"] = parse_assistant(out.text or "")
        print(json.dumps(d))
    else:
        s = out.stats
        print(
            f"\n[{out.finish_reason}: {s['tokens']} tokens, {s['forward_passes']} passes, TPF {s['tpf']:.2f}, "
            f"{s['tokens_per_s']:.1f} tok/s, TTFT {s['ttft_s'] * 1e3:.0f} ms]",
            file=sys.stderr,
        )
    return 0


def _schema_grammar(spec: str):
    """``--json-schema``: a JSON Schema given inline or as a file; ``{}`` is any JSON value."""
    from clover.engine.grammar import GrammarError, json_grammar

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
    from clover.engine.grammar import GrammarError, choice_grammar, regex_grammar

    try:
        return regex_grammar(pattern) if pattern is not None else choice_grammar([("", choices)])
    except GrammarError as e:
        raise SystemExit(f"clover: --{'regex' if pattern is not None else 'choice'}: {e}") from None


def cmd_chat(args: argparse.Namespace) -> int:
    from clover.api.structured import tools_grammar
    from clover.engine.chat_ui import run_chat

    take_model_positional(args)
    params, model, tokenizer = _setup(args)
    if tokenizer is None:
        raise SystemExit("clover: this checkpoint has no tokenizer.json; chat needs one")
    tools = _tools(args, model)
    params.grammar = tools_grammar(tools)
    return run_chat(model, tokenizer, params, tools=tools, system=args.system)


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
        help='constrain the output to JSON valid for this JSON Schema (inline or a file; {"type": "object"}: any object)',
    )
    structured.add_argument("--regex", metavar="PATTERN", help="constrain the output to a full match of this pattern")
    structured.add_argument(
        "--choice",
        metavar="TEXT",
        action="append",
        help="the output is one of these (repeat: --choice yes --choice no)",
    )
    add_decoding_args(g)
    g.set_defaults(func=cmd_generate)
    c = sub.add_parser("chat", help="interactive chat; the active block fills in place, live")
    add_model_positional(c)
    c.add_argument("--system", help="system prompt")
    add_decoding_args(c)
    c.set_defaults(func=cmd_chat)
