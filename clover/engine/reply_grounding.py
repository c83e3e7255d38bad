"""Grounded replies: the numbers, ids and names of a reply in words copied from the conversation.

A reply that summarises tool results is read by an operator, who trusts its numbers and ids. This
module holds a reply's **id runs** to the ones its sources wrote: a run is letters, digits and
``_`` joined by ``-``, ``.`` or ``:`` between two of them ("D-95", "Golf-3", "23.4034", "18:00",
"drone_id"), the longest such stretch; an **id run** is a run that holds a digit. Every id run of
the reply must be an id run of the sources (``id_runs``), whole and as written: "D-26" is not
"drone 26", "2" is not "2.0", and "D-2" is not a part of "D-26". And a **name** the reply repeats
is copied whole: a word (ASCII letters) that begins with a capital inside a sentence, and whose
first ``NAME_PREFIX`` letters begin a capitalised word of the sources (``name_words``), must be
that word ("Kingsway", not "Kingsec"). Other words are free, unless a **vocabulary** is given:
then every word of the reply (a run of ASCII letters, ignoring case) is a word of the vocabulary
or of the sources (``words``), and may end only where one ends ("minutes", not "minutesa" or
"utes").

It is a grammar over the reply's bytes (:class:`ReplyGrammar`), so the engine enforces it as any
other: a token is allowed where its bytes keep every id run possible, EOS where the text may end.
Whether a run is an id run is known only when its first digit comes ("Golf" may become "Golf-3" or
stay a word), so the run is kept as written until then; at its first digit the run so far must
begin one of the source's id runs, and from there every byte must continue one and the run may
end only where one ends. Where every id run still possible goes on the same way and none may end
yet, the next bytes are forced (``forced``): the copy has one spelling in tokens, and the engine
commits it without asking the model. A run that no source id run begins with collapses to one
state (a digit may no longer join it), so the states, and the allowed-token sets cached for
them, stay few. The word rule keeps the letters of the word under way (lower case) while they
begin an allowed word, and refuses a letter that would begin none, or a word's end where no
allowed word ends; it never forces bytes (the model picks among the allowed words). The letters
of the call's opening tag (``<tool_call>``) are exempt while they spell it.

With tools offered (``tool_choice: auto``) it wraps the tool-call grammar: the rule holds in the
free text around the calls, and inside a call (from the opening tag to where the call grammar is
back in free text) the call grammar alone decides. A state is the wrapped grammar's state with
one frame of this module's at the bottom of its stack.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from functools import lru_cache

import regex

from clover.engine.grammar import Grammar
from clover.engine.grammar.frames import State, frame_type
from clover.engine.grammar.lru import LRU

__all__ = ["NAME_PREFIX", "ReplyGrammar", "id_runs", "name_words", "reply_sources", "runs", "words"]

_RUN = regex.compile(r"[A-Za-z0-9_]+(?:[-.:][A-Za-z0-9_]+)*")
_NAME = regex.compile(r"(?<![A-Za-z])[A-Z][A-Za-z]*")
_LETTERS = regex.compile(r"[A-Za-z]+")
_WORD = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_DIGIT = frozenset(b"0123456789")
_JOIN = frozenset(b"-.:")
_LETTER = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_UPPER = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_SENTENCE_END = frozenset(b".!?\n>")  # the next word begins a sentence (">": after a call's closing tag)
_KEEP = frozenset(b" \t\"'([")  # bytes that leave whether the next word begins a sentence as it was
NAME_PREFIX = 3  # letters a capitalised word shares with a name of the sources before it must be that name
_KIND = "reply"  # this module's frame: Reply(in_call, matched, run, word, letters), matched: of the call trigger
# run: None (between runs); ("w", joiner) a run no id run begins with (joiner: it ends in one);
# ("p", text, digit) a run that begins some id run(s), digit: it holds one; ("e",) an id run just
# ended before a joiner ("D-26."), which a letter or digit may not follow.
# word: ("b", initial) between words, initial: the next word begins a sentence; ("f",) a free word;
# ("u", text) a capitalised word inside a sentence, its first letters (a name once NAME_PREFIX of
# them begin a name of the sources)
# letters: with a vocabulary, the letters of the word under way in lower case (None: between
# words, or no vocabulary); ("rest", bytes): closing's stand-in for a word under way, the letters
# it still needs (``closing_state``)
_START_WORD = ("b", True)
Reply = frame_type("Reply", _KIND, "in_call matched run word letters")


def words(text: str) -> list[str]:
    """The words of ``text`` in order: runs of ASCII letters ("ETA", "minutes", "D" of "D-26")."""
    return _LETTERS.findall(text or "")


def name_words(text: str) -> list[str]:
    """The words of ``text`` a reply's capitalised words are held to: runs of ASCII letters that
    begin with a capital and have at least ``NAME_PREFIX`` letters ("Kingsway", "Hospital")."""
    return [w for w in _NAME.findall(text) if len(w) >= NAME_PREFIX]


def runs(text: str) -> list[str]:
    """The runs of ``text`` in order: letters, digits and ``_`` joined by ``-``, ``.`` or ``:``."""
    return _RUN.findall(text)


def id_runs(text: str) -> list[str]:
    """The runs of ``text`` that hold a digit ("D-26", "2", "23.4034"), in order."""
    return [r for r in runs(text) if any(c.isdigit() for c in r)]


def reply_sources(messages: list[dict]) -> str:
    """What a reply may copy its id runs from: the user turns and tool results, one per line."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):  # content parts: their text
            content = "\n".join(
                p.get("text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
        if m.get("role") in ("user", "tool", "function") and isinstance(content, str) and content:
            out.append(content)
    return "\n".join(out)


class ReplyGrammar(Grammar):
    """Free text whose id runs are id runs of ``source`` and whose names are its names (see the
    module docstring), around the calls of ``inner`` (a ``tool_call_grammar(..., auto=True)``,
    whose calls open with ``call_open``) or alone (``inner`` None: text only). With a
    ``vocabulary`` (words: runs of ASCII letters), every word of the text is one of it or of
    ``source``, ignoring case; None: words are free."""

    def __init__(
        self, source: str, inner: Grammar | None = None, call_open: str = "", vocabulary: Iterable[str] | None = None
    ):
        if inner is not None and not call_open:
            raise ValueError("a wrapped tool-call grammar needs the text that opens a call (call_open)")
        # the allowed words, lower case, sorted: the vocabulary's (built once per vocabulary) and the sources'
        self.words: tuple[bytes, ...] | None = None
        if vocabulary is not None:
            self.words, self._word_set = _vocabulary_index(
                vocabulary if isinstance(vocabulary, frozenset) else frozenset(vocabulary)
            )
            own = {w.lower().encode() for w in words(source)}
            self.source_words = tuple(sorted(own))
            self._source_set = frozenset(own)
            self._rests = LRU(65536)
        self.inner = inner
        self.trigger = call_open.encode()
        self.allowed_runs = tuple(sorted({r.encode() for r in id_runs(source)}))
        self._run_set = frozenset(self.allowed_runs)
        self.names = tuple(sorted({w.encode() for w in name_words(source)}))
        self._name_set = frozenset(self.names)
        base = inner.start_state if inner is not None else State((), 0)
        self.start_state = State((Reply(False, 0, None, _START_WORD, None), *base.stack), base.ws)
        # what the engine and ``closing`` read of a grammar, the wrapped one's where it has them
        self.tables = inner.tables if inner is not None else []
        self.regexes = inner.regexes if inner is not None else []
        self.nodes = inner.nodes if inner is not None else []
        self.ws, self.max_ws = (inner.ws, inner.max_ws) if inner is not None else (frozenset(), 0)
        self.timed = inner.timed if inner is not None else False
        # truthy: the engine asks for forced tokens (a copy under way forces its bytes)
        self.grounded = list(inner.grounded) if inner is not None and inner.grounded else [-1]
        self.spans, self.by_key, self.numbers = (
            (inner.spans, inner.by_key, inner.numbers) if inner is not None else (None, {}, {})
        )
        self.dead = inner.dead if inner is not None else frozenset()
        self._steps = LRU(65536)
        self.allowed_cache = LRU(16384)
        self.endings, self.costs, self.ranks = LRU(65536), LRU(65536), LRU(4096)
        self.smallest = {}

    # -- the grammar's interface ------------------------------------------------------------------
    def with_sources(self, texts: dict[str, str]) -> Grammar:
        """Itself: its sources were given when it was built (wrap a grammar after ``with_sources``)."""
        return self

    def can_call(self) -> bool:
        return self.inner.can_call() if self.inner is not None else True

    def advance(self, state, data: bytes):
        for b in data:
            key = (state, b)
            nxt = self._steps.get(key, key)
            if nxt is key:
                nxt = self._step_reply(state, b)
                self._steps[key] = nxt
            state = nxt
            if state is None:
                return None
        return state

    def complete(self, state) -> bool:
        own, inner = self._split(state)
        if own is None:  # a state of the wrapped grammar alone (``closing`` asks about parts of one)
            return self.inner is not None and self.inner.complete(inner)
        in_call, run, word = own.in_call, own.run, own.word
        if not in_call and not (self._may_end(run) and self._word_may_end(word) and self._letters_may_end(own.letters)):
            return False
        return self.inner.complete(inner) if self.inner is not None else True

    def forced(self, state, most: int = 64) -> bytes:
        """Inside an id run or a name: the bytes every id run (or name) still possible goes on
        with, while none may end, as far as the whole grammar takes them; in a call: the wrapped
        grammar's forced bytes; empty elsewhere."""
        own, inner = self._split(state)
        if own is None:
            return self.inner.forced(inner, most) if self.inner is not None else b""
        in_call, run, word = own.in_call, own.run, own.word
        if in_call:
            return self.inner.forced(inner, most)
        if run is not None and run[0] == "p" and run[2]:
            out = _common_continuation(run[1], self.allowed_runs, self._run_set, most)
        elif word[0] == "u" and len(word[1]) >= NAME_PREFIX:
            out = _common_continuation(word[1], self.names, self._name_set, most)
        else:
            return b""
        for i in range(len(out)):  # as far as the other rule and the wrapped grammar take them
            state = self.advance(state, out[i : i + 1])
            if state is None:
                return out[:i]
        return out

    def closing_state(self, state):
        """The state budget-aware closing (``grammar.closing``) works an ending out from: this one
        with the word under way replaced by what is left of it (the rest of the shortest allowed
        word it begins), so the many words a reply writes do not multiply the states it costs."""
        own, inner = self._split(state)
        if own is None or own.letters is None or isinstance(own.letters, tuple):
            return state
        rest = self._rest(own.letters)
        if rest is None:  # the letters of a call's opening tag: as they are
            return state
        letters = None if not rest else ("rest", rest)
        return State((own._replace(letters=letters), *inner.stack), inner.ws)

    def ending_head(self, state) -> bytes:
        """The bytes an ending of ``state`` begins with: the rest of the word under way (closing)."""
        own, _ = self._split(state)
        if own is None or own.letters is None:
            return b""
        return own.letters[1] if isinstance(own.letters, tuple) else self._rest(own.letters) or b""

    def _rest(self, letters: bytes) -> bytes | None:
        """What the shortest allowed word that begins with ``letters`` has after them (None: no
        allowed word begins so, as inside a call's opening tag)."""
        out = self._rests.get(letters, _REFUSED)
        if out is _REFUSED:
            options = _prefixed(self.words, letters) + _prefixed(self.source_words, letters)
            out = min(options, key=len)[len(letters) :] if options else None
            self._rests[letters] = out
        return out

    # -- the automaton --------------------------------------------------------------------------
    def _split(self, state):
        """(this module's frame or None, the wrapped grammar's state)."""
        stack, ws = state
        if stack and stack[0].kind == _KIND:
            return stack[0], State(stack[1:], ws)
        return None, state

    def _step_reply(self, state, b: int):
        own, inner = self._split(state)
        if own is None:  # a part of a wrapped state (``closing``): the wrapped grammar's own step
            return self.inner.advance(inner, bytes([b])) if self.inner is not None else None
        in_call, matched, run, word = own.in_call, own.matched, own.run, own.word
        if self.inner is not None:
            inner = self.inner.advance(inner, bytes([b]))
            if inner is None:
                return None
        if in_call:
            back = inner == self.inner.start_state  # the call grammar is in free text again
            return State((Reply(not back, 0, None, _START_WORD, None), *inner.stack), inner.ws)
        run, word = self._run_step(run, b), self._word_step(word, b)
        if run is _REFUSED or word is _REFUSED:
            return None
        if self.trigger:
            t = self.trigger
            matched = matched + 1 if t[matched] == b else int(t[0] == b)
            if matched == len(t):  # a call opens: its text is the call grammar's
                return State((Reply(True, 0, None, _START_WORD, None), *inner.stack), inner.ws)
        letters = self._letters_step(own.letters, b, matched)
        if letters is _REFUSED:
            return None
        return State((Reply(False, matched, run, word, letters), *inner.stack), inner.ws)

    def _letters_step(self, letters, b: int, matched: int):
        """The word rule's state after byte ``b`` (``matched``: the text so far ends in that many
        bytes of the call's opening tag; a word inside them is exempt while they spell it).
        ``("rest", bytes)``: a word that must go on with those letters (``closing_state``'s)."""
        if self.words is None:
            return None
        if isinstance(letters, tuple):  # closing's: only the word's rest, then its end
            rest = letters[1]
            if b in _LETTER:
                return ("rest", rest[1:]) if rest and b | 0x20 == rest[0] else _REFUSED
            return None if not rest else _REFUSED
        if b in _LETTER:
            text = (letters or b"") + bytes([b | 0x20])  # lower case
            return text if len(text) < matched or self._begins(text) else _REFUSED
        if letters is None or len(letters) < matched or self._is_word(letters):
            return None
        return _REFUSED  # a word ends where no allowed word ends

    def _letters_may_end(self, letters) -> bool:
        if isinstance(letters, tuple):
            return not letters[1]
        return letters is None or self._is_word(letters)

    def _begins(self, text: bytes) -> bool:
        """Some allowed word begins with ``text``."""
        return bool(_prefixed(self.words, text) or _prefixed(self.source_words, text))

    def _is_word(self, text: bytes) -> bool:
        return text in self._word_set or text in self._source_set

    def _word_step(self, word, b: int):
        """The capitalised-word rule's state after byte ``b``."""
        kind = word[0]
        if b in _LETTER:
            if kind == "b":
                return ("u", bytes([b])) if b in _UPPER and not word[1] else ("f",)
            if kind == "f":
                return word
            text = word[1] + bytes([b])
            if len(text) < NAME_PREFIX or _prefixed(self.names, text):
                return ("u", text)
            return ("f",) if len(text) == NAME_PREFIX else _REFUSED  # not a name / a name left
        if not self._word_may_end(word):
            return _REFUSED
        initial = word[1] if kind == "b" else False
        return ("b", True if b in _SENTENCE_END else initial if b in _KEEP else False)

    def _word_may_end(self, word) -> bool:
        return word[0] != "u" or len(word[1]) < NAME_PREFIX or word[1] in self._name_set

    def _starting(self, text: bytes) -> tuple[bytes, ...]:
        """The source's id runs that begin with ``text``."""
        return _prefixed(self.allowed_runs, text)

    def _may_end(self, run) -> bool:
        """The run may end here (before a byte that is not part of it, or the end of the text)."""
        if run is None or run[0] != "p" or not run[2]:
            return True
        text = run[1][:-1] if run[1][-1] in _JOIN else run[1]
        return text in self._run_set

    def _run_step(self, run, b: int):
        word, digit, join = b in _WORD, b in _DIGIT, b in _JOIN
        if run is None:
            if not word:
                return None
            return self._begun(bytes([b]), digit)
        kind = run[0]
        if kind == "e":
            return _REFUSED if word else None
        if kind == "w":
            if word:
                return _REFUSED if digit else ("w", False)
            return ("w", True) if join and not run[1] else None
        text, has = run[1], run[2]
        joined = text[-1] in _JOIN
        if word:
            return self._begun(text + bytes([b]), has or digit)
        if join and not joined:
            if self._starting(text + bytes([b])):
                return ("p", text + bytes([b]), has)
            if not has:
                return ("w", True)
            return ("e",) if text in self._run_set else _REFUSED
        return None if self._may_end(run) else _REFUSED  # the run ends before this byte

    def _begun(self, text: bytes, digit: bool):
        """A run that is ``text`` so far (``digit``: it holds one)."""
        if self._starting(text):
            return ("p", text, digit)
        return _REFUSED if digit else ("w", False)


_REFUSED = object()


@lru_cache(maxsize=8)
def _vocabulary_index(vocabulary: frozenset[str]) -> tuple[tuple[bytes, ...], frozenset[bytes]]:
    """A vocabulary's words in lower case, sorted, and as a set (a ValueError for one that is not
    a run of ASCII letters): built once per vocabulary, not per request."""
    given = {w.lower() for w in vocabulary}
    if bad := sorted(w for w in given if not _LETTERS.fullmatch(w))[:3]:
        raise ValueError(f"a vocabulary holds words (runs of ASCII letters), not {bad}")
    out = tuple(sorted(w.encode() for w in given))
    return out, frozenset(out)


def _prefixed(options: tuple[bytes, ...], text: bytes) -> tuple[bytes, ...]:
    """The ``options`` (sorted) that begin with ``text``."""
    i = j = bisect_left(options, text)
    while j < len(options) and options[j].startswith(text):
        j += 1
    return options[i:j]


def _common_continuation(text: bytes, options: tuple[bytes, ...], whole: frozenset, most: int) -> bytes:
    """The bytes every option that begins with ``text`` goes on with, until one may end there."""
    out = bytearray()
    while len(out) < most and text not in whole:
        nxt = {o[len(text)] for o in _prefixed(options, text) if len(o) > len(text)}
        if len(nxt) != 1:
            break
        out.append(nxt.pop())
        text += out[-1:]
    return bytes(out)
