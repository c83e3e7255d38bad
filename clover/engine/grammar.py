"""Structured output: generated text constrained to JSON, a JSON Schema, tool calls, a choice of
strings or a regular expression.

A grammar here is a byte-level pushdown automaton with immutable, hashable states: a state is
``(stack, ws)``, the stack a tuple of frames (tuples), ``ws`` the run of whitespace just read.
``advance(state, bytes)`` is the state after those bytes or None when they cannot continue a
valid text; a token is allowed where its bytes advance the state (``TokenGrammar.allowed``),
EOS only where the text is complete. The engine applies it to the leftmost open position of a
block and may commit further positions in the same pass when each one advances the state too
(see ``Engine._grammar_commit``), so constrained output still fills several tokens per pass.

Schemas are compiled by ``clover.engine.json_schema`` (what is supported is listed there).
Regular expressions use the ``regex`` module's syntax (Python's ``re``, plus possessive and
atomic forms) and its partial matching: a byte may come next when the text so far is still the
beginning of a full match.
"""

from __future__ import annotations

import codecs
import copy
import json
from fractions import Fraction
from functools import cached_property, lru_cache

import regex

from clover.engine.budget import work_time
from clover.engine.grounding import SpanIndex, written_numbers
from clover.engine.json_schema import MAX_NUMBER_DIGITS, GrammarError, Schemas, offset_nodes, str_body
from clover.engine.lru import LRU

__all__ = [
    "Grammar",
    "GrammarError",
    "TokenGrammar",
    "TokenTable",
    "choice_grammar",
    "json_grammar",
    "regex_grammar",
    "tool_call_grammar",
]

WS = frozenset(b" \t\n\r")
MAX_WS = 8  # consecutive whitespace bytes between JSON tokens (a model could pad forever)
# tool calls: at most one space between JSON tokens (json.dumps' ", " and ": ", or none). A
# model out of its depth (a tool it was never trained on) otherwise fills the call with
# newlines until max_tokens, the padding Outlines' and xgrammar's compact modes also refuse
CALL_WS, CALL_MAX_WS = frozenset(b" "), 1
_NUM_START = frozenset(b"-0123456789")
_HEX = frozenset(b"0123456789abcdefABCDEF")
_ESC = frozenset(b'"\\/bfnrtu')
_NUM_END = frozenset(("zero", "int", "frac", "exp"))
MAX_REGEX_CHARS = 4096
# per match, in this thread's CPU seconds: a pattern that backtracks longer is treated as not
# matching there (``_match``); a match cut short by the wall clock alone is tried again
REGEX_TIMEOUT_S = 0.05
# per allowed-token set under a regular expression (a slow pattern cannot stall the engine), in
# this thread's CPU seconds less its garbage collections (``budget.work_time``), so neither a
# machine busy with other programs nor a full collection cuts a set short
ALLOWED_BUDGET_S = 1.0
ALLOWED_CACHED = 16384  # allowed-token sets one grammar keeps (least recently used out first)
_UNKNOWN = object()
_NUM_DIGIT = {"zero": None, "int": "int", "dot": "frac", "frac": "frac", "e": "exp", "esign": "exp", "exp": "exp"}


def _utf8_length(lead: int) -> int:
    return 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4


def _match(method, text: str, partial: bool, tries: int = 8):
    """``method(text, partial=…)`` (a compiled ``regex`` pattern's ``fullmatch`` or ``search``)
    within ``REGEX_TIMEOUT_S`` of this thread's CPU time (``budget.work_time``). The ``regex`` library's timeout counts
    the wall clock, which another program on a busy machine spends; a try that timed out with
    less than half its CPU budget used lost its time to others and is made again (at most
    ``tries`` times), so the answer is the idle machine's. TimeoutError when the pattern itself
    took the time."""
    for _ in range(tries):
        t0 = work_time()
        try:
            return method(text, partial=partial, timeout=REGEX_TIMEOUT_S)
        except TimeoutError:
            if work_time() - t0 >= REGEX_TIMEOUT_S / 2:
                raise
    raise TimeoutError(f"no {REGEX_TIMEOUT_S} s of CPU time for a match in {tries} tries")


def _utf8_match(data: bytes, partial: bool, test) -> bool:
    """``test(text, partial)`` on UTF-8 ``data``: invalid bytes never match. With ``partial`` a
    character whose last byte is missing counts when one of its 64 possible endings passes; one
    missing more bytes is refused (checking its up to 4,096 or 262,144 endings would cost too much
    for every state, so a character the tokenizer can only spell byte by byte from a three- or
    four-byte lead cannot be generated under a regular expression)."""
    dec = codecs.getincrementaldecoder("utf-8")()
    try:
        text = dec.decode(data, final=not partial)
        pending = dec.getstate()[0]
        if pending:
            if _utf8_length(pending[0]) - len(pending) > 1:
                return False
            ends = (codecs.decode(pending + bytes([c]), "utf-8", "ignore") for c in range(0x80, 0xC0))
            return any(e and test(text + e, True) for e in ends)
        return test(text, partial) is not None
    except (UnicodeDecodeError, TimeoutError):
        return False


