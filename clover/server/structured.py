"""Structured output and legacy shapes for the OpenAI routes: the grammar a chat request decodes
under (``response_format``, tool calls) and OpenAI's deprecated function-calling messages.

Compiled grammars are cached by their JSON (agents resend the same tools every turn), so their
per-state token sets (cached on the grammar) are shared by the requests that use them.
"""

from __future__ import annotations

import json
from functools import lru_cache

from clover.data.chat import TOOL_CLOSE, TOOL_OPEN
from clover.engine.grammar import Grammar, GrammarError, json_grammar, tool_call_grammar
from clover.engine.json_schema import clean_schema as engine_clean_schema
from clover.server.errors import bad_request

NAME_OPEN = '{"name": "'


def clean_schema(s, what: str, param: str):
    """A client's schema cleaned for the compiler (``clover.engine.json_schema.clean_schema``); a
    malformed one is a 400 naming the tool or response_format and where in the schema."""
    try:
        return engine_clean_schema(s)
    except GrammarError as e:
        raise bad_request(f"{what}: {e}", param) from None


@lru_cache(maxsize=64)
def tool_grammar(schemas_json: str, prefill: str, parallel: bool, auto: bool) -> Grammar:
    return tool_call_grammar(
        json.loads(schemas_json), TOOL_OPEN, TOOL_CLOSE, NAME_OPEN, parallel=parallel, started=prefill, auto=auto
    )


@lru_cache(maxsize=64)
def _schema_grammar(schema_json: str) -> Grammar:
    return json_grammar(json.loads(schema_json))


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
        raise bad_request(f"response_format type {kind!r} is not supported: use text, json_object or json_schema",
                          "response_format")  # fmt: skip
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), (dict, bool)):
        raise bad_request("response_format json_schema needs {'json_schema': {'name': ..., 'schema': {...}}}",
                          "response_format")  # fmt: skip
    schema = clean_schema(spec.get("schema", True), "response_format json_schema", "response_format")
    try:
        return _schema_grammar(json.dumps(schema, sort_keys=True))
    except GrammarError as e:
        raise bad_request(f"response_format json_schema: {e}", "response_format") from None
