"""A batch: the running requests that share a block size, one cache row each.

Their active blocks live here as ``[R, bs]`` tensors, so a denoise pass costs a few tensor
ops for the whole batch, not Python per request. Rows join and leave only at block
boundaries (continuous batching at block granularity).
"""

from __future__ import annotations

import torch

from clover.engine.outputs import TokenLogprob
from clover.engine.params import MAX_TOP_LOGPROBS
from clover.engine.policies import Policy, is_stop
from clover.engine.request import Request
from clover.engine.sampler import Choice
from clover.model import ModelCache

# per-row tensors, kept in the order of ``requests`` (and of the cache rows)
ROW_TENSORS = (
    "x",
    "masked",
    "placed",
    "wanted",
    "need",
    "to_commit",
    "pending",
    "step",
    "edits",
    "lp",
    "top_ids",
    "top_lp",
)
ROW_SETTINGS = ("threshold", "steps", "max_edits", "stop_ids")


class Batch:
    def __init__(self, block_size: int, mask_id: int, device: torch.device):
        self.bs, self.mask_id, self.device = block_size, mask_id, device
        self.requests: list[Request] = []
        self.cache: ModelCache | None = None
        z = lambda dtype: torch.zeros(0, block_size, dtype=dtype, device=device)
        self.x = z(torch.long)  # the active blocks: clean prompt tail, committed tokens, mask ids
        self.masked = z(torch.bool)  # positions still masked
        self.placed = z(torch.bool)  # forced slots set before the block's first pass (reported with it)
        self.wanted = z(torch.bool)  # generated positions the request needs (before max_tokens)
        self.need = z(torch.bool)  # wanted and not after a committed EOS (see refresh_need)
        self.to_commit = z(torch.long)  # a finished block waiting to be committed with the next pass
        # log-probabilities of the block's tokens when they were chosen (for ``logprobs``)
        self.lp = z(torch.float)
        self.top_ids = torch.zeros(0, block_size, MAX_TOP_LOGPROBS, dtype=torch.long, device=device)
        self.top_lp = torch.zeros(0, block_size, MAX_TOP_LOGPROBS, dtype=torch.float, device=device)
        self.top = 0  # alternatives per token the rows ask for (the most of any row)
        r = lambda dtype: torch.zeros(0, dtype=dtype, device=device)
        self.pending = r(torch.bool)  # row has a block in to_commit
        self.step = r(torch.long)  # denoise passes so far in the active block
        self.edits = r(torch.long)  # edits so far in the active block
        self.threshold = r(torch.float)
        self.steps = r(torch.long)  # "fixed": passes per block
        self.max_edits = r(torch.long)
        self.stop_ids = torch.full((0, 1), -1, dtype=torch.long, device=device)  # [R, S], -1 padded
        self.allowed: list[dict[int, torch.Tensor]] = []  # per row: constrained slots of the active block
        self.policies: list[tuple[Policy, torch.Tensor]] = []  # each policy in use and its rows [R, 1]
        self.editing = r(torch.bool)  # rows whose policy edits

    def __len__(self) -> int:
        return len(self.requests)

    # -- joining and leaving ---------------------------------------------------------------
    def join(self, reqs: list[Request], caches: list[ModelCache], tails: list[torch.Tensor]) -> None:
        """Add freshly prefilled requests; their first block holds the prompt tail, then masks."""
        parts = ([self.cache] if self.cache is not None else []) + caches
        self.cache = type(parts[0]).cat(parts)  # the cache's own kind: ModelCache, or a native back end's
        n = len(reqs)
        x = torch.full((n, self.bs), self.mask_id, dtype=torch.long, device=self.device)
        for i, t in enumerate(tails):
            x[i, : t.shape[-1]] = t.reshape(-1)
        wanted = self._wanted(reqs)
        new = {
            "x": x,
            "masked": self._positions(reqs) >= self._vec([r.gen_lo for r in reqs])[:, None],
            "placed": torch.zeros_like(x, dtype=torch.bool),
            "wanted": wanted,
            "need": wanted,
            "to_commit": torch.zeros_like(x),
            "pending": torch.zeros(n, dtype=torch.bool, device=self.device),
            "step": torch.zeros(n, dtype=torch.long, device=self.device),
            "edits": torch.zeros(n, dtype=torch.long, device=self.device),
            "lp": torch.zeros(n, self.bs, device=self.device),
            "top_ids": torch.zeros(n, self.bs, MAX_TOP_LOGPROBS, dtype=torch.long, device=self.device),
            "top_lp": torch.full((n, self.bs, MAX_TOP_LOGPROBS), -float("inf"), device=self.device),
            "threshold": self._vec([r.params.threshold for r in reqs], torch.float),
            "steps": self._vec([r.steps_per_block for r in reqs]),
            "max_edits": self._vec([r.params.max_edits for r in reqs]),
        }
        width = max([self.stop_ids.shape[1]] + [len(r.stop_ids) for r in reqs])
        new["stop_ids"] = self._vec([r.stop_ids + [-1] * (width - len(r.stop_ids)) for r in reqs]).view(n, width)
        self.stop_ids = torch.nn.functional.pad(self.stop_ids, (0, width - self.stop_ids.shape[1]), value=-1)
        for name, t in new.items():
            setattr(self, name, torch.cat([getattr(self, name), t]))
        self.requests += reqs
        self.allowed += [r.block_allowed() for r in reqs]
        self._members_changed()
        self.place_forced(range(len(self) - n, len(self)))

    def leave(self, keep: list[int]) -> None:
        """Keep only rows ``keep``; the others' cache rows are freed now."""
        idx = torch.tensor(keep, dtype=torch.long, device=self.device)
        self.requests = [self.requests[i] for i in keep]
        self.allowed = [self.allowed[i] for i in keep]
        # a cache that can hand over its rows without copying them (a native back end's) does:
        # the batch drops the old object at once; a ModelCache's rows are gathered by select
        take = getattr(self.cache, "keep", None) or self.cache.select
        self.cache = take(idx) if keep else None
        for name in ROW_TENSORS + ROW_SETTINGS:
            setattr(self, name, getattr(self, name)[idx])
        self._members_changed()

    def next_block(self, rows: list[int]) -> None:
        """Rows whose block is final and who go on: queue the block for commit, start a fresh one."""
        idx = torch.tensor(rows, dtype=torch.long, device=self.device)
        reqs = [self.requests[i] for i in rows]
        self.to_commit[idx] = self.x[idx]
        self.pending[idx] = True
        self.x[idx] = self.mask_id
        self.masked[idx] = True
        self.wanted[idx] = self.need[idx] = self._wanted(reqs)
        self.step[idx] = 0
        self.edits[idx] = 0
        for i, r in zip(rows, reqs):
            self.allowed[i] = r.block_allowed()
        self.place_forced(rows)

    def place_forced(self, rows) -> None:
        """Constrained slots with one allowed token are known before any pass: set them in the
        fresh block at once, so the model reads them from the first pass on (the layout around
        the open slots) and no pass is spent on them. Log-probability 0: the only choice."""
        for r in rows:
            for i, ids in self.allowed[r].items():
                if len(ids) == 1 and self.wanted[r, i] and self.masked[r, i]:
                    self.x[r, i], self.masked[r, i], self.placed[r, i] = ids[0], False, True
                    self.lp[r, i] = 0.0
                    self.top_ids[r, i, 0], self.top_lp[r, i] = ids[0], -float("inf")
                    self.top_lp[r, i, 0] = 0.0

    # -- a pass ----------------------------------------------------------------------------
    def apply(self, choice: Choice, commit: torch.Tensor, edit: torch.Tensor) -> torch.Tensor:
        """Write the chosen tokens at committed and edited positions; returns what changed ``[R, bs]``."""
        changed = commit | edit
        self.x = torch.where(changed, choice.tok, self.x)
        self.lp = torch.where(changed, choice.logp, self.lp)
        if choice.top_ids is not None:
            k = choice.top_ids.shape[-1]
            self.top_ids[..., :k] = torch.where(changed[..., None], choice.top_ids, self.top_ids[..., :k])
            self.top_lp[..., :k] = torch.where(changed[..., None], choice.top_lp, self.top_lp[..., :k])
        self.masked &= ~commit
        if self.editing.any():
            self.edits += edit.sum(1)
        self.step += 1
        changed |= self.placed  # forced slots placed before this pass are reported with it
        self.placed = torch.zeros_like(self.placed)
        return changed

    def refresh_need(self) -> None:
        """Positions whose token the request will keep: wanted, and not after an EOS already
        committed in the block (those are dropped, so never worth a pass)."""
        eos = ~self.masked & self.wanted & is_stop(self.x, self.stop_ids)
        self.need = self.wanted & ((eos.cumsum(1) - eos.long()) == 0)

    def _members_changed(self) -> None:
        kinds = []  # each policy once (policies compare by identity)
        for r in self.requests:
            if not any(r.policy is p for p in kinds):
                kinds.append(r.policy)
        self.policies = [(p, self._vec([r.policy is p for r in self.requests], torch.bool)[:, None]) for p in kinds]
        self.editing = self._vec([r.policy.edits for r in self.requests], torch.bool)
        self.top = max([r.params.logprobs or 0 for r in self.requests], default=0)

    def logprobs(self, r: int, need: list[bool], k: int) -> list[TokenLogprob]:
        """Row ``r``'s needed positions: each token's log-probability and its ``k`` alternatives."""
        keep = torch.tensor(need, device=self.device)
        x, lp = self.x[r][keep].tolist(), self.lp[r][keep].tolist()
        ids, tlp = self.top_ids[r][keep, :k].tolist(), self.top_lp[r][keep, :k].tolist()
        return [
            TokenLogprob(t, p, [(i, q) for i, q in zip(a, b) if q > -float("inf")])
            for t, p, a, b in zip(x, lp, ids, tlp)
        ]

    def _wanted(self, reqs: list[Request]) -> torch.Tensor:
        i = self._positions(reqs)
        lo = self._vec([r.gen_lo for r in reqs])[:, None]
        hi = self._vec([r.limit() for r in reqs])[:, None]
        return (i >= lo) & (i < hi)

    def _positions(self, reqs: list[Request]) -> torch.Tensor:
        return torch.arange(self.bs, device=self.device).expand(len(reqs), self.bs)

    def _vec(self, values, dtype=torch.long) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype, device=self.device)