def _value_may_end(f: tuple) -> bool:
    """A number or non-string literal on top may end before the next byte (it has no closing mark)."""
    if f[0] in ("inum", "fnum"):
        return _number_reachable(f, whole=True)
    return f[0] == "num" and f[2] in _NUM_END or f[0] == "lits" and f[2] in f[1]


def _number_reachable(f: tuple, whole: bool = False) -> bool:
    """An ``fnum`` / ``inum`` frame ``(kind, (lo, lo exclusive, hi, hi exclusive), typed)``:
    ``typed`` is the beginning of a JSON number within the bounds (``whole``: is one). Written
    without an exponent (any number in bounds can be; an ``inum`` never gets a point, and its
    bounds are whole and inclusive). The values its completions reach form ``[a, b)``: ``n``
    followed by k more digits, ``[n·10^k, (n+1)·10^k)``; after the point, ``[n.f, n.f + 10^-|f|)``."""
    (lo, lo_x, hi, hi_x), typed = f[1], f[2]
    neg, body = typed[:1] == b"-", typed.lstrip(b"-").decode()
    whole_part, dot, frac = body.partition(".")
    if len(whole_part) > 1 and whole_part[0] == "0" or len(whole_part) + len(frac) > MAX_NUMBER_DIGITS:
        return False
    if dot and not whole_part or "." in frac:
        return False
    if neg:  # mirror: -x in [lo, hi] <=> x in [-hi, -lo]
        lo, lo_x, hi, hi_x = (None if hi is None else -hi), hi_x, (None if lo is None else -lo), lo_x
    if whole:
        if not whole_part or dot and not frac:
            return False
        v = Fraction(body)
        return (lo is None or v > lo or v == lo and not lo_x) and (hi is None or v < hi or v == hi and not hi_x)
    if not whole_part:  # a lone "-": where a negative value is allowed
        return hi is None or hi > 0
    if dot:
        start = Fraction(f"{whole_part}.{frac}" if frac else whole_part)
        spans = [(start, start + Fraction(1, 10 ** len(frac)))]
    elif whole_part == "0":
        spans = [(0, 1)]
    else:  # plain ints: they compare exactly with the fractions of the bounds
        n = int(whole_part)
        spans = [(n * 10**k, (n + 1) * 10**k) for k in range(MAX_NUMBER_DIGITS - len(whole_part) + 1)]
    # some x with a <= x < b within the bounds? (the bounds are never empty: checked at compile)
    return any((lo is None or b > lo) and (hi is None or a < hi or a == hi and not hi_x) for a, b in spans)


def _counted_string(f: tuple, rest: tuple, b: int):
    """Inside a string with length bounds only: ``("lstr", lo, hi, count, esc)`` counts characters
    (an escape is one), so states repeat across strings and their allowed sets are cached (a
    pattern's text, by contrast, is kept whole)."""
    _, lo, hi, count, esc = f
    if esc == 0 and b == ord('"'):
        return rest if count >= lo else None
    count += esc == 0  # a character starts here (an escape's backslash counts for it)
    esc = _string_step(esc, b)
    return None if esc is None or hi is not None and count > hi else (*rest, ("lstr", lo, hi, count, esc))


def _string_step(esc: int, b: int) -> int | None:
    """A JSON string's state after byte ``b`` (the closing quote aside): 0 plain text, 1 after a
    backslash, 2-5 inside ``\\uXXXX``, -1..-3 continuation bytes a UTF-8 character still needs; None
    where ``b`` cannot stand (a control character, a bad escape, a byte that is not UTF-8 there)."""
    if esc < 0:
        return esc + 1 if b & 0xC0 == 0x80 else None
    if esc == 0:
        if b < 0x20 or 0x80 <= b < 0xC2 or b > 0xF4:
            return None
        if b >= 0x80:  # a lead byte: 1-3 continuation bytes follow
            return -1 if b < 0xE0 else -2 if b < 0xF0 else -3
        return int(b == ord("\\"))
    if esc == 1:
        return None if b not in _ESC else 2 if b == ord("u") else 0
    return None if b not in _HEX else 0 if esc == 5 else esc + 1


