"""Grounded arguments: the values a property marked ``x-grounded`` may take, read from a request's
own text (the automaton, ``clover.engine.grammar.automaton``, enforces them byte by byte;
docs/grounding.md).

A **string** is a span of the source: it starts where a word starts and ends where a word ends
(a word: letters, digits, ``_`` and combining marks; each Han, kana or Thai character is a word of
its own, since those scripts put no spaces between words; a final ``.`` is kept after a one-letter
abbreviation such as "p.m."), and holds no quote mark, bracket, tab or line break. So "Area 51."
gives "Area 51", and "“Lima-5”" gives "Lima-5". A name's own edges are kept whole and a clause's
end is not crossed (``span_edges``: "Lima" of "Lima-5", "W" of "W. Hill" or "Kilo; then" is no
span). Copied text is written as JSON requires and no
more: a quote mark and a backslash escaped, control characters escaped, everything else (``/``,
letters of any script) as it is, so each copy has one spelling.

A **number** is one written in the source, as written: a run of digits with an optional
decimal part, with thousands separators dropped ("2,300" is 2300) and leading zeros dropped
("007" is 7, ".5" is 0.5, as JSON writes numbers). The sign is the model's: "45.2 S" or "minus 3" may be
written -45.2 or -3, so both signs of every written number are allowed.

:class:`SpanIndex` keeps the source's span starts sorted by the text that follows them, so the
starts whose text begins with what has been copied so far are one contiguous range: a byte
narrows it by two binary searches, and a grammar state stays a small tuple (cached and hashed
like any other).

The public interface, for the grammar and for anything else that copies from a request's text:

* ``source_texts(messages)``: the texts a request's values may come from, by source name
  (``SOURCES``); ``source_of(x)`` the source an ``x-grounded`` value names.
* ``SpanIndex(text)``: a range ``starts[lo:hi]`` of span starts that share their first ``depth``
  bytes is the state of a copy under way; ``(0, len(ix))`` at depth 0 is every span.
  ``narrow(lo, hi, depth, byte)`` the range after one more byte (None: no span goes on so);
  ``can_end(lo, hi, depth)`` whether a span may end there; ``common_bytes(lo, hi, depth, most)``
  the bytes every span of the range goes on with before any may end (what a copy is forced to
  write); ``shortest_rest(lo, hi, depth, until)`` the rest of the shortest span of the range;
  ``next_chars`` the characters that may come next; ``byte_at(start, depth)`` one byte of a
  span; ``contains(value)`` the slow, obvious check that a whole value is a span. ``key``
  tells indexes apart in states and caches.
* ``written_numbers(text)``: the numbers a grounded number may be, as JSON literals;
  ``number_written(value, text)`` the check on a parsed value.
"""

from __future__ import annotations

import itertools
import unicodedata
from bisect import bisect_left, bisect_right
from fractions import Fraction

import regex

from clover.engine.grammar.budget import work_time

SOURCES = ("user", "conversation")  # x-grounded values (true means "user")
MAX_SPAN_BYTES = 512  # a copied span is at most this long (its text is sorted on at most this much)
MAX_SOURCE_CHARS = 1_000_000
# no span crosses these: quote marks, brackets, tabs and line breaks (a name's own quotes stay outside it)
BARRIERS = frozenset('"“”„«»\n\r\t()[]{}<>')
_NUMBER = regex.compile(r"(?<![\d.])(\d{1,3}(?:,\d{3})+|\d+|(?=\.\d))(\.\d+)?")
_keys = itertools.count(1)
# Han, kana, Thai, Lao, Khmer, Myanmar: scripts without spaces between words
_SCRIPT_WORDS = (
    (0x3040, 0x30FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0x20000, 0x2FA1F),
    (0x0E00, 0x0EFF),
    (0x1780, 0x17FF),
    (0x1000, 0x109F),
)


def _script_word(ch: str) -> bool:
    """A character that is a word by itself: Han, kana, Thai, Lao, Khmer, Myanmar."""
    o = ord(ch)
    return any(a <= o <= b for a, b in _SCRIPT_WORDS)


def _kind(ch: str) -> str:
    """'c' a word by itself, 'w' part of a word, 'o' anything else."""
    if _script_word(ch):
        return "c"
    if ch.isalnum() or ch == "_" or unicodedata.category(ch).startswith("M"):
        return "w"
    return "o"


