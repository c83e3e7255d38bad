"""The grammar automaton's states and frames, as named types.

A state is ``State(stack, ws)``: ``stack`` a tuple of frames, the top last, and ``ws`` the run of
whitespace just read. Each frame is one of the types below, a ``NamedTuple`` whose last field,
``kind``, names its type and is never passed: two frames of different kinds with the same fields
(an ``inum`` and an ``fnum``) stay unequal. Being tuples, states hash and compare as tuples do,
so they key the grammar's caches.

A frame's fields are read by name only: indexing a frame or a state by position raises
``TypeError`` (``_by_name``), so no code reads a field by its place in the tuple.
"""

from __future__ import annotations

from fractions import Fraction
from typing import NamedTuple

__all__ = [
    "FRAMES",
    "Alt",
    "Arr",
    "FNum",
    "Free",
    "GStr",
    "INum",
    "Key",
    "LStr",
    "Lit",
    "Lits",
    "More",
    "Num",
    "Obj",
    "PStr",
    "Re",
    "State",
    "Str",
    "Val",
]

Bounds = tuple[Fraction | None, bool, Fraction | None, bool]  # (lo, lo exclusive, hi, hi exclusive)


class State(NamedTuple):
    stack: tuple  # the frames, the top last
    ws: int  # whitespace bytes just read


class Lit(NamedTuple):
    """The next bytes must be ``lit[i:]``."""

    lit: bytes
    i: int
    kind: str = "lit"


class Val(NamedTuple):
    """A value of schema node ``node`` is next."""

    node: int
    kind: str = "val"


class Str(NamedTuple):
    """Inside a string; ``options``: the bodies it may have (None: any), ``typed`` what came so far
    (kept only where options are), ``esc`` the escape state (``scalars.string_step``)."""

    options: tuple[bytes, ...] | None
    typed: bytes
    esc: int
    kind: str = "str"


class Key(NamedTuple):
    """Inside a key of the object of node ``node``, which has ``seen`` keys already."""

    node: int
    seen: frozenset
    typed: bytes
    esc: int
    kind: str = "key"


class Num(NamedTuple):
    """Inside an unbounded number: ``phase`` sign | zero | int | dot | frac | e | esign | exp."""

    integer: bool
    phase: str
    digits: int
    kind: str = "num"


class Lits(NamedTuple):
    """One of the literal values ``options`` (a non-string enum, a grounded number), ``typed`` so far."""

    options: tuple[bytes, ...]
    typed: bytes
    kind: str = "lits"


class Obj(NamedTuple):
    """An object of node ``node``: ``phase`` open | key | colon | after | next; ``key`` the one being written."""

    node: int
    seen: frozenset
    phase: str
    key: str | None
    kind: str = "obj"


class Arr(NamedTuple):
    """An array of node ``node`` with ``count`` items so far: ``phase`` open | after | next."""

    node: int
    phase: str
    count: int
    kind: str = "arr"


class Alt(NamedTuple):
    """One of the literals of table ``table`` (``Grammar.tables``), then its continuation."""

    table: int
    typed: bytes
    kind: str = "alt"


class More(NamedTuple):
    """Optional: ``sep`` then another ``Alt`` of table ``table`` (parallel tool calls)."""

    table: int
    sep: bytes
    kind: str = "more"


class Free(NamedTuple):
    """Any text; once it spells ``trigger`` (``matched`` bytes of it so far), ``head`` then a call."""

    trigger: bytes
    matched: int
    head: bytes
    kind: str = "free"


class Re(NamedTuple):
    """Text that is still the beginning of a full match of regular expression ``index``."""

    index: int
    typed: bytes
    kind: str = "re"


class PStr(NamedTuple):
    """Inside a string of node ``node``, which has a pattern or format (and maybe length bounds)."""

    node: int
    typed: bytes
    esc: int
    kind: str = "pstr"


class LStr(NamedTuple):
    """Inside a string with length bounds only: ``count`` characters so far (an escape is one)."""

    lo: int
    hi: int | None
    count: int
    esc: int
    kind: str = "lstr"


class FNum(NamedTuple):
    """Inside a number within ``bounds`` (written without an exponent), ``typed`` so far."""

    bounds: Bounds
    typed: bytes
    kind: str = "fnum"


class INum(NamedTuple):
    """The same for an integer (no point either; its bounds whole and inclusive)."""

    bounds: Bounds
    typed: bytes
    kind: str = "inum"


class GStr(NamedTuple):
    """Inside a grounded string of node ``node``: the source's span starts ``[lo, hi)`` of the
    span index ``key`` (``grounding.SpanIndex``) all begin with the ``depth`` bytes decoded so
    far; ``esc`` 0 plain, 1 after a backslash, 2-5 inside ``\\uXXXX`` (``hexbuf`` its digits);
    ``typed`` the raw text, kept where a pattern or length bound must be checked too."""

    node: int
    key: int
    lo: int
    hi: int
    depth: int
    esc: int
    hexbuf: str
    typed: bytes
    kind: str = "gstr"


FRAMES = (Lit, Val, Str, Key, Num, Lits, Obj, Arr, Alt, More, Free, Re, PStr, LStr, FNum, INum, GStr)


def _by_name(self, index):
    raise TypeError(f"a {type(self).__name__} is read by field name, not by index ({index!r})")


for _cls in (State, *FRAMES):
    _cls.__getitem__ = _by_name