# -- the automaton ---------------------------------------------------------------------------------
# frames: ("lit", bytes, i)                    the next bytes must be these
#         ("val", node)                        a value of schema node is next
#         ("str", options|None, typed, esc)    inside a string; options: allowed bodies
#         ("key", node, seen, typed, esc)      inside an object key
#         ("num", integer, phase, digits)      inside a number
#         ("lits", options, typed)             one of these literal values (non-string enum)
#         ("obj", node, seen, phase, key)      phase: open | colon | after | next
#         ("arr", node, phase, count)          phase: open | after | next
#         ("alt", table, typed)                one of the table's literals, then its continuation
#         ("more", table, sep)                 optional: sep then another "alt" (parallel tool calls)
#         ("free", trigger, matched, head)     any text; once it spells trigger, head then an "alt" call
#         ("re", index, typed)                 text that is still the beginning of a full match
#         ("pstr", node, typed, esc)           inside a string with a pattern or format (and maybe length bounds)
#         ("lstr", lo, hi, count, esc)         inside a string with length bounds only (count: characters)
#         ("fnum", bounds, typed)              inside a number with bounds (no exponent)
#         ("inum", bounds, typed)              the same for an integer (no point either)
#         ("gstr", node, key, lo, hi, depth, esc, hexbuf, typed)
#                                              inside a grounded string: the source's span starts
#                                              [lo, hi) (SpanIndex ``key``) all begin with the depth
#                                              bytes decoded so far; esc 0 plain, 1 after a
#                                              backslash, 2-5 inside \uXXXX (hexbuf its digits);
#                                              typed: the raw text, kept where a pattern or length
#                                              bound must be checked too
class Grammar:
    def __init__(
        self,
        start: tuple,
        schemas: list[Schemas],
        tables: list[tuple] = (),
        regexes: list = (),
        ws: frozenset = WS,
        max_ws: int = MAX_WS,
    ):
        self.start_state = (start, 0)
        self.ws, self.max_ws = ws, max_ws  # the whitespace allowed between JSON tokens, and how much
        self.tables = list(tables)
        self.regexes = list(regexes)  # compiled ``regex`` patterns, by index
        self.nodes = [n for sc in schemas for n in sc.nodes]  # one numbering (offsets applied at build)
        self.timed = bool(self.regexes) or any("pattern" in n or "format" in n for n in self.nodes)  # budgeted
        self._new_caches()
        # grounding (``with_sources``): the request's span indexes and written numbers by source
        self.grounded = [i for i, n in enumerate(self.nodes) if "grounded" in n]
        self.spans: dict[str, SpanIndex] | None = None
        self.by_key: dict[int, SpanIndex] = {}
        self.numbers: dict[str, tuple[bytes, ...]] = {}
        self.dead: frozenset[int] = frozenset()  # nodes no value can satisfy under these sources
        self._options: dict[int, tuple] = {}

    def _new_caches(self) -> None:
        """This grammar's own memories, bounded, least recently used out first: a state's next
        state (``advance``), its allowed tokens per token table and stop ids (``allowed``), and
        what ``closing`` works out (shortest endings, smallest values, ending costs, rankings).
        A grounded copy gets fresh ones: its states depend on its sources (a value's first token
        may already reach into a copy), and they never push out the shared grammar's."""
        self.advance = lru_cache(maxsize=65536)(self._advance)
        self.allowed_cache = LRU(ALLOWED_CACHED)  # (token table, eos ids, state) -> allowed ids
        self.endings = LRU(65536)  # state -> shortest ending bytes (or None)
        self.smallest: dict[int, bytes | None] = {}  # node -> smallest value (one per node at most)
        self.costs = LRU(65536)  # (token table, eos ids, state) -> tokens of the shortest ending
        self.ranks = LRU(4096)  # (token table, eos ids, state) -> allowed tokens by ending cost

    def with_sources(self, texts: dict[str, str]) -> Grammar:
        """This grammar with its ``x-grounded`` values drawn from ``texts`` (``{"user": ...,
        "conversation": ...}``, ``grounding.source_texts``): a copy for one request, with caches
        of its own (``_new_caches``). Itself when no property is grounded. A tool whose required
        grounded argument has no possible value cannot be called (the model answers in words
        instead)."""
        if not self.grounded:
            return self
        g = copy.copy(self)
        g._new_caches()
        wanted = {self.nodes[i]["grounded"] for i in self.grounded}
        g.spans = {k: SpanIndex(texts.get(k, "")) for k in wanted}
        g.by_key = {ix.key: ix for ix in g.spans.values()}
        g.numbers = {k: written_numbers(texts.get(k, "")) for k in wanted}
        g._options = {}
        g.dead = g._dead_nodes()
        return g

    def _dead_nodes(self) -> frozenset[int]:
        """Nodes no value can satisfy: a grounded one with nothing to copy (and no other kind of
        value), an object with such a required property, an array that needs such items."""
        dead: set[int] = set()
        changed = True
        while changed:
            changed = False
            for i, n in enumerate(self.nodes):
                if i in dead:
                    continue
                if "grounded" in n:
                    other = n["kinds"] - {"string", "number", "integer"}
                    ok = other or self._grounded_strings(i) or self._grounded_numbers(i)
                else:
                    ok = not ("props" in n and any(n["props"][k] in dead for k in n.get("required", ())))
                    ok = ok and not (n.get("min_items", 0) > 0 and n.get("items") in dead)
                if not ok:
                    dead.add(i)
                    changed = True
        return frozenset(dead)

    def _grounded_strings(self, nid: int):
        """A grounded string node's possible values: its enum's options that are spans (a tuple),
        or the span index (falsy when empty); () when it is not a string."""
        node = self.nodes[nid]
        if "str_enum" in node:
            if nid not in self._options:
                ix = self.spans[node["grounded"]]
                self._options[nid] = tuple(o for o in node["str_enum"] if ix.contains(json.loads(b'"' + o + b'"')))
            return self._options[nid]
        return self.spans[node["grounded"]] if "string" in node["kinds"] else ()

    def _grounded_numbers(self, nid: int) -> tuple[bytes, ...]:
        """A grounded number node's possible values, as JSON literals: written numbers (either
        sign) that are integers where it must be one, within its bounds, among its enum's values."""
        node = self.nodes[nid]
        key = -1 - nid
        if key not in self._options:
            nums = ()
            if node["kinds"] & {"number", "integer"} or "literals" in node:
                nums = self.numbers[node["grounded"]]
                if "number" not in node["kinds"] and "integer" in node["kinds"]:
                    nums = tuple(x for x in nums if b"." not in x)
                if "num_bounds" in node:
                    nums = tuple(x for x in nums if _number_reachable(("fnum", node["num_bounds"], x), whole=True))
                if "literals" in node:
                    vals = {Fraction(v.decode()) for v in node["literals"] if v[:1] in _NUM_START}
                    nums = tuple(x for x in nums if Fraction(x.decode()) in vals)
            self._options[key] = nums
        return self._options[key]

    def forced(self, state, most: int = 64) -> bytes:
        """The bytes that must come next, whatever the model chooses: inside a copy from the
        source (a grounded string) where every span still possible goes on the same way and none
        may end yet (where one may end, whether it does is the model's choice). Empty elsewhere."""
        if not state[0] or state[0][-1][0] != "gstr" or state[0][-1][6] != 0:
            return b""
        _, _, key, lo, hi, depth, _, _, _ = state[0][-1]
        ix, out = self.by_key[key], bytearray()
        while len(out) < most and not ix.can_end(lo, hi, depth):
            c = ix._byte(ix.starts[lo], depth)
            if c != ix._byte(ix.starts[hi - 1], depth) or c < 0x20 or c in b'"\\':  # a choice, or an escape
                break
            out.append(c)
            depth += 1
        return bytes(out)

    def can_call(self) -> bool:
        """Some offered tool can be called with what the sources hold (always, without grounding)."""
        return not self.tables or self._callable(0)

    def _alive(self, cont: tuple) -> bool:
        return not any(f[0] == "val" and f[1] in self.dead for f in cont)

    def _callable(self, table: int) -> bool:
        """Some tool of the table can still be called (its arguments have possible values)."""
        return not self.dead or any(self._alive(cont) for _, cont in self.tables[table])

    # whole-text helpers
    def accepts(self, text: str | bytes) -> bool:
        st = self.advance(self.start_state, text.encode() if isinstance(text, str) else text)
        return st is not None and self.complete(st)

    def complete(self, state) -> bool:
        """The text may end here (a number or literal at the very end ends with it)."""
        stack = state[0]
        if stack and stack[-1][0] == "re":
            return self._regex_matches(stack[-1], partial=False) and len(stack) == 1
        if stack and _value_may_end(stack[-1]):
            stack = stack[:-1]
        return all(f[0] == "more" or (f[0] == "free" and f[2] == 0) for f in stack)

    def _advance(self, state, data: bytes):
        for b in data:
            state = self._step(state, b)
            if state is None:
                return None
        return state

    def _step(self, state, b: int):
        stack, ws = state
        if not stack:
            return None
        top, rest = stack[-1], stack[:-1]
        if b in WS and top[0] in ("val", "obj", "arr"):  # between JSON tokens (not before a top-level value)
            nested = top[0] != "val" or any(f[0] in ("obj", "arr") for f in rest)
            return (stack, ws + 1) if nested and ws < self.max_ws and b in self.ws else None
        out = self._frame(top, rest, b)
        return None if out is None else (out, 0)

    def _frame(self, f, rest, b):
        kind = f[0]
        if kind == "lit":
            lit, i = f[1], f[2]
            if lit[i] != b:
                return None
            return rest if i + 1 == len(lit) else (*rest, ("lit", lit, i + 1))
        if kind == "val":
            return self._value(f[1], rest, b)
        if kind in ("str", "key"):
            return self._string(f, rest, b)
        if kind == "pstr":
            return self._pattern_string(f, rest, b)
        if kind == "lstr":
            return _counted_string(f, rest, b)
        if kind == "num":
            return self._number(f, rest, b)
        if kind in ("inum", "fnum"):
            if ord("0") <= b <= ord("9") or kind == "fnum" and b == ord("."):
                g = (kind, f[1], f[2] + bytes([b]))
                return (*rest, g) if _number_reachable(g) else None
            return self._after_value(rest, b) if _value_may_end(f) else None
        if kind == "lits":
            typed = f[2] + bytes([b])
            if any(o.startswith(typed) for o in f[1]):
                return (*rest, ("lits", f[1], typed))
            if _value_may_end(f):  # a complete literal ends here: the byte belongs to what follows
                return self._after_value(rest, b)
            return None
        if kind == "obj":
            return self._object(f, rest, b)
        if kind == "arr":
            return self._array(f, rest, b)
        if kind == "alt":
            table = self.tables[f[1]]
            typed = f[2] + bytes([b])
            hits = [(lit, c) for lit, c in table if lit.startswith(typed) and (not self.dead or self._alive(c))]
            if not hits:
                return None
            exact = [
                cont for lit, cont in hits if lit == typed
            ]  # a literal ends with '"', so none is a prefix of another
            if exact:
                return (*rest, *reversed(exact[0]))
            return (*rest, ("alt", f[1], typed))
        if kind == "free":
            trig, m = f[1], f[2]
            m = m + 1 if trig[m] == b else int(trig[0] == b)
            if m == len(trig):  # a call starts: the call grammar, then free text again
                if not self._callable(0):
                    return None  # no tool can be called with what the conversation holds: words only
                return (*rest, ("free", trig, 0, f[3]), ("alt", 0, b""), ("lit", f[3], 0))
            return (*rest, ("free", trig, m, f[3]))
        if kind == "gstr":
            return self._grounded_string(f, rest, b)
        if kind == "re":
            g = ("re", f[1], f[2] + bytes([b]))
            return (*rest, g) if self._regex_matches(g, partial=True) else None
        if kind == "more":
            sep = f[2]
            if sep[0] != b or not self._callable(f[1]):
                return None
            return (*rest, f, ("alt", f[1], b""), *([("lit", sep, 1)] if len(sep) > 1 else []))
        return None

    def _regex_matches(self, f: tuple, partial: bool) -> bool:
        """The frame's text fully matches its pattern, or (``partial``) may still grow into a match."""
        rx = self.regexes[f[1]]
        return _utf8_match(f[2], partial, lambda text, p: _match(rx.fullmatch, text, p))

    def _after_value(self, rest, b):
        """A value ended just before byte ``b``: feed it to the frame below."""
        if not rest:
            return None
        st = self._step((rest, 0), b)
        return None if st is None else st[0]

    def _value(self, nid: int, rest, b):
        node = self.nodes[nid]
        kinds = node["kinds"]
        if self.spans is not None and "grounded" in node and (b in _NUM_START or b == ord('"')):
            return self._grounded_value(nid, rest, b)
        if "literals" in node and any(o[0] == b for o in node["literals"]):
            return (*rest, ("lits", node["literals"], bytes([b])))
        if b == ord("{") and "object" in kinds:
            return (*rest, ("obj", nid, frozenset(), "open", None))
        if b == ord("[") and "array" in kinds:
            return (*rest, ("arr", nid, "open", 0))
        if b == ord('"') and "string" in kinds:
            if "str_enum" not in node and {"pattern", "format"} & node.keys():
                return (*rest, ("pstr", nid, b"", 0))
            if "str_enum" not in node and {"min_len", "max_len"} & node.keys():
                return (*rest, ("lstr", node.get("min_len", 0), node.get("max_len"), 0, 0))
            return (*rest, ("str", node.get("str_enum"), b"", 0))
        if b in _NUM_START and "num_bounds" in node and kinds & {"number", "integer"}:
            f = ("fnum" if "number" in kinds else "inum", node["num_bounds"], bytes([b]))
            return (*rest, f) if _number_reachable(f) else None
        if b in _NUM_START and kinds & {"number", "integer"}:
            integer = "number" not in kinds
            phase = "sign" if b == ord("-") else "zero" if b == ord("0") else "int"
            return (*rest, ("num", integer, phase, 0 if b == ord("-") else 1))
        if b == ord("t") and "boolean" in kinds:
            return (*rest, ("lit", b"true", 1))
        if b == ord("f") and "boolean" in kinds:
            return (*rest, ("lit", b"false", 1))
        if b == ord("n") and "null" in kinds:
            return (*rest, ("lit", b"null", 1))
        return None

    def _grounded_value(self, nid: int, rest, b):
        """The first byte of a grounded value: a written number, or a string copied from a span."""
        node = self.nodes[nid]
        if b in _NUM_START:
            opts = self._grounded_numbers(nid)
            return (*rest, ("lits", opts, bytes([b]))) if any(o[0] == b for o in opts) else None
        if "string" not in node["kinds"]:
            return None
        if "str_enum" in node:
            opts = self._grounded_strings(nid)
            return (*rest, ("str", opts, b"", 0)) if opts else None
        ix = self.spans[node["grounded"]]
        return (*rest, ("gstr", nid, ix.key, 0, len(ix), 0, 0, "", b"")) if len(ix) else None

    def _grounded_string(self, f, rest, b):
        """A byte inside a grounded string: what it decodes to must continue one of the spans."""
        _, nid, key, lo, hi, depth, esc, hexbuf, typed = f
        ix, node = self.by_key[key], self.nodes[nid]
        checked = bool({"pattern", "format", "min_len", "max_len"} & node.keys())
        if esc == 0 and b == ord('"'):
            if not ix.can_end(lo, hi, depth) or checked and not self._pattern_ok(nid, typed, partial=False):
                return None
            return rest
        decoded = b""
        if esc == 0:
            if b < 0x20:
                return None
            if b == ord("\\"):  # only where the next character must be escaped
                if not any(c < 0x20 or c == 0x5C for c in ix.next_chars(lo, hi, depth)):
                    return None
                esc = 1
            else:
                decoded = bytes([b])
        elif esc == 1:  # only the escapes JSON requires: a quote, a backslash, a control character
            if b == ord("u"):
                if not any(c < 0x20 for c in ix.next_chars(lo, hi, depth)):
                    return None
                esc, hexbuf = 2, ""
            elif b in _ESC and b != ord("/"):
                esc, decoded = 0, json.loads(b'"\\' + bytes([b]) + b'"').encode()
            else:
                return None
        else:  # \uXXXX: a control character that continues a span (others are written as they are)
            if b not in _HEX:
                return None
            hexbuf += chr(b).lower()
            nexts = [format(c, "04x") for c in ix.next_chars(lo, hi, depth) if c < 0x20]
            if not any(h.startswith(hexbuf) for h in nexts):
                return None
            esc += 1
            if esc == 6:
                esc, decoded = 0, chr(int(hexbuf, 16)).encode()
        for c in decoded:
            r = ix.narrow(lo, hi, depth, c)
            if r is None:
                return None
            (lo, hi), depth = r, depth + 1
        if checked:
            typed += bytes([b])
            if not self._pattern_ok(nid, typed, partial=True):
                return None
        return (*rest, ("gstr", nid, key, lo, hi, depth, esc, hexbuf if esc >= 2 else "", typed))

    def _string(self, f, rest, b):
        is_key = f[0] == "key"
        if is_key:
            node, dead = self.nodes[f[1]], self.dead
            options = (
                None
                if node.get("extra") is not None
                else tuple(str_body(k) for k, v in node.get("props", {}).items() if k not in f[2] and v not in dead)
            )
            typed, esc = f[3], f[4]
        else:
            options, typed, esc = f[1], f[2], f[3]
        if esc == 0 and b == ord('"'):
            if options is not None and typed not in options:
                return None
            if is_key:  # below the key: its object, waiting in the "key" phase
                key = json.loads(b'"' + typed + b'"')
                if key in f[2]:
                    return None  # a key appears once
                return (*rest[:-1], ("obj", f[1], f[2] | {key}, "colon", key))
            return rest
        esc = _string_step(esc, b)
        if esc is None:
            return None
        typed = typed + bytes([b])
        if options is not None and not any(o.startswith(typed) for o in options):
            return None
        if options is None and not is_key:
            typed = b""  # a free string's content does not matter to what follows: states repeat (cache)
        return (*rest, ("key", f[1], f[2], typed, esc) if is_key else ("str", f[1], typed, esc))

    def _pattern_string(self, f, rest, b):
        """Inside a string whose schema has a ``pattern`` or ``format`` (and maybe length bounds):
        its text so far must keep a match within the bounds possible."""
        _, nid, typed, esc = f
        if esc == 0 and b == ord('"'):
            return rest if self._pattern_ok(nid, typed, partial=False) else None
        if esc == 0 and b == ord("\\"):  # an escape: only where one of the one-letter escapes may follow
            ok = any(self._pattern_ok(nid, typed + b"\\" + bytes([c]), partial=True) for c in _ESC if c != ord("u"))
            return (*rest, ("pstr", nid, typed + b"\\", 1)) if ok else None
        if (esc == 0 and b < 0x20) or (esc == 1 and (b not in _ESC or b == ord("u"))):
            return None  # no \uXXXX escapes here: the text's own UTF-8 says it, and can be checked as it comes
        typed = typed + bytes([b])
        return (*rest, ("pstr", nid, typed, 0)) if self._pattern_ok(nid, typed, partial=True) else None

    def _pattern_ok(self, nid: int, body: bytes, partial: bool) -> bool:
        """The string's text (escapes decoded) meets its schema's length bounds (counted in
        characters), ``format`` (a full match) and ``pattern``: a search, unanchored unless it
        anchors itself, as JSON Schema's. ``partial``: the text may still grow into one that does."""
        node = self.nodes[nid]
        rx, fmt, lo, hi = node.get("pattern"), node.get("format"), node.get("min_len", 0), node.get("max_len")

        def test(raw: str, p: bool):
            text = json.loads(f'"{raw}"')
            if hi is not None and len(text) > hi or not p and len(text) < lo:
                return None
            if fmt is not None and _match(fmt.fullmatch, text, p) is None:
                return None
            return True if rx is None else _match(rx.search, text, p)

        return _utf8_match(body, partial, test)

    def _number(self, f, rest, b):
        _, integer, phase, digits = f
        d = ord("0") <= b <= ord("9")
        if d:
            if digits >= MAX_NUMBER_DIGITS:
                return None
            nxt = ("zero" if b == ord("0") else "int") if phase == "sign" else _NUM_DIGIT[phase]
        elif b == ord("."):
            nxt = "dot" if phase in ("zero", "int") and not integer else None
        elif b in b"eE":
            nxt = "e" if phase in ("zero", "int", "frac") and not integer else None
        elif b in b"+-":
            nxt = "esign" if phase == "e" else None
        else:
            nxt = None
        if nxt is not None:
            return (*rest, ("num", integer, nxt, digits + d))
        if _value_may_end(f):
            return self._after_value(rest, b)  # the number ended; the byte is the next thing's
        return None

    def _object(self, f, rest, b):
        _, nid, seen, phase, key = f
        node = self.nodes[nid]
        props, extra = node.get("props", {}), node.get("extra")
        can_key = extra is not None or any(k not in seen and v not in self.dead for k, v in props.items())
        can_close = node.get("required", frozenset()) <= seen
        if phase in ("open", "next") and b == ord('"') and can_key:
            return (*rest, ("obj", nid, seen, "key", None), ("key", nid, seen, b"", 0))
        if phase == "open" and b == ord("}") and can_close:
            return rest
        if phase == "colon" and b == ord(":"):
            child = props.get(key, extra)
            return (*rest, ("obj", nid, seen, "after", None), ("val", child))
        if phase == "after":
            if b == ord(",") and can_key:
                return (*rest, ("obj", nid, seen, "next", None))
            if b == ord("}") and can_close:
                return rest
        return None

    def _array(self, f, rest, b):
        _, nid, phase, count = f
        node = self.nodes[nid]
        mx = node.get("max_items")
        if phase in ("open", "after") and b == ord("]") and count >= node.get("min_items", 0):
            return rest
        if phase == "after" and b == ord(",") and (mx is None or count < mx):
            return (*rest, ("arr", nid, "next", count))
        if phase in ("open", "next") and (mx is None or count < mx):
            child = ("val", node["items"])
            st = self._step(((*rest, ("arr", nid, "after", count + 1), child), 0), b)
            return None if st is None else st[0]
        return None


