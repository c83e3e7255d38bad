"""The grammar automaton: a byte-level pushdown automaton with immutable, hashable states.

A state is ``State(stack, ws)``, the stack a tuple of frames (``frames``: one named type per
kind of frame), ``ws`` the run of whitespace just read. ``Grammar.advance(state, bytes)`` is the
state after those bytes or None when they cannot continue a valid text; ``complete(state)`` says
whether the text may end there. Over a tokenizer's tokens: ``tokens.TokenGrammar``. Grammars
are built by ``builders`` (JSON, a JSON Schema compiled by ``json_schema``, tool calls, choices,
regular expressions); values marked ``x-grounded`` are copied from the request's own text
(``with_sources``, spans from ``grounding``).
"""

from __future__ import annotations

import copy
import json
from fractions import Fraction
from functools import lru_cache

import regex

from clover.engine.grammar.frames import (
    Alt,
    Arr,
    FNum,
    Free,
    GStr,
    INum,
    Key,
    Lit,
    Lits,
    LStr,
    Num,
    Obj,
    PStr,
    Re,
    State,
    Str,
    Val,
)
from clover.engine.grammar.grounding import SpanIndex, written_numbers
from clover.engine.grammar.json_schema import MAX_NUMBER_DIGITS, Schemas, str_body
from clover.engine.grammar.lru import LRU
from clover.engine.grammar.regexes import full_match, timed_match, utf8_match
from clover.engine.grammar.scalars import (
    ESC,
    HEX,
    NUM_DIGIT,
    NUM_START,
    counted_string,
    number_reachable,
    string_step,
    value_may_end,
)

WS = frozenset(b" \t\n\r")
MAX_WS = 8  # consecutive whitespace bytes between JSON tokens (a model could pad forever)
# tool calls: at most one space between JSON tokens (json.dumps' ", " and ": ", or none). A
# model out of its depth (a tool it was never trained on) otherwise fills the call with
# newlines until max_tokens, the padding Outlines' and xgrammar's compact modes also refuse
CALL_WS, CALL_MAX_WS = frozenset(b" "), 1
ALLOWED_CACHED = 16384  # allowed-token sets one grammar keeps (least recently used out first)
ENDS = ("token", "span")  # where a grounded string ends (``with_sources``)
DEFAULT_ENDS = "span"  # measured on the validation split: docs/grounding.md, "Where a span ends"
MARKUP_KINDS = frozenset(("lit", "alt", "more", "free"))  # frames where a markup token (<tool_call>) may come


