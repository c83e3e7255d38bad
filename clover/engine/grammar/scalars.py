"""JSON strings and numbers byte by byte: the rules the automaton's string and number frames follow.

``string_step`` is a string's escape state after one byte; ``counted_string`` a string with
length bounds only; ``number_reachable`` whether a bounded number begun may still end within its
bounds; ``value_may_end`` whether the value on top of a stack may end before the next byte.
"""

from __future__ import annotations

from fractions import Fraction

from clover.engine.grammar.frames import LStr
from clover.engine.grammar.json_schema import MAX_NUMBER_DIGITS

NUM_START = frozenset(b"-0123456789")
HEX = frozenset(b"0123456789abcdefABCDEF")
ESC = frozenset(b'"\\/bfnrtu')
_NUM_END = frozenset(("zero", "int", "frac", "exp"))
# a digit's next phase in an unbounded number (``Num``); None: no digit may follow a leading zero
NUM_DIGIT = {"zero": None, "int": "int", "dot": "frac", "frac": "frac", "e": "exp", "esign": "exp", "exp": "exp"}


def value_may_end(f) -> bool:
    """A number or non-string literal on top may end before the next byte (it has no closing mark)."""
    kind = f.kind
    if kind == "inum" or kind == "fnum":
        return number_reachable(f.bounds, f.typed, whole=True)
    return kind == "num" and f.phase in _NUM_END or kind == "lits" and f.typed in f.options


def number_reachable(bounds, typed: bytes, whole: bool = False) -> bool:
    """``typed`` is the beginning of a JSON number within ``bounds`` = (lo, lo exclusive, hi, hi
    exclusive) (``whole``: is one). Written without an exponent (any number in bounds can be; an
    integer never gets a point, and its bounds are whole and inclusive). The values its
    completions reach form ``[a, b)``: ``n`` followed by k more digits, ``[n·10^k, (n+1)·10^k)``;
    after the point, ``[n.f, n.f + 10^-|f|)``."""
    lo, lo_x, hi, hi_x = bounds
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


def counted_string(f: LStr, rest: tuple, b: int):
    """Inside a string with length bounds only: ``LStr`` counts characters (an escape is one), so
    states repeat across strings and their allowed sets are cached (a pattern's text, by
    contrast, is kept whole). The stack after byte ``b``, or None."""
    lo, hi, count, esc = f.lo, f.hi, f.count, f.esc
    if esc == 0 and b == ord('"'):
        return rest if count >= lo else None
    count += esc == 0  # a character starts here (an escape's backslash counts for it)
    esc = string_step(esc, b)
    return None if esc is None or hi is not None and count > hi else (*rest, LStr(lo, hi, count, esc))


def string_step(esc: int, b: int) -> int | None:
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
        return None if b not in ESC else 2 if b == ord("u") else 0
    return None if b not in HEX else 0 if esc == 5 else esc + 1