# -- building grammars -----------------------------------------------------------------------------
def json_grammar(schema: dict | bool | None = None, prefix: str = "", suffix: str = "") -> Grammar:
    """``prefix``, then one JSON value (any, or valid for ``schema``), then ``suffix``."""
    sc = Schemas(True if schema is None else schema)
    frames = [("lit", suffix.encode(), 0)] if suffix else []
    frames.append(("val", sc.start))
    if prefix:
        frames.append(("lit", prefix.encode(), 0))
    return Grammar(tuple(frames), [sc], ws=CALL_WS, max_ws=CALL_MAX_WS)  # compact, as tool calls


NO_PARAMETERS = {"type": "object", "properties": {}}


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
        table.append((lit, (("val", sc.start), ("lit", ("}" + close).encode(), 0))))
    if auto:
        return Grammar(
            (("free", open_.encode(), 0, head.encode()),), schemas, [tuple(table)], ws=CALL_WS, max_ws=CALL_MAX_WS
        )
    call = (open_ + head).encode()
    frames: list[tuple] = [("more", 0, (sep + open_ + head).encode())] if parallel else []
    done = started.encode()
    if len(done) <= len(call):  # the prefill ends inside "<tool_call>{"name": ""
        if not call.startswith(done):
            raise GrammarError(f"the prefill {started!r} does not start a tool call")
        frames.append(("alt", 0, b""))
        if done != call:
            frames.append(("lit", call, len(done)))
    else:  # it ends inside a name
        typed = done[len(call) :]
        if not done.startswith(call) or not any(lit.startswith(typed) for lit, _ in table):
            raise GrammarError(f"the prefill {started!r} does not start a call of one of {sorted(tools)}")
        frames.append(("alt", 0, typed))
    return Grammar(tuple(frames), schemas, [tuple(table)], ws=CALL_WS, max_ws=CALL_MAX_WS)


