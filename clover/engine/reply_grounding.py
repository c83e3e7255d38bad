"""Grounded replies: the numbers and ids of a reply in words copied from the conversation.

A reply that summarises tool results is read by an operator, who trusts its numbers and ids. This
module holds a reply's **id runs** to the ones its sources wrote: a run is letters, digits and
``_`` joined by ``-``, ``.`` or ``:`` between two of them ("D-95", "Golf-3", "23.4034", "18:00",
"drone_id"), the longest such stretch; an **id run** is a run that holds a digit. Every id run of
the reply must be an id run of the sources (``id_runs``), whole and as written: "D-26" is not
"drone 26", "2" is not "2.0", and "D-2" is not a part of "D-26". Words without a digit are free.

It is a grammar over the reply's bytes (:class:`ReplyGrammar`), so the engine enforces it as any
other: a token is allowed where its bytes keep every id run possible, EOS where the text may end.
Whether a run is an id run is known only when its first digit comes ("Golf" may become "Golf-3" or
stay a word), so the run is kept as written until then; at its first digit the run so far must
begin one of the source's id runs, and from there every byte must continue one and the run may
end only where one ends. Where every id run still possible goes on the same way and none may end
yet, the next bytes are forced (``forced``): the copy has one spelling in tokens, and the engine
commits it without asking the model. A run that no source id run begins with collapses to one
state (a digit may no longer join it), so the states, and the allowed-token sets cached for
them, stay few.

With tools offered (``tool_choice: auto``) it wraps the tool-call grammar: the rule holds in the
free text around the calls, and inside a call (from the opening tag to where the call grammar is
back in free text) the call grammar alone decides. A state is the wrapped grammar's state with
one frame of this module's at the bottom of its stack.
"""

from __future__ import annotations

from bisect import bisect_left

import regex

from clover.engine.grammar import Grammar
from clover.engine.lru import LRU

__all__ = ["ReplyGrammar", "id_runs", "reply_sources", "runs"]

_RUN = regex.compile(r"[A-Za-z0-9_]+(?:[-.:][A-Za-z0-9_]+)*")
_WORD = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_DIGIT = frozenset(b"0123456789")
_JOIN = frozenset(b"-.:")
_KIND = "reply"  # this module's frame: ("reply", in_call, trigger_matched, run)
# run: None (between runs); ("w", joiner) a run no id run begins with (joiner: it ends in one);
# ("p", text, digit) a run that begins some id run(s), digit: it holds one; ("e",) an id run just
# ended before a joiner ("D-26."), which a letter or digit may not follow


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
    """Free text whose id runs are id runs of ``source`` (see the module docstring), around the
    calls of ``inner`` (a ``tool_call_grammar(..., auto=True)``, whose calls open with ``call_open``)
    or alone (``inner`` None: text only)."""

    def __init__(self, source: str, inner: Grammar | None = None, call_open: str = ""):
        if inner is not None and not call_open:
            raise ValueError("a wrapped tool-call grammar needs the text that opens a call (call_open)")
        self.inner = inner
        self.trigger = call_open.encode()
        self.allowed_runs = tuple(sorted({r.encode() for r in id_runs(source)}))
        self._run_set = frozenset(self.allowed_runs)
        base = inner.start_state if inner is not None else ((), 0)
        self.start_state = (((_KIND, False, 0, None), *base[0]), base[1])
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
        _, in_call, _, run = own
        if not in_call and not self._may_end(run):
            return False
        return self.inner.complete(inner) if self.inner is not None else True

    def forced(self, state, most: int = 64) -> bytes:
        """Inside an id run: the bytes every id run still possible goes on with, while none may
        end; in a call: the wrapped grammar's forced bytes; empty elsewhere."""
        own, inner = self._split(state)
        if own is None:
            return self.inner.forced(inner, most) if self.inner is not None else b""
        _, in_call, _, run = own
        if in_call:
            return self.inner.forced(inner, most)
        if run is None or run[0] != "p" or not run[2]:
            return b""
        text, out = run[1], bytearray()
        while len(out) < most and text not in self._run_set:
            nxt = {r[len(text)] for r in self._starting(text) if len(r) > len(text)}
            if len(nxt) != 1:
                break
            c = nxt.pop()
            out.append(c)
            text += bytes([c])
        return bytes(out)

    # -- the automaton --------------------------------------------------------------------------
    def _split(self, state):
        """(this module's frame or None, the wrapped grammar's state)."""
        stack, ws = state
        if stack and isinstance(stack[0], tuple) and stack[0][:1] == (_KIND,):
            return stack[0], (stack[1:], ws)
        return None, state

    def _step_reply(self, state, b: int):
        own, inner = self._split(state)
        if own is None:  # a part of a wrapped state (``closing``): the wrapped grammar's own step
            return self.inner.advance(inner, bytes([b])) if self.inner is not None else None
        _, in_call, matched, run = own
        if self.inner is not None:
            inner = self.inner.advance(inner, bytes([b]))
            if inner is None:
                return None
        if in_call:
            back = inner == self.inner.start_state  # the call grammar is in free text again
            return (((_KIND, not back, 0, None), *inner[0]), inner[1])
        run = self._run_step(run, b)
        if run is _REFUSED:
            return None
        if self.trigger:
            t = self.trigger
            matched = matched + 1 if t[matched] == b else int(t[0] == b)
            if matched == len(t):  # a call opens: its text is the call grammar's
                return (((_KIND, True, 0, None), *inner[0]), inner[1])
        return (((_KIND, False, matched, run), *inner[0]), inner[1])

    def _starting(self, text: bytes) -> tuple[bytes, ...]:
        """The source's id runs that begin with ``text``."""
        i = bisect_left(self.allowed_runs, text)
        j = i
        while j < len(self.allowed_runs) and self.allowed_runs[j].startswith(text):
            j += 1
        return self.allowed_runs[i:j]

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