class Grammar:
    """Texts as a byte-level pushdown automaton (see the module docstring); built by ``builders``."""

    def __init__(
        self,
        start: tuple,
        schemas: list[Schemas],
        tables: list[tuple] = (),
        regexes: list = (),
        ws: frozenset = WS,
        max_ws: int = MAX_WS,
    ):
        self.start_state = State(start, 0)
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
        self.ends = "token"  # where a grounded string ends: "token" by token, or "span" chosen whole

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
        self.completes = LRU(65536)  # a patterned copy's (node, spans, typed) -> whether it can still end
        self.ranks = LRU(4096)  # (token table, eos ids, state) -> allowed tokens by ending cost

    def with_sources(self, texts: dict[str, str], ends: str | None = None) -> Grammar:
        """This grammar with its ``x-grounded`` values drawn from ``texts`` (``{"user": ...,
        "conversation": ...}``, ``grounding.source_texts``): a copy for one request, with caches
        of its own (``_new_caches``). Itself when no property is grounded. A tool whose required
        grounded argument has no possible value cannot be called (the model answers in words
        instead). ``ends``: where a grounded string ends, ``"token"`` (the model's next token,
        as any other choice) or ``"span"`` (the engine weighs the ways it may go on whole, once
        per string: ``clover.engine.span_choice``); None: ``DEFAULT_ENDS``."""
        ends = DEFAULT_ENDS if ends is None else ends
        if ends not in ENDS:
            raise ValueError(f"ends must be one of {', '.join(ENDS)}, got {ends!r}")
        if not self.grounded:
            return self
        g = copy.copy(self)
        g.ends = ends
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
                    strings = self._grounded_strings(i)
                    strings = strings and (not isinstance(strings, SpanIndex) or self._pattern_in_source(i, strings))
                    ok = other or strings or self._grounded_numbers(i)
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

    def _pattern_in_source(self, nid: int, ix: SpanIndex) -> bool:
        """A grounded string whose schema has a ``pattern`` has something to copy only where the
        source holds a match: a pattern anchored at both ends (``^...$``) is searched for without
        its anchors. A search that runs out of time counts as found (the copy may still find none)."""
        rx = self.nodes[nid].get("pattern")
        if rx is None:
            return True
        try:
            return timed_match(_unanchored(rx).search, ix.text, False) is not None
        except TimeoutError:
            return True

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
                    nums = tuple(x for x in nums if number_reachable(node["num_bounds"], x, whole=True))
                if "literals" in node:
                    vals = {Fraction(v.decode()) for v in node["literals"] if v[:1] in NUM_START}
                    nums = tuple(x for x in nums if Fraction(x.decode()) in vals)
            self._options[key] = nums
        return self._options[key]

    def forced(self, state, most: int = 64) -> bytes:
        """The bytes that must come next, whatever the model chooses: inside a copy from the
        source (a grounded string) where every span still possible goes on the same way and none
        may end yet (where one may end, whether it does is the model's choice). Empty elsewhere."""
        stack = state.stack
        if not stack or stack[-1].kind != "gstr" or stack[-1].esc != 0:
            return b""
        f = stack[-1]
        ix = self.by_key[f.key]
        if f.until >= 0:  # its end was chosen (``hold``): the rest of that span
            common = ix.copied(f.lo, f.until)[f.depth :][:most]
        else:
            common = ix.common_bytes(f.lo, f.hi, f.depth, most)
        for n, c in enumerate(common):
            if c < 0x20 or c in b'"\\':  # a byte written as an escape is never forced
                return common[:n]
        return common

    def span_ends(self, state, most_bytes: int = 64, most: int = 32) -> list[bytes] | None:
        """Where a copy from the source (a grounded string) may first end and its end is not yet
        chosen: the ways it may go on to an end (``b""``: it ends here), for a caller that
        weighs them whole (``hold`` then keeps the one chosen). None elsewhere, where only one
        way is left, or where there are more than ``most`` (``SpanIndex.rests``)."""
        stack = state.stack
        if not stack or stack[-1].kind != "gstr":
            return None
        f = stack[-1]
        if (
            f.esc != 0
            or f.until >= 0
            or f.depth == 0
            or {"pattern", "format", "min_len", "max_len"} & self.nodes[f.node].keys()
        ):
            return None
        ix = self.by_key[f.key]
        if not ix.can_end(f.lo, f.hi, f.depth):
            return None
        rests = ix.rests(f.lo, f.hi, f.depth, most_bytes, most)
        return rests if rests is not None and len(rests) > 1 else None

    def hold(self, state, rest: bytes):
        """``state`` (where ``span_ends`` gave ``rest``) with its copy held to end after ``rest``:
        the bytes of ``rest`` are then forced (``forced``) and the closing quote follows."""
        f = state.stack[-1] if state.stack else None
        r = None
        if f is not None and f.kind == "gstr" and f.until < 0 and f.esc == 0:
            r = self.by_key[f.key].rest_range(f.lo, f.hi, f.depth, rest)
        if r is None or not self.by_key[f.key].can_end(r[0], r[1], f.depth + len(rest)):
            raise ValueError("hold: not a copy whose end is open, or not a way it goes on to an end")
        held = GStr(f.node, f.key, r[0], r[1], f.depth, f.esc, f.hexbuf, f.typed, f.depth + len(rest))
        return State((*state.stack[:-1], held), state.ws)

    def copied(self, state) -> bytes:
        """Inside a copy from the source (a grounded string): the source's bytes copied so far;
        empty elsewhere."""
        stack = state.stack
        if not stack or stack[-1].kind != "gstr":
            return b""
        f = stack[-1]
        return self.by_key[f.key].copied(f.lo, f.depth)

    def can_call(self) -> bool:
        """Some offered tool can be called with what the sources hold (always, without grounding)."""
        return not self.tables or self._callable(0)

    def _alive(self, cont: tuple) -> bool:
        return not any(f.kind == "val" and f.node in self.dead for f in cont)

    def _callable(self, table: int) -> bool:
        """Some tool of the table can still be called (its arguments have possible values)."""
        return not self.dead or any(self._alive(cont) for _, cont in self.tables[table])

    # whole-text helpers
    def accepts(self, text: str | bytes) -> bool:
        st = self.advance(self.start_state, text.encode() if isinstance(text, str) else text)
        return st is not None and self.complete(st)

    def complete(self, state) -> bool:
        """The text may end here (a number or literal at the very end ends with it)."""
        stack = state.stack
        if stack and stack[-1].kind == "re":
            return self._regex_matches(stack[-1], partial=False) and len(stack) == 1
        if stack and value_may_end(stack[-1]):
            stack = stack[:-1]
        return all(f.kind == "more" or (f.kind == "free" and f.matched == 0) for f in stack)

    def _advance(self, state, data: bytes):
        stack, ws = state
        for b in data:
            nxt = self._step(stack, ws, b)
            if nxt is None:
                return None
            stack, ws = nxt
        return State(stack, ws)

    def _step(self, stack: tuple, ws: int, b: int) -> tuple[tuple, int] | None:
        """The stack and whitespace run after byte ``b`` (a ``State`` is made once per ``advance``)."""
        if not stack:
            return None
        top, rest = stack[-1], stack[:-1]
        if b in WS and top.kind in ("val", "obj", "arr"):  # between JSON tokens (not before a top-level value)
            nested = top.kind != "val" or any(f.kind in ("obj", "arr") for f in rest)
            return (stack, ws + 1) if nested and ws < self.max_ws and b in self.ws else None
        out = self._frame(top, rest, b)
        return None if out is None else (out, 0)

    def _frame(self, f, rest, b):
        kind = f.kind
        if kind == "lit":
            lit, i = f.lit, f.i
            if lit[i] != b:
                return None
            return rest if i + 1 == len(lit) else (*rest, Lit(lit, i + 1))
        if kind == "val":
            return self._value(f.node, rest, b)
        if kind in ("str", "key"):
            return self._string(f, rest, b)
        if kind == "pstr":
            return self._pattern_string(f, rest, b)
        if kind == "lstr":
            return counted_string(f, rest, b)
        if kind == "num":
            return self._number(f, rest, b)
        if kind in ("inum", "fnum"):
            if ord("0") <= b <= ord("9") or kind == "fnum" and b == ord("."):
                typed = f.typed + bytes([b])
                return (*rest, type(f)(f.bounds, typed)) if number_reachable(f.bounds, typed) else None
            return self._after_value(rest, b) if value_may_end(f) else None
        if kind == "lits":
            typed = f.typed + bytes([b])
            if any(o.startswith(typed) for o in f.options):
                return (*rest, Lits(f.options, typed))
            if value_may_end(f):  # a complete literal ends here: the byte belongs to what follows
                return self._after_value(rest, b)
            return None
        if kind == "obj":
            return self._object(f, rest, b)
        if kind == "arr":
            return self._array(f, rest, b)
        if kind == "alt":
            table = self.tables[f.table]
            typed = f.typed + bytes([b])
            hits = [(lit, c) for lit, c in table if lit.startswith(typed) and (not self.dead or self._alive(c))]
            if not hits:
                return None
            exact = [
                cont for lit, cont in hits if lit == typed
            ]  # a literal ends with '"', so none is a prefix of another
            if exact:
                return (*rest, *reversed(exact[0]))
            return (*rest, Alt(f.table, typed))
        if kind == "free":
            trig, m = f.trigger, f.matched
            m = m + 1 if trig[m] == b else int(trig[0] == b)
            if m == len(trig):  # a call starts: the call grammar, then free text again
                if not self._callable(0):
                    return None  # no tool can be called with what the conversation holds: words only
                return (*rest, Free(trig, 0, f.head), Alt(0, b""), Lit(f.head, 0))
            return (*rest, Free(trig, m, f.head))
        if kind == "gstr":
            return self._grounded_string(f, rest, b)
        if kind == "re":
            g = Re(f.index, f.typed + bytes([b]))
            return (*rest, g) if self._regex_matches(g, partial=True) else None
        if kind == "more":
            sep = f.sep
            if sep[0] != b or not self._callable(f.table):
                return None
            return (*rest, f, Alt(f.table, b""), *([Lit(sep, 1)] if len(sep) > 1 else []))
        return None

    def _regex_matches(self, f: Re, partial: bool) -> bool:
        """The frame's text fully matches its pattern, or (``partial``) may still grow into a match."""
        return full_match(self.regexes[f.index], f.typed, partial)

    def _stack_after(self, stack: tuple, b: int) -> tuple | None:
        """The stack after byte ``b`` with no whitespace run before it (a run ``b`` begins is not counted)."""
        nxt = self._step(stack, 0, b)
        if nxt is None:
            return None
        out, _ = nxt
        return out

    def _after_value(self, rest, b):
        """A value ended just before byte ``b``: feed it to the frame below."""
        if not rest:
            return None
        return self._stack_after(rest, b)

    def _value(self, nid: int, rest, b):
        node = self.nodes[nid]
        kinds = node["kinds"]
        if self.spans is not None and "grounded" in node and (b in NUM_START or b == ord('"')):
            return self._grounded_value(nid, rest, b)
        if "literals" in node and any(o[0] == b for o in node["literals"]):
            return (*rest, Lits(node["literals"], bytes([b])))
        if b == ord("{") and "object" in kinds:
            return (*rest, Obj(nid, frozenset(), "open", None))
        if b == ord("[") and "array" in kinds:
            return (*rest, Arr(nid, "open", 0))
        if b == ord('"') and "string" in kinds:
            if "str_enum" not in node and {"pattern", "format"} & node.keys():
                return (*rest, PStr(nid, b"", 0))
            if "str_enum" not in node and {"min_len", "max_len"} & node.keys():
                return (*rest, LStr(node.get("min_len", 0), node.get("max_len"), 0, 0))
            return (*rest, Str(node.get("str_enum"), b"", 0))
        if b in NUM_START and "num_bounds" in node and kinds & {"number", "integer"}:
            f = (FNum if "number" in kinds else INum)(node["num_bounds"], bytes([b]))
            return (*rest, f) if number_reachable(f.bounds, f.typed) else None
        if b in NUM_START and kinds & {"number", "integer"}:
            integer = "number" not in kinds
            phase = "sign" if b == ord("-") else "zero" if b == ord("0") else "int"
            return (*rest, Num(integer, phase, 0 if b == ord("-") else 1))
        if b == ord("t") and "boolean" in kinds:
            return (*rest, Lit(b"true", 1))
        if b == ord("f") and "boolean" in kinds:
            return (*rest, Lit(b"false", 1))
        if b == ord("n") and "null" in kinds:
            return (*rest, Lit(b"null", 1))
        return None

    def _grounded_value(self, nid: int, rest, b):
        """The first byte of a grounded value: a written number, or a string copied from a span."""
        node = self.nodes[nid]
        if b in NUM_START:
            opts = self._grounded_numbers(nid)
            return (*rest, Lits(opts, bytes([b]))) if any(o[0] == b for o in opts) else None
        if "string" not in node["kinds"]:
            return None
        if "str_enum" in node:
            opts = self._grounded_strings(nid)
            return (*rest, Str(opts, b"", 0)) if opts else None
        ix = self.spans[node["grounded"]]
        return (*rest, GStr(nid, ix.key, 0, len(ix), 0, 0, "", b"", -1)) if len(ix) else None

    def _grounded_string(self, f: GStr, rest, b):
        """A byte inside a grounded string: what it decodes to must continue one of the spans."""
        nid, lo, hi, depth, esc, hexbuf, typed = f.node, f.lo, f.hi, f.depth, f.esc, f.hexbuf, f.typed
        ix, node = self.by_key[f.key], self.nodes[nid]
        checked = bool({"pattern", "format", "min_len", "max_len"} & node.keys())
        if esc == 0 and b == ord('"'):
            if not ix.can_end(lo, hi, depth) or checked and not self._pattern_ok(nid, typed, partial=False):
                return None
            return rest if f.until < 0 or depth == f.until else None
        if f.until >= 0 and depth >= f.until:
            return None  # its end was chosen: only the closing quote
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
            elif b in ESC and b != ord("/"):
                esc, decoded = 0, json.loads(b'"\\' + bytes([b]) + b'"').encode()
            else:
                return None
        else:  # \uXXXX: a control character that continues a span (others are written as they are)
            if b not in HEX:
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
            if esc == 0 and not self._completes(nid, ix, lo, hi, depth, typed):
                return None
        return (*rest, GStr(nid, f.key, lo, hi, depth, esc, hexbuf if esc >= 2 else "", typed, f.until))

    def _completes(self, nid: int, ix: SpanIndex, lo: int, hi: int, depth: int, typed: bytes) -> bool:
        """Some span still possible (``ix``'s spans ``lo:hi``, ``depth`` bytes copied, ``typed`` as
        written so far) goes on to an end where the whole copy meets its pattern and bounds: a
        pattern's partial match alone would let a copy into "drones #861" for ``drone 17``'s
        pattern, or "0030 PLEASE" for a time's, and find no end. At most ``COMPLETION_CHECKS``
        candidate ends are tried; past that the copy is taken to complete."""
        key = (nid, ix.key, lo, hi, depth, typed)
        hit = self.completes.get(key)
        if hit is not None:
            return hit
        tried, found = 0, False
        for s in ix.starts[lo:hi]:
            base = s + depth
            for e in range(base, ix.limit[s] + 1):
                if not ix.ends[e]:
                    continue
                rest = json.dumps(ix.data[base:e].decode("utf-8", "replace"), ensure_ascii=False)[1:-1].encode()
                tried += 1
                if self._pattern_ok(nid, typed + rest, partial=False) or tried >= COMPLETION_CHECKS:
                    found = True
                    break
            if found:
                break
        self.completes[key] = found
        return found

    def _string(self, f: Str | Key, rest, b):
        is_key = f.kind == "key"
        if is_key:
            node, dead = self.nodes[f.node], self.dead
            options = (
                None
                if node.get("extra") is not None
                else tuple(str_body(k) for k, v in node.get("props", {}).items() if k not in f.seen and v not in dead)
            )
        else:
            options = f.options
        typed, esc = f.typed, f.esc
        if esc == 0 and b == ord('"'):
            if options is not None and typed not in options:
                return None
            if is_key:  # below the key: its object, waiting in the "key" phase
                key = json.loads(b'"' + typed + b'"')
                if key in f.seen:
                    return None  # a key appears once
                return (*rest[:-1], Obj(f.node, f.seen | {key}, "colon", key))
            return rest
        nxt = string_step(esc, b)
        if nxt is None:
            return None
        if options is None and not is_key:  # a free string's content does not matter to what follows:
            return (*rest, f if nxt == esc else Str(None, b"", nxt))  # states repeat (cache)
        typed = typed + bytes([b])
        if options is not None and not any(o.startswith(typed) for o in options):
            return None
        return (*rest, Key(f.node, f.seen, typed, nxt) if is_key else Str(options, typed, nxt))

    def _pattern_string(self, f: PStr, rest, b):
        """Inside a string whose schema has a ``pattern`` or ``format`` (and maybe length bounds):
        its text so far must keep a match within the bounds possible."""
        nid, typed, esc = f.node, f.typed, f.esc
        if esc == 0 and b == ord('"'):
            return rest if self._pattern_ok(nid, typed, partial=False) else None
        if esc == 0 and b == ord("\\"):  # an escape: only where one of the one-letter escapes may follow
            ok = any(self._pattern_ok(nid, typed + b"\\" + bytes([c]), partial=True) for c in ESC if c != ord("u"))
            return (*rest, PStr(nid, typed + b"\\", 1)) if ok else None
        if (esc == 0 and b < 0x20) or (esc == 1 and (b not in ESC or b == ord("u"))):
            return None  # no \uXXXX escapes here: the text's own UTF-8 says it, and can be checked as it comes
        typed = typed + bytes([b])
        return (*rest, PStr(nid, typed, 0)) if self._pattern_ok(nid, typed, partial=True) else None

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
            if fmt is not None and timed_match(fmt.fullmatch, text, p) is None:
                return None
            return True if rx is None else timed_match(rx.search, text, p)

        return utf8_match(body, partial, test)

    def _number(self, f: Num, rest, b):
        integer, phase, digits = f.integer, f.phase, f.digits
        d = ord("0") <= b <= ord("9")
        if d:
            if digits >= MAX_NUMBER_DIGITS:
                return None
            nxt = ("zero" if b == ord("0") else "int") if phase == "sign" else NUM_DIGIT[phase]
        elif b == ord("."):
            nxt = "dot" if phase in ("zero", "int") and not integer else None
        elif b in b"eE":
            nxt = "e" if phase in ("zero", "int", "frac") and not integer else None
        elif b in b"+-":
            nxt = "esign" if phase == "e" else None
        else:
            nxt = None
        if nxt is not None:
            return (*rest, Num(integer, nxt, digits + d))
        if value_may_end(f):
            return self._after_value(rest, b)  # the number ended; the byte is the next thing's
        return None

    def _object(self, f: Obj, rest, b):
        nid, seen, phase, key = f.node, f.seen, f.phase, f.key
        node = self.nodes[nid]
        props, extra = node.get("props", {}), node.get("extra")
        can_key = extra is not None or any(k not in seen and v not in self.dead for k, v in props.items())
        can_close = node.get("required", frozenset()) <= seen
        if phase in ("open", "next") and b == ord('"') and can_key:
            return (*rest, Obj(nid, seen, "key", None), Key(nid, seen, b"", 0))
        if phase == "open" and b == ord("}") and can_close:
            return rest
        if phase == "colon" and b == ord(":"):
            child = props.get(key, extra)
            return (*rest, Obj(nid, seen, "after", None), Val(child))
        if phase == "after":
            if b == ord(",") and can_key:
                return (*rest, Obj(nid, seen, "next", None))
            if b == ord("}") and can_close:
                return rest
        return None

    def _array(self, f: Arr, rest, b):
        nid, phase, count = f.node, f.phase, f.count
        node = self.nodes[nid]
        mx = node.get("max_items")
        if phase in ("open", "after") and b == ord("]") and count >= node.get("min_items", 0):
            return rest
        if phase == "after" and b == ord(",") and (mx is None or count < mx):
            return (*rest, Arr(nid, "next", count))
        if phase in ("open", "next") and (mx is None or count < mx):
            child = Val(node["items"])
            return self._stack_after((*rest, Arr(nid, "after", count + 1), child), b)
        return None


COMPLETION_CHECKS = 512  # candidate ends a patterned copy tries per step before it is taken to complete


@lru_cache(maxsize=256)
def _unanchored(rx):
    """``rx`` without the ``^`` and ``$`` that anchor a whole-string pattern (itself otherwise):
    what a span matching it looks like inside a longer text."""
    p = rx.pattern
    if p.startswith("^") and p.endswith("$") and not p.endswith("\\$"):
        return regex.compile(p[1:-1], rx.flags)
    return rx
