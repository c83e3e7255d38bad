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
from clover.server.errors import bad_request

NAME_OPEN = '{"name": "'


_MAPS = ("properties", "$defs", "definitions", "patternProperties")  # name -> schema
_LISTS = ("anyOf", "oneOf", "allOf")  # lists of schemas
_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains")  # a schema
_COUNTS = ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties")
_NULL_IS_A_VALUE = ("const", "default")
MAX_SCHEMA_DEPTH = 128  # nested schemas; the compiler recurses once per level (deeper: RecursionError)


def clean_schema(s, what: str, param: str, at: str = "#", depth: int = 0):
    """A client's JSON Schema in the shape the grammar compiler reads: keywords set to null are
    dropped (clients that serialise every field send ``"required": null``), ``true`` in
    anyOf/oneOf/allOf becomes ``{}``, draft 3's ``"required": true`` on a property joins its
    parent's ``required`` list; a keyword of the wrong JSON type is a 400 naming where it
    is (as OpenAI refuses such schemas), never a crash in the compiler or mid-decode."""
    if not isinstance(s, dict):
        return s  # true/false, or something the compiler itself reports
    if depth > MAX_SCHEMA_DEPTH:
        raise bad_request(f"{what}: the JSON Schema nests more than {MAX_SCHEMA_DEPTH} levels deep (at {at[:200]}...)",
                          param)  # fmt: skip
    out = {}
    for k, v in s.items():
        where = f"{at}/{k}"
        if v is None and k not in _NULL_IS_A_VALUE or k == "required" and isinstance(v, bool):
            continue  # a bool ``required`` is draft 3's per-property flag: moved to the parent below
        ok = True
        if k == "type":
            ok = isinstance(v, str) or isinstance(v, list) and all(isinstance(t, str) for t in v)
        elif k == "required":
            ok = isinstance(v, list) and all(isinstance(x, str) for x in v)
        elif k in _COUNTS:
            ok = (isinstance(v, int) and not isinstance(v, bool) or isinstance(v, float) and v.is_integer()) and v >= 0
        elif k in _MAPS and (ok := isinstance(v, dict)):
            v = {name: clean_schema(x, what, param, f"{where}/{name}", depth + 1) for name, x in v.items()}
        elif k in _LISTS and (ok := isinstance(v, list) and all(isinstance(x, dict) or x is True for x in v)):
            v = [
                clean_schema(x, what, param, f"{where}/{j}", depth + 1) if x is not True else {}
                for j, x in enumerate(v)
            ]
        elif k in _ONE:
            v = clean_schema(v, what, param, where, depth + 1)
        if not ok:
            raise bad_request(f"{what}: invalid JSON Schema at {where}: {json.dumps(v)[:80]} is not a valid {k!r}",
                              param)  # fmt: skip
        out[k] = v
    flagged = [n for n, x in (s.get("properties") or {}).items() if isinstance(x, dict) and x.get("required") is True]
    if flagged:  # draft 3 (still in older tool definitions): {"properties": {"city": {"required": true}}}
        out["required"] = [*out.get("required", []), *(n for n in flagged if n not in out.get("required", []))]
    return out


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
