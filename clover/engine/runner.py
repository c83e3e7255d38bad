"""Model calls: prefill one request (from the prefix cache's longest match, when there is
one; a long prompt in chunks over several engine steps), and one forward pass of a batch.

A pass commits the blocks that finished in the previous pass and denoises every active
block. When every row has a block to commit, both happen in one forward (the fused commit +
first denoise pass of the next block). The model commits the same number of tokens for
every row of a call, so when only some rows finished, those rows are committed on their own
(gathered, committed, written back) and then the whole batch denoises together.

With ``graphs`` (``clover.engine.graphs``), the denoise pass and the fused commit + denoise pass
are replayed as captured CUDA graphs where they can be; a prompt's commit and a commit of some
rows only stay eager.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from clover.engine.batch import Batch
from clover.engine.graphs import DecodeGraphs
from clover.engine.prefix_cache import PrefixCache
from clover.engine.request import Request
from clover.engine.scoring import model_place, prompt_logprobs
from clover.model import CloverForBlockDiffusion, ModelCache
from clover.model.cache import AttnCache


@dataclass
class PromptCommit:
    """How far a request's prompt is committed: ``cache`` holds its first ``done`` tokens (whole
    blocks; None: nothing yet), ``full`` is where its whole blocks end, and ``split`` where a cache
    goes to the prefix cache on the way (the end of a beginning other prompts share; 0: nowhere)."""

    cache: ModelCache | None
    done: int
    full: int
    split: int

    @property
    def left(self) -> int:
        """Prompt tokens in whole blocks still to commit."""
        return self.full - self.done


class Runner:
    def __init__(
        self,
        model: CloverForBlockDiffusion,
        fuse: bool = True,
        prefix_cache: PrefixCache | None = None,
        graphs: DecodeGraphs | None = None,
    ):
        self.model = model
        self.fuse = fuse
        self.prefix_cache = prefix_cache
        self.graphs = graphs  # decoding passes as CUDA graphs (None: every pass eager)
        self.device, self.dtype = model_place(model)
        self.forwards = 0  # model calls, prefill excluded

    def prefill_left(self, req: Request) -> int:
        """Prompt tokens (whole blocks) the request still has to commit; the first call looks its
        prompt up in the prefix cache, so the count starts after the longest cached match."""
        return self._progress(req).left

    def prefill_chunk(self, req: Request, n: int) -> None:
        """Commit the prompt's next ``n`` tokens (whole blocks, fewer than ``prefill_left``) into
        the request's own cache: a long prompt is prefilled over several engine steps (chunked
        prefill), and ``prefill`` finishes it. Each piece continues the cache from a block
        boundary, as one commit of the whole prompt would go block by block, so the decode after
        it is the same (``tests/engine/test_chunked_prefill.py``)."""
        p = self._progress(req)
        if n <= 0 or n % req.block_size or n >= p.left:
            raise ValueError(f"internal: a prefill chunk of {n} tokens with {p.left} left (block {req.block_size})")
        self._commit(req, p, p.done + n)

    def prefill(self, req: Request, alone: bool = False) -> tuple[ModelCache, torch.Tensor]:
        """Commit the rest of the prompt's complete blocks (batch of one); the tail goes to the first block.

        ``alone`` (the request starts a batch of its own) and fusing: nothing is run now; the
        complete blocks wait in ``req.prompt_blocks`` and are committed by the first ``forward``,
        in the same model call as the first denoise pass (one call fewer per request)."""
        self.score(req)
        p = self._progress(req)
        req.prefill_progress = None
        if p.done < p.split:  # a beginning other prompts share: commit it first and keep its cache
            self._commit(req, p, p.split)
        cache, full = p.cache, p.full
        if self.fuse and alone and full > p.done:
            req.prompt_blocks = self._tokens(req, p.done, full)
            cache, tail = cache or self.model.new_cache(1), self._tokens(req, full, len(req.prompt))
        else:
            cache, tail = self.model.prefill(self._tokens(req, p.done, len(req.prompt)), req.block_size, cache=cache)
            self._remember(req, cache)
        if self.model.config.shift_logits and cache.last_logits is None:
            # nothing committed yet: block 0's row-0 logit is never used (token 0 is the prompt's),
            # but the row needs one so that ModelCache.cat keeps the other rows' logits
            cache.last_logits = torch.zeros(1, self.model.config.vocab_size, device=self.device, dtype=self.dtype)
        return cache, tail

    def _progress(self, req: Request) -> PromptCommit:
        if req.prefill_progress is None:
            bs = req.block_size
            full = len(req.prompt) // bs * bs
            start, cache, split = 0, None, 0
            if self.prefix_cache is not None and full:
                start, cache, split = self.prefix_cache.lookup(req.prompt[:full], bs)
            req.prefill_progress = PromptCommit(cache, start, full, split)
        return req.prefill_progress

    def _commit(self, req: Request, p: PromptCommit, end: int) -> None:
        """Commit the prompt's tokens ``p.done .. end`` (whole blocks) into ``p.cache``, keeping
        the cache at ``p.split`` for the prefix cache when the commit passes it."""
        for stop in ([p.split] if p.done < p.split < end else []) + [end]:
            p.cache = self.model.prefill(self._tokens(req, p.done, stop), req.block_size, cache=p.cache)[0]
            p.done = stop
            if stop == p.split:
                self._remember(req, p.cache)

    def _tokens(self, req: Request, a: int, b: int) -> torch.Tensor:
        return torch.tensor([req.prompt[a:b]], dtype=torch.long, device=self.device)

    def _remember(self, req: Request, cache: ModelCache) -> None:
        """A fresh request's cache (its prompt's complete blocks) goes to the prefix cache."""
        if self.prefix_cache is not None:  # (it keeps nothing for a cache without a whole block)
            self.prefix_cache.insert(req.prompt, req.block_size, cache)

    def remember(self, req: Request, cache) -> None:
        """``_remember`` for a back end that commits a fresh request's prompt blocks itself, in its
        first pass (``clover.engine.native_loop``)."""
        self._remember(req, cache)

    def score(self, req: Request) -> None:
        """The prompt's own log-probabilities, when the request asks (``clover.engine.scoring``)."""
        k = req.params.prompt_logprobs
        if k is not None and req.prompt_logprobs is None:
            req.prompt_logprobs = prompt_logprobs(self.model, req.prompt, req.block_size, k)

    def forward(self, batch: Batch) -> torch.Tensor:
        """One pass over ``batch``: commit pending blocks, denoise the active ones → logits ``[R, bs, V]``."""
        step, bs, cache = self.model.step, batch.bs, batch.cache
        pending = batch.pending
        first = batch.requests[0].prompt_blocks
        if first is not None:  # a request alone with its prompt not yet committed (see prefill)
            if len(batch) != 1 or bool(pending.any()):
                raise RuntimeError("internal: a deferred prompt commit in a batch that is not a fresh single row")
            batch.requests[0].prompt_blocks = None
            self.forwards += 1
            logits = step(cache, commit=first, denoise=batch.x, block_size=bs)
            self._remember(batch.requests[0], cache)
            return logits
        if not bool(pending.any()):
            logits = self._pass(batch)
        elif self.fuse and bool(pending.all()):
            logits = self._pass(batch, batch.to_commit)
        else:
            rows = pending.nonzero()[:, 0]
            if len(rows) == len(batch):
                step(cache, commit=batch.to_commit, block_size=bs)
            else:
                self._commit_rows(batch, rows)
            for i in rows.tolist():
                batch.requests[i].commit_passes += 1
            self.forwards += 1
            logits = self._pass(batch)
        batch.pending = torch.zeros_like(pending)
        self.forwards += 1
        return logits

    def _pass(self, batch: Batch, commit: torch.Tensor | None = None) -> torch.Tensor:
        """Denoise the batch's blocks after committing ``commit`` (every row's, or None): replayed
        as a CUDA graph when ``graphs`` takes the pass, else ``model.step``."""
        if self.graphs is not None:
            logits = self.graphs.run(batch.cache, batch.x, commit, batch.bs)
            if logits is not None:
                return logits
        return self.model.step(batch.cache, commit=commit, denoise=batch.x, block_size=batch.bs)

    def _commit_rows(self, batch: Batch, rows: torch.Tensor) -> None:
        """Commit ``batch.to_commit`` of some rows only. A native back end's cache does it itself
        (``commit_rows``); a ``ModelCache``'s rows are gathered, committed and written back."""
        cache = batch.cache
        if not isinstance(cache, ModelCache):
            cache.commit_rows(self.model, rows, batch.to_commit[rows], batch.bs)
            return
        sub = cache.select(rows)
        old = sub.lengths.clone()
        self.model.step(sub, commit=batch.to_commit[rows], block_size=batch.bs)
        pos = old[:, None] + torch.arange(batch.bs, device=self.device)  # [n, bs] the new block
        sub_rows = torch.arange(len(rows), device=self.device)[:, None]
        for c, s in zip(cache.layers, sub.layers):
            if isinstance(c, AttnCache):
                c.reserve(int(pos.max()) + 1)  # the batch's cache may be shorter than the row's new block
                c.k[rows[:, None], pos] = s.k[sub_rows, pos]
                c.v[rows[:, None], pos] = s.v[sub_rows, pos]
            else:
                c.S[rows] = s.S
                c.tail[rows] = s.tail
        cache.lengths[rows] = sub.lengths
        if sub.last_logits is not None:
            cache.last_logits[rows] = sub.last_logits.to(cache.last_logits.dtype)
