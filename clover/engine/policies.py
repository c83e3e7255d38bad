"""Unmasking policies: which positions of the active block to commit in a denoise pass.

A policy sees one pass of the rows that use it (a ``PassView``, tensors ``[R, bs]``) and
returns the positions to commit and, optionally, committed positions to re-predict (edit). A
row decoded under a grammar commits left to right instead; ``extends`` says which positions are
sure enough, by the policy's own rule, to join the leftmost open one in the same pass. Every
decision is made per row from that row's own numbers, so a request decodes the same whatever else
is in the batch. Add a policy by subclassing ``Policy`` and ``register``-ing it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# The default policy and its threshold: the one definition that SamplingParams, clover.LLM, the
# server, every command, the benchmarks and the playground take theirs from. "prefix" commits left
# to right, so no token is ever chosen while a position to its left is still open, and no stop
# token ends a reply with a gap before it; at τ 0.97 its answers matched ar's on every kind of
# validation turn, and on the small talk a newcomer types first (docs/benchmarks.md, "Choosing a
# policy").
DEFAULT_POLICY = "prefix"
DEFAULT_THRESHOLD = 0.97

EDIT_MARGIN = 0.5  # "edit": replace a committed token only if p(new) - p(current) >= this


@dataclass
class PassView:
    tok: torch.Tensor  # [R, bs] chosen token per position
    conf: torch.Tensor  # [R, bs] its probability (the confidence) where computed, else -1
    cur_p: torch.Tensor  # [R, bs] probability of the token now in the block (edit rows), else 0
    x: torch.Tensor  # [R, bs] the block's tokens now (mask id where masked)
    cand: torch.Tensor  # [R, bs] bool: masked positions that still need a token
    settled: torch.Tensor  # [R, bs] bool: generated positions committed in earlier passes
    threshold: torch.Tensor  # [R] float
    steps_left: torch.Tensor  # [R] long, >= 1: passes left in the block for "fixed"
    edits_left: torch.Tensor  # [R] long
    stop_ids: torch.Tensor  # [R, S] long: each row's stop tokens, -1 padded

    @property
    def stop(self) -> torch.Tensor:
        """``[R, bs]`` bool: the chosen token is one of the row's stop tokens (computed when a
        policy asks, so passes of policies that never do pay nothing for it)."""
        return is_stop(self.tok, self.stop_ids)


def is_stop(tok: torch.Tensor, stop_ids: torch.Tensor) -> torch.Tensor:
    """``tok [R, bs]``, ``stop_ids [R, S]`` (-1 padded) → ``[R, bs]`` bool: a stop token of its row."""
    return (tok[:, :, None] == stop_ids[:, None, :]).any(-1)


def first_open(v: PassView) -> torch.Tensor:
    """``[R, bs]`` bool: the leftmost open position of each row."""
    return v.cand & (v.cand.long().cumsum(1) == 1)


def run_from_first(v: PassView, ok: torch.Tensor) -> torch.Tensor:
    """``[R, bs]`` bool: the leftmost open position, then each next open one while ``ok``. A run
    passes over positions already set (those left of the first open one, and forced slots placed
    before the pass) and stops at the first open position that is not ``ok``."""
    return (first_open(v) | ok | ~v.cand).long().cumprod(1).bool() & v.cand


def most_confident(score: torch.Tensor, where: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``[R, bs]`` bool: the ``k[r]`` highest-``score`` positions among ``where`` (ties: leftmost)."""
    s = score.masked_fill(~where, -float("inf"))
    rank = s.argsort(dim=1, descending=True, stable=True).argsort(dim=1)
    return where & (rank < k[:, None])


class Policy:
    name = ""
    edits = False  # re-predicts committed positions (their probabilities are then computed)
    reads_threshold = True  # its choices depend on SamplingParams.threshold

    def commit(self, v: PassView) -> torch.Tensor:
        raise NotImplementedError

    def edit(self, v: PassView) -> torch.Tensor | None:
        return None

    def extends(self, v: PassView) -> torch.Tensor:
        """``[R, bs]`` bool: positions sure enough to extend a constrained row's left-to-right run
        past its leftmost open position (the engine's grammar commit): p(chosen) >= τ."""
        return v.conf >= v.threshold[:, None]


class Threshold(Policy):
    """Commit every position with p(chosen) >= τ; at least the most confident one (Fast-dLLM)."""

    name = "threshold"

    def commit(self, v: PassView) -> torch.Tensor:
        sure = v.cand & (v.conf >= v.threshold[:, None])
        alone = v.cand.any(1) & ~sure.any(1)  # nothing sure: take the most confident (leftmost on ties)
        best = v.conf.masked_fill(~v.cand, -float("inf")).argmax(1)
        pos = torch.arange(v.cand.shape[1], device=v.cand.device)
        return sure | (alone[:, None] & (pos == best[:, None]))


class Fixed(Policy):
    """A fixed number of passes per block: the ceil(remaining / passes left) most confident."""

    name = "fixed"
    reads_threshold = False

    def commit(self, v: PassView) -> torch.Tensor:
        remaining = v.cand.sum(1)
        k = (remaining + v.steps_left - 1) // v.steps_left
        return most_confident(v.conf, v.cand, k)


class AR(Policy):
    """One token per pass, left to right: the autoregressive baseline on the same model and caches."""

    name = "ar"
    reads_threshold = False

    def commit(self, v: PassView) -> torch.Tensor:
        return v.cand & (v.cand.cumsum(1) == 1)

    def extends(self, v: PassView) -> torch.Tensor:
        return torch.zeros_like(v.cand)  # one position per pass, constrained or not


class Prefix(Policy):
    """Left to right in runs: the leftmost open position, then each next one while p(chosen) >= τ
    (a run stops at the first unsure position). Parallel where the model is sure of a whole
    stretch, autoregressive where it is not; never commits a token whose left neighbour is
    still open (what makes threshold write "porto porto": two positions guessing one word)."""

    name = "prefix"

    def commit(self, v: PassView) -> torch.Tensor:
        return run_from_first(v, v.cand & (v.conf >= v.threshold[:, None]))


class Edit(Threshold):
    """Threshold, plus re-predicting committed positions of the active block when another token
    is now far more likely (LLaDA 2.1-style editing), at most ``max_edits`` per block."""

    name = "edit"
    edits = True

    def edit(self, v: PassView) -> torch.Tensor:
        gain = v.conf - v.cur_p
        want = v.settled & (v.tok != v.x) & (v.conf >= v.threshold[:, None]) & (gain >= EDIT_MARGIN)
        return most_confident(gain, want, v.edits_left)


POLICIES: dict[str, Policy] = {}


def register(policy: Policy) -> Policy:
    POLICIES[policy.name] = policy
    return policy


for _p in (Threshold(), Fixed(), AR(), Edit(), Prefix()):
    register(_p)
