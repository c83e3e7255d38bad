"""Regular expressions in the grammar: compiling a request's pattern, and matching under a budget.

Patterns use the ``regex`` module's syntax (Python's ``re``, plus possessive and atomic forms)
and its partial matching: a byte may come next when the text so far is still the beginning of a
full match. ``\\d``, ``\\w`` and ``\\s`` are ASCII classes, as guided-decoding engines read them.
Used for ``regex_grammar`` (a whole text) and for a JSON Schema string's ``pattern`` and
``format`` (compiled by ``json_schema``; matched here).
"""

from __future__ import annotations

import codecs

import regex

from clover.engine.grammar.budget import work_time
from clover.engine.grammar.json_schema import GrammarError

MAX_REGEX_CHARS = 4096
# per match, in this thread's CPU seconds: a pattern that backtracks longer is treated as not
# matching there (``timed_match``); a match cut short by the wall clock alone is tried again
REGEX_TIMEOUT_S = 0.05


def compile_pattern(pattern: str) -> regex.Pattern:
    """A request's regular expression, compiled; ``GrammarError`` saying why where it cannot be."""
    if not isinstance(pattern, str) or not pattern:
        raise GrammarError("a regular expression must be a non-empty string")
    if len(pattern) > MAX_REGEX_CHARS:
        raise GrammarError(f"the regular expression is {len(pattern)} characters; at most {MAX_REGEX_CHARS}")
    try:
        return regex.compile(pattern, regex.ASCII)  # \d, \w, \s as ASCII classes: what guided-decoding engines read
    except (regex.error, OverflowError, RecursionError) as e:
        raise GrammarError(f"invalid regular expression: {e}") from None


def _utf8_length(lead: int) -> int:
    return 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4


def timed_match(method, text: str, partial: bool, tries: int = 8):
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


def utf8_match(data: bytes, partial: bool, test) -> bool:
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


def full_match(rx: regex.Pattern, data: bytes, partial: bool) -> bool:
    """``data`` fully matches ``rx``, or (``partial``) may still grow into a text that does."""
    return utf8_match(data, partial, lambda text, p: timed_match(rx.fullmatch, text, p))