# a name's own joints: a word joined to the next by one of these (no space) goes on into it
# ("E&K", "Lima-5", "O'Neil", "Basel's"), unless it holds a digit ("12:03am-12pm", "D-17's")
JOINERS = frozenset("&-'’")
SINGLE_QUOTES = frozenset("'‘’`")
CLAUSE_ENDS = frozenset(";:!?,")  # followed by a space or the end: a clause ends there
CLAUSE_DASHES = frozenset("-–—/")  # between spaces: a clause break (" - ", " — ", " / ")
# a span never ends on one of these words (in lower case: "Sector 8-A" ends on its "A"): a name goes on after "of", ...
NOT_LAST = frozenset(("of", "and", "the", "a", "an", "de", "at", "to", "for", "in", "on", "with", "from", "by"))
TIME_WORDS = frozenset(("am", "pm", "hrs", "hr", "h", "noon", "midnight", "midday"))  # "6 pm-8 pm" is two times
_ORDINAL = regex.compile(r"(?<!\w)\d+(?:st|nd|rd|th)$", regex.I)


def _barriers(text: str, word: list[bool]) -> list[bool]:
    """Per character, whether no span crosses it (``span_edges``; ``word``: a word character)."""
    n = len(text)
    wd = lambda i: 0 <= i < n and word[i]
    at = lambda i: text[i] if 0 <= i < n else ""
    barrier = [False] * n
    for i, ch in enumerate(text):
        if ch in BARRIERS:
            barrier[i] = True
        elif ch in CLAUSE_ENDS:
            barrier[i] = i + 1 == n or text[i + 1].isspace()
        elif ch in CLAUSE_DASHES:
            barrier[i] = at(i - 1) == " " and at(i + 1) == " " or ch in "–—" and " " in (at(i - 1), at(i + 1))
        elif ch in SINGLE_QUOTES:
            barrier[i] = not (wd(i - 1) and wd(i + 1))
    return barrier


def span_edges(text: str) -> tuple[list[bool], list[bool], list[bool]]:
    """Where a span of ``text`` may start (per character), end (per offset, 0 to ``len(text)``),
    and which characters no span crosses (docs/grounding.md has the rule in words).

    A span starts where a word starts and ends where a word ends (or after an initial's full
    stop), and never crosses a barrier: a quote mark, a bracket, a tab or line break, ``;`` ``:``
    ``!`` ``?`` before a space, a dash or slash between spaces, a single quote that is not an
    apostrophe inside a word. A name's edges are kept whole: no span ends inside a joined word
    ("E" of "E&K", "Lima" of "Lima-5", "O" of "O'Neil"; unless the word holds a digit), between an
    initial and its full stop ("W" of "W. Hill"), after a capital's initial that the next
    capitalised word continues ("W." of "W. Hill"), on an ordinal before its noun ("5th" of "5th
    Way"), or on a word such as "of" or "and" (``NOT_LAST``); nor does one start on the part after
    a joint, or on the word after an ordinal or a capital's initial. A ``#`` or ``.`` before a digit
    starts one too ("#16", ".5 nm")."""
    n = len(text)
    kinds = [_kind(ch) for ch in text]
    word = [k != "o" for k in kinds]
    wd = lambda i: 0 <= i < n and word[i]
    at = lambda i: text[i] if 0 <= i < n else ""
    # the word (run of word characters) each character is in: its first index
    first = [0] * n
    for i in range(n):
        first[i] = first[i - 1] if i and kinds[i] == "w" and kinds[i - 1] == "w" else i
    has_digit = [False] * n  # the word up to and including i holds a digit
    for i in range(n):
        has_digit[i] = text[i].isdigit() or (first[i] < i and has_digit[i - 1])

    def letter_stop(k: int) -> bool:
        """A one-letter word followed by a full stop ("W." , "p" of "p.m.")."""
        return 0 <= k < n and text[k].isalpha() and at(k + 1) == "." and not wd(k - 1) and at(k - 1) not in JOINERS

    def initial(k: int) -> bool:
        """A capital's initial: an upper-case ``letter_stop`` ("W. Hill", "T.C."; "270 m." is a unit)."""
        return letter_stop(k) and text[k].isupper()

    def capital_initial_before(i: int) -> bool:
        """Text before ``i`` ends with a capital's initial, its stop and one space ("W. ")."""
        return i >= 3 and at(i - 1) == " " and at(i - 2) == "." and initial(i - 3) and text[i - 3].isupper()

    def ordinal_before(i: int) -> bool:
        """Text before ``i`` ends with an ordinal and one space ("5th ")."""
        return i >= 2 and at(i - 1) == " " and bool(_ORDINAL.search(text[max(0, i - 12) : i - 1]))

    def joined(k: int) -> bool:
        """The word ending at ``k`` goes on through a joiner into the next word ("E&K", "Lima-5")."""
        return (
            at(k + 1) in JOINERS and wd(k + 2) and not has_digit[k] and text[first[k] : k + 1].lower() not in TIME_WORDS
        )

    barrier = _barriers(text, word)
    starts = [False] * n
    for i in range(n):
        if kinds[i] == "c" or kinds[i] == "w" and not wd(i - 1):
            after_joint = i >= 2 and wd(i - 2) and joined(i - 2)
            starts[i] = not (after_joint or ordinal_before(i) or capital_initial_before(i))
        elif text[i] in "#." and wd(i + 1) and text[i + 1].isdigit() and not wd(i - 1) and at(i - 1) != ".":
            starts[i] = True  # "#16", ".5"
    ends = [False] * (n + 1)
    for j in range(1, n + 1):
        k = j - 1  # the last character
        if kinds[k] == "c" or kinds[k] == "w" and not wd(j):
            w = text[first[k] : j]
            ends[j] = not (
                initial(k)
                or joined(k)
                or w in NOT_LAST
                or _ORDINAL.search(w) is not None
                and at(j) == " "
                and wd(j + 1)
            )
        elif text[k] == "." and letter_stop(k - 1) and (initial(k - 1) or at(k - 2) == ".") and not wd(j):
            ends[j] = not (initial(k - 1) and at(j) == " " and at(j + 1).isupper())  # "W.", "p.m.", "U.S."
    return starts, ends, barrier


