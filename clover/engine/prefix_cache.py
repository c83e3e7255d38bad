"""Prefix caching across requests (vLLM's automatic prefix caching, at block granularity).

A prompt's complete blocks are committed into a ``ModelCache`` at prefill (docs/architecture.md, Rule 1).
With GDN layers the cache after those blocks is a recurrent state, not a list of per-token
entries, so it can only be reused whole, at the block boundary it was taken at. Each prefill
keeps the cache at its prompt's last block boundary here, keyed by the exact tokens before
that boundary (and the block size); a later prompt that starts with those tokens starts from
a copy of it and commits only its own remaining blocks. That is the agent loop's case: each
turn's prompt is the previous one plus the answer and the tool results. Entries are evicted
least recently used first, bounded by the bytes they hold (a large model's GDN states are tens of
megabytes per entry whatever the prompt's length).

Prompts that share a beginning and then differ (one system prompt and tool list, many users;
one decision context, several questions) are found too: the block boundaries of recent prompts
are remembered (hashes only), and a prompt whose longest such match is not cached yet is
prefilled in two steps, the shared blocks first, whose cache is then kept for the next prompt
that starts the same way (one model call more, once).
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from clover.model import ModelCache


def _keys(prompt: list[int], bs: int) -> list[int]:
    """One hash per block boundary: keys[k - 1] stands for ``prompt[: k * bs]`` (a chain, so each
    key covers the whole prefix, as vLLM's block hashes)."""
    out, h = [], hash(("clover-prefix", bs))
    for k in range(len(prompt) // bs):
        h = hash((h, tuple(prompt[k * bs : (k + 1) * bs])))
        out.append(h)
    return out


class PrefixCache:
    def __init__(self, max_bytes: int = 256 << 20, max_seen: int = 1 << 16):
        self.max_bytes, self.max_seen = max_bytes, max_seen
        self._entries: OrderedDict[int, tuple[tuple[int, ...], ModelCache, int]] = OrderedDict()
        self._bytes = 0
        self._seen: OrderedDict[int, None] = OrderedDict()  # block-boundary hashes of recent prompts
        self.hits = self.lookups = self.hit_tokens = 0

    def lookup(self, prompt: list[int], bs: int) -> tuple[int, ModelCache | None, int]:
        """The longest cached block-aligned prefix of ``prompt`` → (its length, a private copy of
        its cache or None, and where to keep a cache on the way: the end of the longest prefix an
        earlier prompt shared that is not cached yet, else 0)."""
        self.lookups += 1
        keys = _keys(prompt, bs)
        start, cache = 0, None
        for k in range(len(keys), 0, -1):
            hit = self._entries.get(keys[k - 1])
            if hit is not None and hit[0] == tuple(prompt[: k * bs]):  # a hash collision is a miss
                self._entries.move_to_end(keys[k - 1])
                self.hits += 1
                self.hit_tokens += k * bs
                start, cache = k * bs, _copy(hit[1])
                break
        split = next((k * bs for k in range(len(keys), start // bs, -1) if keys[k - 1] in self._seen), 0)
        for key in keys:
            self._seen[key] = None
            self._seen.move_to_end(key)
        while len(self._seen) > self.max_seen:
            self._seen.popitem(last=False)
        return start, cache, split if split < len(keys) * bs else 0

    def insert(self, prompt: list[int], bs: int, cache: ModelCache) -> None:
        """Keep (a copy of) ``cache``, which holds ``prompt``'s complete blocks, batch of one."""
        n = int(cache.lengths[0])
        if not n or n % bs:
            return
        key = _keys(prompt[:n], bs)[-1]
        if key in self._entries:
            self._entries.move_to_end(key)
            return
        size = _nbytes(cache)  # a batch of one: its copy holds as many bytes
        if size > self.max_bytes:
            return
        self._entries[key] = (tuple(prompt[:n]), _copy(cache), size)
        self._bytes += size
        while self._bytes > self.max_bytes:
            self._bytes -= self._entries.popitem(last=False)[1][2]

    def __len__(self) -> int:
        return len(self._entries)

    def stats(self) -> dict:
        return {
            "prefix_cache_lookups": self.lookups,
            "prefix_cache_hits": self.hits,
            "prefix_cache_hit_tokens": self.hit_tokens,
            "prefix_cache_entries": len(self._entries),
            "prefix_cache_bytes": self._bytes,
        }


def _nbytes(cache: ModelCache) -> int:
    if not isinstance(cache, ModelCache):  # a native back end's cache counts its own bytes
        return cache.nbytes()
    ts = [t for layer in cache.layers for t in vars(layer).values()] + [cache.last_logits]
    return sum(t.numel() * t.element_size() for t in ts if t is not None)


def _copy(cache: ModelCache) -> ModelCache:
    return cache.select(torch.zeros(1, dtype=torch.long, device=cache.lengths.device))