def choice_grammar(parts: list[tuple[str, list[str]]]) -> Grammar:
    """``prefix_1 option_1 prefix_2 option_2 ...``, each option one of its list (an option may be
    a prefix of another: the next byte decides)."""
    frames: list[tuple] = []
    for prefix, options in reversed(parts):
        if any(not o for o in options):
            raise GrammarError("options must be non-empty")
        frames.append(("lits", tuple(o.encode() for o in options), b""))
        if prefix:
            frames.append(("lit", prefix.encode(), 0))
    return Grammar(tuple(frames), [])


def regex_grammar(pattern: str) -> Grammar:
    """Text that fully matches ``pattern`` (vLLM's ``guided_regex``, SGLang's ``regex``)."""
    if not isinstance(pattern, str) or not pattern:
        raise GrammarError("a regular expression must be a non-empty string")
    if len(pattern) > MAX_REGEX_CHARS:
        raise GrammarError(f"the regular expression is {len(pattern)} characters; at most {MAX_REGEX_CHARS}")
    try:
        rx = regex.compile(pattern, regex.ASCII)  # \d, \w, \s as ASCII classes: what guided-decoding engines read
    except (regex.error, OverflowError, RecursionError) as e:
        raise GrammarError(f"invalid regular expression: {e}") from None
    return Grammar((("re", 0, b""),), [], regexes=[rx])


