"""Final text of one request, block by block: EOS cut, stop strings, incremental detokenisation.

Only finished blocks come here, so whatever this returns is final. Two things are held back
until the next block decides them: a trailing partial UTF-8 character (``\\ufffd``) and a
suffix that could be the start of a stop string.
"""

from __future__ import annotations


def tokenizer_eos_ids(tokenizer) -> list[int]:
    """EOS ids a tokenizer declares, whatever it calls them (none if it has no tokenizer)."""
    if tokenizer is None:
        return []
    for name in ("eos_ids", "eos_token_ids", "eos_token_id", "eos_id"):
        v = getattr(tokenizer, name, None)
        if v is not None:
            return [v] if isinstance(v, int) else [int(t) for t in v]
    return []


class TextStream:
    def __init__(self, tokenizer, stop: list[str], stop_ids: set[int], max_tokens: int):
        self.tokenizer = tokenizer
        self.stop = list(stop)
        self.stop_ids = stop_ids
        self.max_tokens = max_tokens
        self.tokens: list[int] = []
        self.text = ""  # final text emitted so far
        self.finish_reason: str | None = "length" if max_tokens == 0 else None
        self.stop_reason: int | str | None = None  # the stop token id or stop string that ended the text

    def add(self, ids: list[int]) -> tuple[list[int], str]:
        """Append a finished block's generated tokens; return the newly final (token ids, text)."""
        for j, t in enumerate(ids):
            if t in self.stop_ids:  # EOS: drop it and everything after it
                ids, self.finish_reason, self.stop_reason = ids[:j], "stop", t
                break
        ids = ids[: self.max_tokens - len(self.tokens)]
        start = len(self.tokens)
        self.tokens += ids
        if self.finish_reason is None and len(self.tokens) >= self.max_tokens:
            self.finish_reason = "length"
        if self.tokenizer is None:
            return ids, ""
        full = self.tokenizer.decode(self.tokens)
        hit = self._find_stop(full)
        if hit is not None:
            idx, s = hit
            self.tokens = self.tokens[: self._tokens_through(start, idx + len(s))]
            full, self.finish_reason, self.stop_reason = full[:idx], "stop", s
        end = len(full) if self.finish_reason else len(full) - self._held_back(full)
        delta = full[len(self.text) : end] if end > len(self.text) else ""
        self.text += delta
        return self.tokens[start:], delta

    def _find_stop(self, full: str) -> tuple[int, str] | None:
        if not self.stop:
            return None
        lo = max(0, len(self.text) - max(map(len, self.stop)) + 1)
        hits = [(i, s) for s in self.stop if (i := full.find(s, lo)) >= 0]
        return min(hits) if hits else None

    def _tokens_through(self, start: int, n_chars: int) -> int:
        """Fewest tokens whose text reaches ``n_chars`` characters (the one completing a stop string)."""
        for j in range(start + 1, len(self.tokens) + 1):
            if len(self.tokenizer.decode(self.tokens[:j])) >= n_chars:
                return j
        return len(self.tokens)

    def _held_back(self, full: str) -> int:
        """Characters at the end of ``full`` that the next block may still change."""
        hold = 0
        while hold < len(full) and full[len(full) - 1 - hold] == "\ufffd":
            hold += 1
        body = full[: len(full) - hold]
        for s in self.stop:
            for k in range(min(len(s) - 1, len(body)), 0, -1):
                if body.endswith(s[:k]):
                    hold = max(hold, len(full) - len(body) + k)
                    break
        return hold