class SpanIndex:
    """The spans of one source text a grounded string may copy (see the module docstring).

    ``starts``: byte offsets where a span may start, sorted by the bytes that follow (up to the
    next barrier, at most ``MAX_SPAN_BYTES``); ``limit[s]``: where that text ends; ``ends``: a flag
    per byte offset, 1 where a span may end. ``key``: unique per index, so grammar states built on
    different sources never meet in a shared cache."""

    def __init__(self, text: str):
        if len(text) > MAX_SOURCE_CHARS:
            text = text[:MAX_SOURCE_CHARS]
        self.text = text
        self.data = data = text.encode()
        self.key = next(_keys)
        offsets, pos = [], 0
        for ch in text:
            offsets.append(pos)
            pos += len(ch.encode())
        offsets.append(pos)
        starts_at, ends_at, barrier = span_edges(text)
        self.ends = bytearray(len(data) + 1)
        for j, e in enumerate(ends_at):
            if e:
                self.ends[offsets[j]] = 1
        last_end = [0] * (len(data) + 1)  # the last offset <= p where a span may end
        for p in range(1, len(data) + 1):
            last_end[p] = p if self.ends[p] else last_end[p - 1]
        starts, limit, seg_end = [], {}, len(data)
        for i in range(len(text) - 1, -1, -1):  # backwards: the next barrier is known at each start
            if barrier[i]:
                seg_end = offsets[i]
            elif starts_at[i]:
                # a copy reaches no further than the last end before the barrier: the bytes after it
                # ("Caipibe " of "Caipibe — CENTRE") would lead where no span ends (a dead end)
                end = last_end[min(seg_end, offsets[i] + MAX_SPAN_BYTES)]
                if end > offsets[i]:
                    starts.append(offsets[i])
                    limit[offsets[i]] = end
        self.limit = limit
        self.starts = sorted(starts, key=lambda s: data[s : limit[s]])

    def __len__(self) -> int:
        return len(self.starts)

    def byte_at(self, s: int, depth: int) -> int:
        """The byte ``depth`` into the text after start ``s``, or -1 past its end (sorts first)."""
        p = s + depth
        return self.data[p] if p < self.limit[s] else -1

    def narrow(self, lo: int, hi: int, depth: int, byte: int) -> tuple[int, int] | None:
        """The starts among ``starts[lo:hi]`` (all sharing ``depth`` bytes) whose next byte is ``byte``."""
        data, limit = self.data, self.limit
        key = lambda s: data[s + depth] if s + depth < limit[s] else -1  # byte_at, inlined: the hot path
        a = bisect_left(self.starts, byte, lo, hi, key=key)
        b = bisect_right(self.starts, byte, a, hi, key=key)
        return (a, b) if a < b else None

    def copied(self, lo: int, depth: int) -> bytes:
        """The first ``depth`` bytes every start in ``starts[lo:...]`` of a narrowed range shares:
        what a copy has written so far."""
        s = self.starts[lo]
        return self.data[s : s + depth]

    def can_end(self, lo: int, hi: int, depth: int) -> bool:
        """Some start in the range has a span exactly ``depth`` bytes long."""
        return depth > 0 and any(self.ends[s + depth] for s in itertools.islice(self.starts, lo, hi))

    def common_bytes(self, lo: int, hi: int, depth: int, most: int) -> bytes:
        """The bytes (at most ``most``) that every start in ``starts[lo:hi]`` goes on with after its
        first ``depth``, up to the first place where one of them may end a span."""
        out = bytearray()
        while len(out) < most and not self.can_end(lo, hi, depth):
            c = self.byte_at(self.starts[lo], depth)
            if c < 0 or c != self.byte_at(self.starts[hi - 1], depth):  # sorted: first and last agree, all do
                break
            out.append(c)
            depth += 1
        return bytes(out)

    def shortest_rest(self, lo: int, hi: int, depth: int, until: float) -> bytes | None:
        """The bytes after the first ``depth`` of the shortest span among ``starts[lo:hi]`` (at
        least one byte when ``depth`` is 0), or None where none ends. The starts are tried until
        ``budget.work_time()`` passes ``until`` (a long source has many): past it, the shortest
        found so far."""
        best = None
        for n, s in enumerate(self.starts[lo:hi]):
            if n % 256 == 255 and work_time() > until:
                break
            for e in range(s + max(depth, 1), self.limit[s] + 1):
                if self.ends[e]:
                    if best is None or e - s - depth < len(best):
                        best = self.data[s + depth : e]
                    break
        return best

    def rests(self, lo: int, hi: int, depth: int, most_bytes: int, most: int) -> list[bytes] | None:
        """The distinct ways the spans of the range go on from ``depth`` to an end (``b""``: one
        ends here), each at most ``most_bytes`` long, shortest first; None where there are more
        than ``most`` (too many to weigh one by one)."""
        out: set[bytes] = set()
        for s in itertools.islice(self.starts, lo, hi):
            for e in range(s + depth, min(self.limit[s], s + depth + most_bytes) + 1):
                if self.ends[e] and e > s:
                    out.add(self.data[s + depth : e])
                    if len(out) > most:
                        return None
        return sorted(out, key=lambda r: (len(r), r))

    def rest_range(self, lo: int, hi: int, depth: int, rest: bytes) -> tuple[int, int] | None:
        """The range after the bytes ``rest`` (``narrow`` byte by byte), or None."""
        for c in rest:
            r = self.narrow(lo, hi, depth, c)
            if r is None:
                return None
            (lo, hi), depth = r, depth + 1
        return lo, hi

    def next_chars(self, lo: int, hi: int, depth: int) -> set[int]:
        """Code points that may come next in the range (for ``\\uXXXX`` escapes)."""
        out = set()
        for s in itertools.islice(self.starts, lo, hi):
            p = s + depth
            if p < self.limit[s]:
                n = 1 if self.data[p] < 0xC0 else 2 if self.data[p] < 0xE0 else 3 if self.data[p] < 0xF0 else 4
                out.add(ord(self.data[p : p + n].decode(errors="replace")[0]))
        return out

    def contains(self, value: str) -> bool:
        """``value`` is a span of the source (the slow, obvious check: tests and ``ungrounded_args``)."""
        v = value.encode()
        return (
            any(
                self.data.startswith(v, s) and s + len(v) <= self.limit[s] and self.ends[s + len(v)]
                for s in self.starts
            )
            if v
            else False
        )


