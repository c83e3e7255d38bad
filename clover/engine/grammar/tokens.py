"""A grammar over a tokenizer's tokens: the token table, and which tokens may come next.

``TokenTable`` holds a tokenizer's tokens as bytes (built once per engine); ``TokenGrammar``
puts a ``Grammar`` over it: ``allowed(state)`` the ids that may come next (EOS ids only where the
text may end), ``step(state, id)`` the state after one, ``forced_token(state)`` the one token
allowed where the grammar forces the next bytes (a copy from the request's text under way).
The engine applies it to the leftmost open position of a block and may commit further
positions in the same pass when each one advances the state too (``Engine._grammar_commit``),
so constrained output still fills several tokens per pass.
"""

from __future__ import annotations

from functools import cached_property

import regex

from clover.engine.grammar.automaton import MARKUP_KINDS, Grammar
from clover.engine.grammar.budget import work_time
from clover.engine.grammar.lru import LRU

# per allowed-token set under a regular expression (a slow pattern cannot stall the engine), in
# this thread's CPU seconds less its garbage collections (``budget.work_time``), so neither a
# machine busy with other programs nor a full collection cuts a set short
ALLOWED_BUDGET_S = 1.0
_UNKNOWN = object()
_WORD_END = regex.compile(r"\p{L}+$")  # the tokenizer's pre-tokens: a run of letters is one word
_WORD_START = regex.compile(r"^\p{L}+")


class TokenTable:
    """A tokenizer's tokens as bytes, grouped by first byte; built once per engine. Control tokens
    (EOS, pad, mask, ...) have no bytes: they never spell text."""

    def __init__(self, tokenizer):
        self.encode = getattr(tokenizer, "encode", None)  # text -> ids: how a forced copy is spelled
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
        token that may come next: the token the tokenizer itself writes there (``spelled``), so a
        copy comes out in the tokens the model saw in training; where the tokenizer's spelling
        does not line up with the tokens already written, the longest token that spells a
        beginning of the forced bytes. Either way a copy has one spelling in tokens, whichever
        policy commits it and however many positions per pass. None elsewhere."""
        if not self.g.grounded:
            return None
        best = self._forced.get(state, _UNKNOWN)
        if best is _UNKNOWN:
            fb = self.g.forced(state)
            best = self.spelled(self.g.copied(state), fb) if fb else None
            if fb and best is None:
                best = self.longest(fb)
            self._forced[state] = best
        return best

    def longest(self, fb: bytes) -> int | None:
        """The longest token that spells a beginning of ``fb`` (no markup token)."""
        best = None
        for i in self.t.by_first.get(fb[0], ()):
            bs = self.t.bytes[i]
            if fb.startswith(bs) and i not in self.t.atomic and (best is None or len(bs) > len(self.t.bytes[best])):
                best = i
        return best

    def spelled(self, copied: bytes, fb: bytes) -> int | None:
        """The next token of the tokenizer's own encoding of the word the copy is in (its letters
        copied so far, then the forced ones), past the tokens that spell the letters copied so far;
        None where the forced bytes begin no letters, or the encoding has no token boundary where
        the copy stands."""
        if self.t.encode is None:
            return None
        head = _WORD_END.search(copied.decode("utf-8", "ignore"))
        tail = _WORD_START.match(fb.decode("utf-8", "ignore"))
        if tail is None:
            return None
        w0 = head.group().encode() if head else b""
        if not copied.endswith(w0):  # a letter cut in the middle of its bytes
            return None
        at = 0
        for i in self.t.encode((w0 + tail.group().encode()).decode()):
            bs = self.t.bytes[i] if 0 <= i < len(self.t.bytes) else None
            if bs is None:
                return None
            if at == len(w0):
                return i if fb.startswith(bs) and i not in self.t.atomic else None
            at += len(bs)
            if at > len(w0):
                return None
        return None

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
        if token in self.t.atomic and not (state.stack and state.stack[-1].kind in MARKUP_KINDS):
            return None
        if (f := self.forced_token(state)) is not None and token != f:
            return None
        return self.g.advance(state, bs)

    def allowed(self, state) -> list[int]:
        """Token ids that may come next (EOS ids where the text may end)."""
        key = (self.t, self.key, state)
        out = self.g.allowed_cache.get(key)
        if out is None:
            out = self.compute(state)
            self.g.allowed_cache[key] = out
        return out

    def compute(self, state) -> list[int]:
        """``allowed`` worked out afresh, without its cache."""
        out = list(self.eos) if self.g.complete(state) else []
        deadline = work_time() + ALLOWED_BUDGET_S
        for first, ids in self.t.by_first.items():
            if self.g.timed and work_time() > deadline:
                break  # a regular expression that backtracks this long: the tokens found so far (all valid)
            if self.g.advance(state, bytes([first])) is not None:
                out += [i for i in ids if i not in self.eos and self.step(state, i) is not None]
        return out
