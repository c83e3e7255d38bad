"""Structured output and legacy shapes for the OpenAI routes: the grammar a request decodes under
(``response_format``, vLLM's and SGLang's structured-output extras, tool calls) and OpenAI's
deprecated function-calling messages.

Compiled grammars are cached by their JSON (agents resend the same tools every turn), so their
per-state token sets (cached on the grammar) are shared by the requests that use them.
"""

from __future__ import annotations

import json
from functools import lru_cache

from clover.api.errors import bad_request
from clover.data.chat import TOOL_CLOSE, TOOL_OPEN
from clover.engine.grammar import Grammar, GrammarError, choice_grammar, json_grammar, regex_grammar, tool_call_grammar
from clover.engine.grammar.json_schema import clean_schema as engine_clean_schema

NAME_OPEN = '{"name": "'


def clean_schema(s, what: str, param: str):
    """A client's schema cleaned for the compiler (``clover.engine.grammar.json_schema.clean_schema``); a
    malformed one is a 400 naming the tool or response_format and where in the schema."""
    try:
        return engine_clean_schema(s)
    except GrammarError as e:
        raise bad_request(f"{what}: {e}", param) from None


def tools_grammar(tools: list[dict] | None, names=None, prefill: str = "", parallel: bool = True) -> Grammar | None:
    """The grammar a chat offering ``tools`` (OpenAI format) decodes under: the one builder for the
    server, ``clover.LLM``, ``clover generate --chat``, ``clover chat`` and ``clover eval --grammar``.

    Without ``prefill`` it is ``tool_choice: auto``'s: free text, and a call the model opens held
    to the offered names and their parameter schemas; with one (``tool_choice`` required or
    named: the prompt already holds ``<tool_call>{"name": "...``) calls only, the first one begun.
    ``names``: the functions that may be called (default: every tool's); ``parallel``: further
    calls may follow. None without tools, or when the schemas do not compile (tool schemas
    compile leniently; should one still not, decode without a grammar); a malformed schema is a
    400 naming the tool."""
    if not tools:
        return None
    schemas = {
        t["function"]["name"]: clean_schema(
            t["function"].get("parameters"), f"tools[{i}] ({t['function']['name']})", f"tools.{i}.function.parameters"
        )
        for i, t in enumerate(tools)
        if names is None or t["function"]["name"] in names
    }
    try:  # agents send the same tools every turn: compiled once (and its token sets cached with it)
        return _tool_grammar(json.dumps(schemas, sort_keys=True), prefill, parallel, not prefill)
    except GrammarError:
        return None


@lru_cache(maxsize=64)
def _tool_grammar(schemas_json: str, prefill: str, parallel: bool, auto: bool) -> Grammar:
    return tool_call_grammar(
        json.loads(schemas_json), TOOL_OPEN, TOOL_CLOSE, NAME_OPEN, parallel=parallel, started=prefill, auto=auto
    )


@lru_cache(maxsize=64)
def _schema_grammar(schema_json: str) -> Grammar:
    return json_grammar(json.loads(schema_json))


@lru_cache(maxsize=64)
def _choice(options: tuple[str, ...]) -> Grammar:
    return choice_grammar([("", list(options))])


_regex = lru_cache(maxsize=64)(regex_grammar)

# the structured-output fields clients send besides response_format, and where each comes from:
# vLLM's guided_* (and structured_outputs since 0.10), SGLang's regex / json_schema / ebnf
_EXTRAS = {
    "guided_json": "json",
    "guided_choice": "choice",
    "guided_regex": "regex",
    "guided_grammar": "grammar",
    "json_schema": "json",
    "regex": "regex",
    "ebnf": "grammar",
}
_STRUCTURED_OUTPUTS = {
    "json": "json",
    "json_object": "json_object",
    "choice": "choice",
    "regex": "regex",
    "grammar": "grammar",
    "structural_tag": "structural_tag",
}