def written_numbers(text: str) -> tuple[bytes, ...]:
    """The numbers written in ``text`` as JSON writes them, each with both signs (sorted)."""
    out = set()
    for m in _NUMBER.finditer(text):
        whole, frac = m.group(1), m.group(2) or ""
        for w in {whole.replace(",", ""), *(whole.split(",") if "," in whole else ())}:
            w = w.lstrip("0") or "0"
            lit = w + frac
            out.add(lit)
            if Fraction(lit) != 0:
                out.add("-" + lit)
    return tuple(sorted(x.encode() for x in out))


def number_written(value, text: str) -> bool:
    """A JSON number ``value`` is one of the numbers written in ``text`` (either sign): for tests
    and ``ungrounded_args``, on the parsed value (1.50 and 1.5 are the same number here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return any(Fraction(x.decode()) == Fraction(str(value)) for x in written_numbers(text))


def source_texts(messages: list[dict]) -> dict[str, str]:
    """The texts grounded values are copied from: ``user`` (the user turns) and ``conversation``
    (user, tool, system and developer messages), one message per line."""
    parts: dict[str, list[str]] = {"user": [], "conversation": []}
    for m in messages:
        role = m.get("role")
        content = m.get("content")
        if isinstance(content, list):  # content parts: their text
            texts = [p.get("text") for p in content if isinstance(p, dict)]
            content = "\n".join(t for t in texts if isinstance(t, str))
        if not isinstance(content, str) or not content:
            continue
        if role == "user":
            parts["user"].append(content)
        if role in ("user", "tool", "system", "developer", "function"):
            parts["conversation"].append(content)
    return {k: "\n".join(v) for k, v in parts.items()}


def source_of(value) -> str | None:
    """The source an ``x-grounded`` value names (``True`` is ``"user"``), or None for ``False``."""
    return "user" if value is True else None if value is False else value
