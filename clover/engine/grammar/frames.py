"""The grammar automaton's states and frames, as named types.

A state is ``State(stack, ws)``: ``stack`` a tuple of frames, the top last, and ``ws`` the run of
whitespace just read. Each frame is a named tuple whose last field, ``kind``, names its type and
is filled in by the type (never passed), so two frames of different kinds with the same fields
(an ``INum`` and an ``FNum``) stay unequal. Being tuples, states hash and compare as tuples do
and key the grammar's caches. Fields are read by name only: indexing a frame or a state raises
``TypeError``, so no code reads a field by its place in the tuple.
"""

from __future__ import annotations

from collections import namedtuple


def _by_name(self, index):
    raise TypeError(f"a {type(self).__name__} is read by field name, not by index ({index!r})")


def frame_type(name: str, kind: str, fields: str):
    """A frame type: a named tuple of ``fields`` and ``kind``, read by name only (the types below,
    and those of a grammar that wraps these, such as ``reply_grounding``'s)."""
    cls = namedtuple(name, f"{fields} kind", defaults=(kind,))
    cls.__getitem__ = _by_name
    return cls


State = namedtuple("State", "stack ws")
State.__getitem__ = _by_name
# node: a schema node's index (``Grammar.nodes``); typed: the bytes of the frame read so far;
# esc: a string's escape state (``scalars.string_step``)
Lit = frame_type("Lit", "lit", "lit i")  # the next bytes must be lit[i:]
Val = frame_type("Val", "val", "node")  # a value of the node is next
Str = frame_type("Str", "str", "options typed esc")  # inside a string; options: its allowed bodies (None: any)
Key = frame_type("Key", "key", "node seen typed esc")  # inside a key of the node's object, ``seen`` keys written
Num = frame_type("Num", "num", "integer phase digits")  # inside a number; phase: sign zero int dot frac e esign exp
Lits = frame_type("Lits", "lits", "options typed")  # one of these literal values (a non-string enum)
Obj = frame_type("Obj", "obj", "node seen phase key")  # phase: open | key | colon | after | next
Arr = frame_type("Arr", "arr", "node phase count")  # phase: open | after | next
Alt = frame_type("Alt", "alt", "table typed")  # one of the table's literals, then its continuation
More = frame_type("More", "more", "table sep")  # optional: sep then another Alt (parallel tool calls)
Free = frame_type("Free", "free", "trigger matched head")  # any text; once it spells trigger, head then a call
Re = frame_type("Re", "re", "index typed")  # text that is still the beginning of a full match
PStr = frame_type("PStr", "pstr", "node typed esc")  # a string with a pattern or format (maybe length bounds)
LStr = frame_type("LStr", "lstr", "lo hi count esc")  # a string with length bounds only; count: characters
FNum = frame_type("FNum", "fnum", "bounds typed")  # a number within bounds (lo, lo excl., hi, hi excl.)
INum = frame_type("INum", "inum", "bounds typed")  # the same for an integer (no point either)
# inside a grounded string: the span starts [lo, hi) of span index ``key`` (``grounding.SpanIndex``)
# all begin with the depth bytes decoded so far; esc 0 plain, 1 after a backslash, 2-5 inside
# \uXXXX (hexbuf its digits); typed: the raw text, kept where a pattern or length bound is checked;
# until: -1, or the depth the copy must end at (its end chosen whole: ``Grammar.hold``)
GStr = frame_type("GStr", "gstr", "node key lo hi depth esc hexbuf typed until")
FRAMES = (Lit, Val, Str, Key, Num, Lits, Obj, Arr, Alt, More, Free, Re, PStr, LStr, FNum, INum, GStr)