# -- tokens ----------------------------------------------------------------------------------------
class TokenTable:
    """A tokenizer's tokens as bytes, grouped by first byte; built once per engine. Control tokens
    (EOS, pad, mask, ...) have no bytes: they never spell text."""

    def __init__(self, tokenizer):
        added = tokenizer.tok.get_added_tokens_decoder()
        control = set(getattr(tokenizer, "_control", ())) | set(getattr(tokenizer, "eos_token_ids", ()))
        self.bytes: list[bytes | None] = []
        self.atomic: set[int] = set()  # markup tokens (<tool_call>, ...): only where a literal spells them
        self.by_first: dict[int, list[int]] = {}
        for i in range(tokenizer.vocab_size):
            bs = None if i in control else tokenizer.token_bytes(i) or None
            self.bytes.append(bs)
            if bs is None:
                continue
            content = getattr(added.get(i), "content", "")
            if len(content) > 2 and content.startswith("<") and content.endswith(">"):
                self.atomic.add(i)
            self.by_first.setdefault(bs[0], []).append(i)

    @cached_property
    def spelling(self) -> tuple[dict[bytes, int], int]:
        """Each token's bytes -> its (lowest) id, and the longest token in bytes (``closing``)."""
        by_bytes: dict[bytes, int] = {}
        for i, bs in enumerate(self.bytes):
            if bs is not None:
                by_bytes.setdefault(bs, i)
        return by_bytes, max(map(len, by_bytes), default=1)


