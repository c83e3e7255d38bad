"""Who runs: a FIFO of waiting requests and one running batch per block size.

Requests join at block boundaries (after a prefill of their own) up to ``max_batch_size``
running in all, and leave as soon as they finish, which frees their cache rows at once.

Prefill is chunked (as vLLM's and SGLang's): each engine step commits at most ``prefill_chunk``
prompt tokens, in whole blocks, before the running batches' passes, so a long prompt arriving
is prefilled over several steps while the others go on decoding, instead of stalling them all
for one long step. Requests are prefilled in arrival order; the one whose prompt does not fit in
what is left of a step's budget gets a chunk of it and finishes in a later step (it holds its
slot meanwhile, and is not in a batch until its last chunk is done).
"""

from __future__ import annotations

import time
from collections import deque
from itertools import islice
from typing import TYPE_CHECKING

import torch

from clover.engine import PREFILL_CHUNK
from clover.engine.batch import Batch
from clover.engine.request import Request

if TYPE_CHECKING:
    from clover.engine.runner import Runner


class Scheduler:
    def __init__(
        self, max_batch_size: int, mask_id: int, device: torch.device, prefill_chunk: int | None = PREFILL_CHUNK
    ):
        if not isinstance(max_batch_size, int) or max_batch_size <= 0:
            raise ValueError(f"max_batch_size must be a positive integer, got {max_batch_size!r}")
        if prefill_chunk is not None and (type(prefill_chunk) is not int or prefill_chunk < 0):
            raise ValueError(f"prefill_chunk must be a whole number of tokens >= 0 (0: off), got {prefill_chunk!r}")
        self.max_batch_size = max_batch_size
        self.prefill_chunk = prefill_chunk or None
        self.mask_id, self.device = mask_id, device
        self.waiting: deque[Request] = deque()
        self.prefilling: Request | None = None  # taken from ``waiting``, its prompt part-way committed
        self.batches: dict[int, Batch] = {}

    @property
    def num_active(self) -> int:
        return sum(len(b) for b in self.batches.values())

    @property
    def num_waiting(self) -> int:
        """Requests not decoding yet: queued, or with their prompt still being prefilled."""
        return len(self.waiting) + (self.prefilling is not None)

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def admit(self, runner: Runner) -> None:
        """Prefill waiting requests, within this step's prompt-token budget, and move those whose
        prompt is done into the batches of their block size while there is room.

        ``runner.prefill(req, alone)`` finishes a request's prefill: ``alone`` when it starts a
        batch of its own (no other request runs or joins at its block size), so its prompt may
        ride along with its first denoise pass (``Runner.prefill``)."""
        joining: dict[int, list] = {}
        free = self.max_batch_size - self.num_active  # a request prefilling holds one of these
        left = self.prefill_chunk
        while free > 0 and (self.prefilling is not None or self.waiting):
            req = self.prefilling if self.prefilling is not None else self.waiting.popleft()
            self.prefilling = None
            bs = req.block_size
            if left is not None:
                need = runner.prefill_left(req)
                if left == self.prefill_chunk:  # nothing committed yet in this step: at least a block
                    left = max(left, bs)
                if need > left:  # a chunk now, the rest in later steps
                    if n := left // bs * bs:
                        runner.prefill_chunk(req, n)
                    self.prefilling = req
                    break
                left -= need
            free -= 1
            # alone: no one runs at its block size, or joins with it now (the next ``free`` waiting
            # may; a chunked one among them makes this cautious, never wrong)
            alone = not len(self.batches.get(bs, ())) and bs not in joining
            alone = alone and not any(r.block_size == bs for r in islice(self.waiting, free))
            cache, tail = runner.prefill(req, alone)  # now, so the next prompt finds this one's blocks
            req.t_start = time.perf_counter()
            joining.setdefault(bs, []).append((req, cache, tail))
        for bs, items in joining.items():
            batch = self.batches.setdefault(bs, Batch(bs, self.mask_id, self.device))
            batch.join(*(list(t) for t in zip(*items)))

    def running(self) -> list[Batch]:
        return [b for b in self.batches.values() if len(b)]

    def release_finished(self) -> None:
        for bs, batch in list(self.batches.items()):
            keep = [i for i, r in enumerate(batch.requests) if not r.finished]
            if not keep:
                del self.batches[bs]
            elif len(keep) < len(batch):
                batch.leave(keep)

    def remove(self, rid: str) -> Request | None:
        """Take a request out wherever it is (abort); its cache rows are freed now."""
        if self.prefilling is not None and self.prefilling.id == rid:
            req, self.prefilling = self.prefilling, None
            req.prefill_progress = None  # the part of its prompt committed so far
            return req
        for req in self.waiting:
            if req.id == rid:
                self.waiting.remove(req)
                return req
        for batch in self.batches.values():
            for i, req in enumerate(batch.requests):
                if req.id == rid:
                    batch.leave([j for j in range(len(batch)) if j != i])
                    return req
        return None
