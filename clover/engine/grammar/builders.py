"""Building grammars: one JSON value (any, or one a JSON Schema admits), tool calls, a choice of
strings, a regular expression. Each returns a ``Grammar`` (``automaton``) whose start state
holds the frames (``frames``) the text must go through, the first at the end of the stack.
"""

from __future__ import annotations

import json

from clover.engine.grammar.automaton import CALL_MAX_WS, CALL_WS, Grammar
from clover.engine.grammar.frames import Alt, Free, Lit, Lits, More, Re, Val
from clover.engine.grammar.json_schema import GrammarError, Schemas, offset_nodes
from clover.engine.grammar.regexes import compile_pattern

NO_PARAMETERS = {"type": "object", "properties": {}}


def json_grammar(schema: dict | bool | None = None, prefix: str = "", suffix: str = "") -> Grammar:
    """``prefix``, then one JSON value (any, or valid for ``schema``), then ``suffix``."""
    sc = Schemas(True if schema is None else schema)
    frames = [Lit(suffix.encode(), 0)] if suffix else []
    frames.append(Val(sc.start))
    if prefix:
        frames.append(Lit(prefix.encode(), 0))
    return Grammar(tuple(frames), [sc], ws=CALL_WS, max_ws=CALL_MAX_WS)  # compact, as tool calls


def tool_call_grammar(
    tools: dict[str, dict | None],
    open_: str,
    close: str,
    head: str = '{"name": "',
    sep: str = "\n",
    parallel: bool = True,
    started: str = "",
    auto: bool = False,
) -> Grammar:
    """Tool calls in the Qwen style, ``open_ {"name": NAME, "arguments": ARGS} close``, each ARGS
    valid for NAME's parameter schema; with ``parallel`` further calls may follow after ``sep``.
    ``started``: how much of the first call the prompt already holds (a prefill), which is then
    not generated. ``auto``: free text, and wherever it spells ``open_`` a call as above (the
    model chooses whether to call; when it does, the call is well formed)."""
    schemas, table = [], []
    base = 0
    for name, params in tools.items():
        # no parameters (OpenAI: omitting them declares an empty parameter list): the call takes {} only
        sc = offset_nodes(Schemas(params if params else NO_PARAMETERS, lenient=True), base)
        base += len(sc.nodes)
        schemas.append(sc)
        lit = (json.dumps(name)[1:] + ', "arguments": ').encode()
        table.append((lit, (Val(sc.start), Lit(("}" + close).encode(), 0))))
    if auto:
        return Grammar(
            (Free(open_.encode(), 0, head.encode()),), schemas, [tuple(table)], ws=CALL_WS, max_ws=CALL_MAX_WS
        )
    call = (open_ + head).encode()
    frames: list[tuple] = [More(0, (sep + open_ + head).encode())] if parallel else []
    done = started.encode()
    if len(done) <= len(call):  # the prefill ends inside "<tool_call>{"name": ""
        if not call.startswith(done):
            raise GrammarError(f"the prefill {started!r} does not start a tool call")
        frames.append(Alt(0, b""))
        if done != call:
            frames.append(Lit(call, len(done)))
    else:  # it ends inside a name
        typed = done[len(call) :]
        if not done.startswith(call) or not any(lit.startswith(typed) for lit, _ in table):
            raise GrammarError(f"the prefill {started!r} does not start a call of one of {sorted(tools)}")
        frames.append(Alt(0, typed))
    return Grammar(tuple(frames), schemas, [tuple(table)], ws=CALL_WS, max_ws=CALL_MAX_WS)


def choice_grammar(parts: list[tuple[str, list[str]]]) -> Grammar:
    """``prefix_1 option_1 prefix_2 option_2 ...``, each option one of its list (an option may be
    a prefix of another: the next byte decides)."""
    frames: list[tuple] = []
    for prefix, options in reversed(parts):
        if any(not o for o in options):
            raise GrammarError("options must be non-empty")
        frames.append(Lits(tuple(o.encode() for o in options), b""))
        if prefix:
            frames.append(Lit(prefix.encode(), 0))
    return Grammar(tuple(frames), [])


def regex_grammar(pattern: str) -> Grammar:
    """Text that fully matches ``pattern`` (vLLM's ``guided_regex``, SGLang's ``regex``)."""
    return Grammar((Re(0, b""),), [], regexes=[compile_pattern(pattern)])
