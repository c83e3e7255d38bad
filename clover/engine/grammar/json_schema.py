"""JSON Schema → numbered nodes for the grammar automaton (``clover.engine.grammar``).

Supported: ``type`` (one or a list; Python-flavoured names such as ``dict``/``float``/``tuple``/
``any`` understood), ``properties`` / ``required`` / ``additionalProperties`` (listed properties
only unless ``additionalProperties`` is true or a schema, as OpenAI's strict mode), ``items`` /
``minItems`` / ``maxItems``, ``enum`` / ``const``, ``anyOf`` / ``oneOf`` / ``allOf`` (merged:
alternatives of different types are told apart by their first byte; several object alternatives
become one object with the union of their properties and the intersection of their required
ones), local ``$ref`` (``#/$defs/...``, recursion allowed), a string's ``pattern`` (a search, as
JSON Schema's, in the ``regex`` module's syntax), a string's ``minLength`` / ``maxLength`` (in
characters, an escape counting as the one it stands for), ``minimum`` / ``maximum`` /
``exclusiveMinimum`` / ``exclusiveMaximum`` on integers and numbers (bounded numbers are written
without an exponent), a string's ``format`` among date, time, date-time, uuid, email and ipv4
(``FORMATS``), and Clover's ``x-grounded`` on a string or number (the value copied from the
request's own text: ``grounding``). Ignored (not enforced): other formats,
``multipleOf``. ``lenient``: a part that cannot be compiled admits any value (tool schemas in
the wild; a pattern that does not compile is then ignored) instead of raising ``GrammarError``.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import regex

KINDS = ("object", "array", "string", "number", "integer", "boolean", "null")
# type names of Python-flavoured tool schemas (BFCL and others write "dict", "float", "tuple", "any")
ALIASES = {
    "dict": "object",
    "float": "number",
    "int": "integer",
    "bool": "boolean",
    "str": "string",
    "list": "array",
    "tuple": "array",
}


_D2 = r"(?:0[1-9]|[12]\d|3[01])"
_TIME = r"(?:[01]\d|2[0-3]):[0-5]\d:(?:[0-5]\d|60)(?:\.\d{1,9})?(?:[Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d)"
_DATE = r"\d{4}-(?:0[1-9]|1[0-2])-" + _D2
# string formats enforced (a full match of the text), as RFC 3339 and JSON Schema's format list
# read them; others ("uri", "hostname", ...) are not checked
FORMATS = {
    name: regex.compile(rx, regex.ASCII)
    for name, rx in {
        "date": _DATE,
        "time": _TIME,
        "date-time": _DATE + "[Tt ]" + _TIME,
        "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
        "email": r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
        r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+",
        "ipv4": r"(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)",
    }.items()
}


class GrammarError(ValueError):
    """A schema or grammar this module cannot compile."""


# -- schemas ---------------------------------------------------------------------------------------
_MAPS = ("properties", "$defs", "definitions", "patternProperties")  # name -> schema
_LISTS = ("anyOf", "oneOf", "allOf")  # lists of schemas
_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains")  # a schema
_COUNTS = ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties")
_NULL_IS_A_VALUE = ("const", "default")
MAX_NUMBER_DIGITS = 24  # digits of a number the grammar writes (a model could go on forever)
MAX_SCHEMA_DEPTH = 128  # nested schemas; the compiler recurses once per level (deeper: RecursionError)


def clean_schema(s, at: str = "#", depth: int = 0):
    """A client's JSON Schema in the shape the grammar compiler reads: keywords set to null are
    dropped (clients that serialise every field send ``"required": null``), ``true`` in
    anyOf/oneOf/allOf becomes ``{}``, draft 3's ``"required": true`` on a property joins its
    parent's ``required`` list; a keyword of the wrong JSON type is a ``GrammarError`` naming where
    it is (as OpenAI refuses such schemas), never a crash in the compiler or mid-decode."""
    if not isinstance(s, dict):
        return s  # true/false, or something the compiler itself reports
    if depth > MAX_SCHEMA_DEPTH:
        raise GrammarError(f"the JSON Schema nests more than {MAX_SCHEMA_DEPTH} levels deep (at {at[:200]}...)")
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
        elif k == "x-grounded":  # Clover's keyword (docs/grounding.md)
            ok = v is True or v is False or v in ("user", "conversation")
        elif k in _COUNTS:
            ok = (isinstance(v, int) and not isinstance(v, bool) or isinstance(v, float) and v.is_integer()) and v >= 0
        elif k in _MAPS and (ok := isinstance(v, dict)):
            v = {name: clean_schema(x, f"{where}/{name}", depth + 1) for name, x in v.items()}
        elif k in _LISTS and (ok := isinstance(v, list) and all(isinstance(x, dict) or x is True for x in v)):
            v = [clean_schema(x, f"{where}/{j}", depth + 1) if x is not True else {} for j, x in enumerate(v)]
        elif k in _ONE:
            v = clean_schema(v, where, depth + 1)
        if not ok and k == "x-grounded":
            raise GrammarError(
                f"invalid JSON Schema at {where}: {json.dumps(v)[:80]} is not a valid 'x-grounded' "
                '(true, false, "user" or "conversation")'
            )
        if not ok:
            raise GrammarError(f"invalid JSON Schema at {where}: {json.dumps(v)[:80]} is not a valid {k!r}")
        out[k] = v
    flagged = [n for n, x in (s.get("properties") or {}).items() if isinstance(x, dict) and x.get("required") is True]
    if flagged:  # draft 3 (still in older tool definitions): {"properties": {"city": {"required": true}}}
        out["required"] = [*out.get("required", []), *(n for n in flagged if n not in out.get("required", []))]
    return out


class Schemas:
    """A JSON Schema compiled into numbered nodes (frames refer to nodes by index, so states hash)."""

    def __init__(self, root: dict | bool, lenient: bool = False):
        self.root = clean_schema(root)
        self.lenient = lenient  # a part it cannot compile admits any value (tool schemas in the wild)
        self.nodes: list[dict] = []
        # schema object -> its node, while compiling: the object is held too, so its id cannot be reused
        self._ids: dict[int, tuple[object, int]] = {}
        self.start = self.compile(self.root)

    def _resolve(self, s):
        seen = 0
        while isinstance(s, dict) and "$ref" in s:
            ref = s["$ref"]
            if not isinstance(ref, str) or not ref.startswith("#"):
                raise GrammarError(f"only local $ref ('#/...') is supported, got {ref!r}")
            s = self.root
            for part in [p for p in ref[1:].split("/") if p]:
                part = part.replace("~1", "/").replace("~0", "~")
                if not isinstance(s, dict) or part not in s:
                    raise GrammarError(f"$ref {ref!r} points nowhere")
                s = s[part]
            seen += 1
            if seen > 32:
                raise GrammarError(f"$ref {ref!r} does not resolve (a cycle of references)")
        return s

    def compile(self, s) -> int:
        s = self._resolve(s)
        if id(s) in self._ids:  # recursive schemas: a node refers to itself by index
            return self._ids[id(s)][1]
        idx = len(self.nodes)
        self._ids[id(s)] = (s, idx)
        self.nodes.append({})
        try:
            node = self._node(s)
        except GrammarError:
            if not self.lenient:
                raise
            node = {"kinds": set(KINDS), "any": True}
        if node.get("any"):  # any value: objects of any keys and arrays of any items, recursively
            node.update(props={}, required=frozenset(), extra=idx, items=idx, min_items=0, max_items=None)
        grounded = s.get("x-grounded") if isinstance(s, dict) else None
        if grounded and not node.get("any") and (node["kinds"] & _GROUNDABLE or {"str_enum", "literals"} & node.keys()):
            node["grounded"] = "user" if grounded is True else grounded  # a copy from the request's own text
        self.nodes[idx] = node
        return idx

    def _node(self, s) -> dict:
        if s is True or s == {} or s is None:
            return {"kinds": set(KINDS), "any": True}
        if s is False:
            raise GrammarError("the schema 'false' admits no value")
        if not isinstance(s, dict):
            raise GrammarError(f"a schema must be an object or a boolean, got {type(s).__name__}")
        if "const" in s or "enum" in s:
            values = [s["const"]] if "const" in s else s["enum"]
            if not isinstance(values, list) or not values:
                raise GrammarError("enum must be a non-empty list")
            if all(isinstance(v, str) for v in values):
                return {"kinds": {"string"}, "str_enum": tuple(str_body(v) for v in values)}
            return {"kinds": set(), "literals": tuple(_literal(v) for v in values)}
        alts = s.get("anyOf") or s.get("oneOf")
        if alts or "allOf" in s:
            return self._merge(s, alts or [], s.get("allOf") or [])
        kinds = s.get("type")
        if kinds is None:
            kinds = ["object"] if "properties" in s else ["array"] if "items" in s else list(KINDS)
        kinds = {ALIASES.get(k, k) for k in ([kinds] if isinstance(kinds, str) else kinds)}
        if "any" in kinds:
            return {"kinds": set(KINDS), "any": True}
        if bad := kinds - set(KINDS):
            raise GrammarError(f"unknown type(s) {sorted(bad)}")
        node: dict = {"kinds": kinds}
        if "string" in kinds and isinstance(s.get("pattern"), str):
            try:
                node["pattern"] = regex.compile(s["pattern"], regex.ASCII)  # \d, \w ASCII, as ECMA 262
            except (regex.error, OverflowError, RecursionError) as e:
                if not self.lenient:
                    raise GrammarError(f"pattern {s['pattern']!r} does not compile: {e}") from None
        if "string" in kinds:
            node.update(self._string_bounds(s))
            if isinstance(s.get("format"), str) and s["format"] in FORMATS:
                node["format"] = FORMATS[s["format"]]
        if kinds & {"integer", "number"}:
            node.update(self._number_bounds(s, integer="number" not in kinds))
        if "object" in kinds:
            props = s.get("properties") or {}
            if not isinstance(props, dict):
                raise GrammarError("properties must be an object")
            # listed properties only, as strict mode (so "properties": {} is the empty object); a
            # schema that lists none at all ({"type": "object"}) or matches keys by pattern is open
            extra = s.get("additionalProperties", "properties" not in s or "patternProperties" in s)
            node["props"] = {k: self.compile(v) for k, v in props.items()}
            node["required"] = frozenset(k for k in s.get("required", []) if k in props) if props else frozenset()
            node["extra"] = None if extra is False else self.compile(True if extra is True else extra)
        if "array" in kinds:
            node["items"] = self.compile(s.get("items", True))
            node["min_items"] = int(s.get("minItems", 0))
            node["max_items"] = s.get("maxItems")
        return node

    def _number_bounds(self, s: dict, integer: bool) -> dict:
        """``minimum`` / ``maximum`` / ``exclusiveMinimum`` / ``exclusiveMaximum`` (numbers, or draft
        4's booleans), the tightest of each side, as ``num_bounds`` = (lo, lo exclusive, hi, hi
        exclusive), exact fractions; an integer's made whole and inclusive."""
        sides: dict[bool, tuple] = {}  # up -> (bound, exclusive)
        for key, excl, up in (("minimum", "exclusiveMinimum", False), ("maximum", "exclusiveMaximum", True)):
            v, x = s.get(key), s.get(excl)
            given = [(v, x is True)] if v is not None else []
            if x is not None and not isinstance(x, bool):  # draft 6+: the exclusive bound itself
                given.append((x, True))
            for v, exclusive in given:
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    return self._loose(f"{key} must be a finite number, got {json.dumps(v)[:40]}")
                b = (Fraction(v), exclusive)
                old = sides.get(up)
                tighter = old is None or (b[0] < old[0] if up else b[0] > old[0]) or b[0] == old[0] and exclusive
                sides[up] = b if tighter else old
        lo, hi = sides.get(False), sides.get(True)
        reach = Fraction(10**MAX_NUMBER_DIGITS)
        if lo and lo[0] >= reach or hi and hi[0] <= -reach:
            return self._loose(f"the bounds lie beyond what {MAX_NUMBER_DIGITS} digits without an exponent can write")
        if integer:  # whole, inclusive bounds
            lo, hi = _whole(lo, up=False), _whole(hi, up=True)
            if lo is not None and hi is not None and lo[0] > hi[0]:
                return self._loose(f"no integer lies within the bounds {lo[0]}..{hi[0]}")
        if lo and hi and (lo[0] > hi[0] or lo[0] == hi[0] and (lo[1] or hi[1])):
            return self._loose(f"no number lies within the bounds {float(lo[0])}..{float(hi[0])}")
        if lo is None and hi is None:
            return {}
        return {"num_bounds": (*(lo or (None, False)), *(hi or (None, False)))}

    def _string_bounds(self, s: dict) -> dict:
        lo, hi = int(s.get("minLength", 0)), s.get("maxLength")
        if hi is not None and lo > int(hi):
            return self._loose(f"minLength {lo} is above maxLength {int(hi)}: no string has such a length")
        return {
            k: v for k, v in (("min_len", lo or None), ("max_len", None if hi is None else int(hi))) if v is not None
        }

    def _loose(self, problem: str) -> dict:
        """A bound no value can meet, or not a number: an error, or (lenient) no bound at all."""
        if not self.lenient:
            raise GrammarError(problem)
        return {}

    def _merge(self, s, alts: list, all_of: list) -> dict:
        """anyOf/oneOf (union) and allOf (intersection of objects, roughly): one node."""
        base = {k: v for k, v in s.items() if k not in ("anyOf", "oneOf", "allOf")}
        if all_of:
            merged = dict(base)
            for part in all_of:
                part = self._resolve(part)
                merged.setdefault("properties", {}).update(part.get("properties", {}))
                merged["required"] = [*merged.get("required", []), *part.get("required", [])]
                if "type" in part:
                    merged["type"] = part["type"]
            if not alts:
                return self._node(merged)
            base = merged
        nodes = [
            self._node({**base, **self._resolve(a)} if base.get("properties") is None else self._resolve(a))
            for a in alts
        ]
        out: dict = {"kinds": set()}
        for n in nodes:
            if n.get("any"):
                return n
            out["kinds"] |= n["kinds"]
            if "literals" in n:
                out["literals"] = out.get("literals", ()) + n["literals"]
            if "str_enum" in n:
                out["str_enum"] = out.get("str_enum", ()) + n["str_enum"]
            elif "string" in n["kinds"]:
                out["free_string"] = True
            if "props" in n:
                if "props" in out:
                    out["props"] = {**out["props"], **n["props"]}
                    out["required"] &= n["required"]
                    out["extra"] = out["extra"] if n["extra"] is None else n["extra"]
                else:
                    out.update(props=dict(n["props"]), required=n["required"], extra=n["extra"])
            if "items" in n:
                out.update(items=n["items"], min_items=n["min_items"], max_items=n["max_items"])
        if out.pop("free_string", False):
            out.pop("str_enum", None)
        # a string's or a number's constraints survive when one alternative alone is that kind
        # (pydantic's Optional[constr(max_length=8)]: anyOf [{string, maxLength}, {null}])
        for kinds, keys in (({"string"}, _STRING_KEYS), ({"integer", "number"}, _NUMBER_KEYS)):
            of_kind = [n for n in nodes if n["kinds"] & kinds]
            if len(of_kind) == 1:
                out.update({k: of_kind[0][k] for k in keys if k in of_kind[0]})
        return out