def request_grammar(req) -> tuple[Grammar | None, str | None]:
    """The grammar a chat or completion request's output must follow, and the field that asked
    for it: OpenAI's ``response_format``; vLLM's ``guided_json`` / ``guided_choice`` /
    ``guided_regex`` or ``structured_outputs`` ``{json | json_object | choice | regex}``; SGLang's
    ``json_schema`` / ``regex``. At most one; grammars in EBNF / Lark and structural tags are 400s."""
    asked = []  # (param, kind, value)
    fmt = req.response_format
    if fmt is not None and (fmt.get("type") or "text") != "text":
        asked.append(("response_format", "response_format", fmt))
    for name, kind in _EXTRAS.items():
        v = getattr(req, name, None)
        if v is not None:
            asked.append((name, kind, v))
    for key, v in (req.structured_outputs or {}).items():
        if key in _STRUCTURED_OUTPUTS and v is not None and v is not False:
            asked.append((f"structured_outputs.{key}", _STRUCTURED_OUTPUTS[key], v))
    if not asked:
        return None, None
    if len(asked) > 1:
        raise bad_request(
            f"give one structured-output constraint, not {' and '.join(a[0] for a in asked)}", asked[1][0]
        )
    param, kind, v = asked[0]
    if kind == "response_format":
        return response_grammar(v), param
    if kind in ("grammar", "structural_tag"):
        raise bad_request(
            f"{param}: grammars in EBNF / Lark and structural tags are not supported; constrain the "
            "output with a JSON schema, a choice of strings or a regular expression",
            param,
        )
    if kind == "json_object":
        return _schema_grammar('{"type": "object"}'), param
    if kind == "choice":
        if not isinstance(v, list) or not v or not all(isinstance(o, str) and o for o in v):
            raise bad_request(f"{param} must be a non-empty list of non-empty strings", param)
        return _choice(tuple(v)), param
    if kind == "regex":
        try:
            return _regex(v), param
        except GrammarError as e:
            raise bad_request(f"{param}: {e}", param) from None
    if isinstance(v, str):  # a schema sent as JSON text (vLLM takes both; SGLang's json_schema is text)
        try:
            v = json.loads(v)
        except ValueError:
            raise bad_request(
                f"{param} is not valid JSON (a JSON Schema as an object or as JSON text)", param
            ) from None
    if not isinstance(v, (dict, bool)):
        raise bad_request(f"{param} must be a JSON Schema (an object)", param)
    return schema_grammar(v, param, param), param


def schema_grammar(schema, what: str, param: str) -> Grammar:
    """A client's JSON Schema, cleaned and compiled (cached); a malformed one is a 400 naming ``what``."""
    cleaned = clean_schema(schema, what, param)
    try:
        return _schema_grammar(json.dumps(cleaned, sort_keys=True))
    except GrammarError as e:
        raise bad_request(f"{what}: {e}", param) from None


def modern_message(m: dict) -> dict:
    """Legacy function-calling messages as tool messages: a ``function`` result is a ``tool``
    result, an assistant's ``function_call`` its one tool call."""
    if m["role"] == "function":
        return {**m, "role": "tool"}
    if m["role"] == "assistant" and "function_call" in m and not m.get("tool_calls"):
        fc = m.pop("function_call")
        return {**m, "tool_calls": [{"id": "call_0", "type": "function", "function": fc}]}
    return m


def legacy_delta(d: dict) -> dict:
    """A streamed tool-call delta in the legacy ``function_call`` shape (one call per turn)."""
    if "tool_calls" in d:
        return {"function_call": d["tool_calls"][0]["function"]}
    return d


def response_grammar(fmt: dict | None) -> Grammar | None:
    """OpenAI's ``response_format``: ``text`` (None), ``json_object`` (any JSON object) or
    ``json_schema`` (``{"json_schema": {"name", "schema", "strict"?}}``: a value valid for the schema)."""
    kind = (fmt or {}).get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return _schema_grammar('{"type": "object"}')
    if kind != "json_schema":
        raise bad_request(
            f"response_format type {kind!r} is not supported: use text, json_object or json_schema", "response_format"
        )
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), (dict, bool)):
        raise bad_request(
            "response_format json_schema needs {'json_schema': {'name': ..., 'schema': {...}}}", "response_format"
        )
    return schema_grammar(spec.get("schema", True), "response_format json_schema", "response_format")
