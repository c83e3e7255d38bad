"""Who runs: a FIFO of waiting requests and one running batch per block size.

Requests join at block boundaries (after a prefill of their own) up to ``max_batch_size``
running in all, and leave as soon as they finish, which frees their cache rows at once.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import torch

from clover.engine.batch import Batch
from clover.engine.request import Request
from clover.model import ModelCache


class Scheduler:
    def __init__(self, max_batch_size: int, mask_id: int, device: torch.device):
        if not isinstance(max_batch_size, int) or max_batch_size <= 0:
            raise ValueError(f"max_batch_size must be a positive integer, got {max_batch_size!r}")
        self.max_batch_size = max_batch_size
        self.mask_id, self.device = mask_id, device
        self.waiting: deque[Request] = deque()
        self.batches: dict[int, Batch] = {}

    @property
    def num_active(self) -> int:
        return sum(len(b) for b in self.batches.values())

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def admit(self, prefill: Callable[[Request, bool], tuple[ModelCache, torch.Tensor]]) -> None:
        """Move waiting requests into the batches of their block size while there is room.

        ``prefill(req, alone)``: ``alone`` when the request starts a batch of its own (no other
        request runs or joins at its block size), so its prompt may ride along with its first
        denoise pass (``Runner.prefill``)."""
        joining: dict[int, list] = {}
        free = self.max_batch_size - self.num_active
        while self.waiting and free > 0:
            req = self.waiting.popleft()
            joining.setdefault(req.block_size, []).append(req)
            free -= 1
        for bs, reqs in joining.items():
            alone = len(reqs) == 1 and not len(self.batches.get(bs, ()))
            items = []
            for req in reqs:
                cache, tail = prefill(req, alone)
                req.t_start = time.perf_counter()
                items.append((req, cache, tail))
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