_STRING_KEYS = ("pattern", "format", "min_len", "max_len")
_GROUNDABLE = frozenset(("string", "number", "integer"))
_NUMBER_KEYS = ("num_bounds",)


def _whole(side: tuple | None, up: bool) -> tuple | None:
    """A (bound, exclusive) side as the nearest whole number inside it, inclusive."""
    if side is None:
        return None
    v, exclusive = side
    if up:
        return Fraction(math.ceil(v) - 1 if exclusive and v == math.ceil(v) else math.floor(v)), False
    return Fraction(math.floor(v) + 1 if exclusive and v == math.floor(v) else math.ceil(v)), False


def str_body(v: str) -> bytes:
    return json.dumps(v, ensure_ascii=False)[1:-1].encode()


def _literal(v) -> bytes:
    return json.dumps(v, ensure_ascii=False, separators=(", ", ": ")).encode()


def offset_nodes(sc: Schemas, base: int) -> Schemas:
    """Renumber a compiled schema's node references by ``base`` (several schemas in one grammar)."""
    if base:
        for n in sc.nodes:
            if "props" in n:
                n["props"] = {k: v + base for k, v in n["props"].items()}
            for k in ("extra", "items"):
                if n.get(k) is not None:
                    n[k] += base
        sc.start += base
    return sc