class TokenGrammar:
    """A grammar over a tokenizer's tokens: which ids may come next, and the state after one.
    ``eos_ids``: the request's stop tokens, allowed only where the text may end."""

    def __init__(self, grammar: Grammar, table: TokenTable, eos_ids: list[int]):
        self.g = grammar
        self.t = table
        self.eos = sorted(set(eos_ids))
        self.key = tuple(self.eos)  # with the token table: what the grammar's per-table caches are keyed by
        self._forced = LRU(65536)  # state -> its forced token (or None)

    def forced_token(self, state) -> int | None:
        """Where the grammar forces the next bytes (a copy under way: ``Grammar.forced``), the one
        token that may come next: the longest that spells a beginning of them, so a copy has one
        spelling in tokens too, whichever policy commits it and however many positions per pass.
        None elsewhere."""
        if not self.g.grounded:
            return None
        best = self._forced.get(state, _UNKNOWN)
        if best is _UNKNOWN:
            fb, best = self.g.forced(state), None
            for i in self.t.by_first.get(fb[:1][0], ()) if fb else ():
                bs = self.t.bytes[i]
                if fb.startswith(bs) and i not in self.t.atomic and (best is None or len(bs) > len(self.t.bytes[best])):
                    best = i
            self._forced[state] = best
        return best

    @property
    def start(self):
        return self.g.start_state

    def step(self, state, token: int):
        """The state after ``token``, or None when it may not come next (EOS: only at the end)."""
        if token in self.eos:
            return state if self.g.complete(state) else None
        bs = self.t.bytes[token] if 0 <= token < len(self.t.bytes) else None
        if bs is None:
            return None
        if token in self.t.atomic and not (state[0] and state[0][-1][0] in ("lit", "alt", "more", "free")):
            return None
        if (f := self.forced_token(state)) is not None and token != f:
            return None
        return self.g.advance(state, bs)

    def allowed(self, state) -> list[int]:
        """Token ids that may come next (EOS ids where the text may end)."""
        key = (self.t, self.key, state)
        out = self.g.allowed_cache.get(key)
        if out is None:
            out = self._compute(state)
            self.g.allowed_cache[key] = out
        return out

    def _compute(self, state) -> list[int]:
        out = list(self.eos) if self.g.complete(state) else []
        deadline = work_time() + ALLOWED_BUDGET_S
        for first, ids in self.t.by_first.items():
            if self.g.timed and work_time() > deadline:
                break  # a regular expression that backtracks this long: the tokens found so far (all valid)
            if self.g.advance(state, bytes([first])) is not None:
                out += [i for i in ids if i not in self.eos and self.step(state, i) is not None]
        return out
