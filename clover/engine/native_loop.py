"""Blocks decoded whole by the back end: a model that offers ``denoise_blocks`` (the llama.cpp back
end, ``clover.backends.llamacpp.LlamaCppClover``) runs a block's passes, the greedy choice of each
open position's token, its policy's choice of positions to commit and the commit itself in one call,
and the engine sees the block only when it is final.

It covers the requests whose passes need nothing else: greedy, no grammar, no forced slots
(``allowed``), no penalties, ``logit_bias`` or bans (``ignore_eos``, ``min_tokens``), no
``logprobs``, under ``ar``, ``prefix`` (the default) or ``threshold``, the policies that at most
compare a confidence with the threshold. ``fixed`` ranks the block's confidences, which near 1
often agree to the last bit, where the library's float sums and torch's may round apart: it stays
in Python. A batch runs this way when every request in it is covered (and the model's
``native_loop`` is on); any other batch takes the engine's pass-by-pass loop
(``Engine._denoise``), which is the reference: the same requests give the same tokens and the
same ``StepEvent`` per pass (``tests/llamacpp/test_native_loop.py``), the events of a block's
passes all in the engine step that finishes it.
"""

from __future__ import annotations

import torch

from clover.engine.batch import Batch
from clover.engine.outputs import Event, StepEvent
from clover.engine.policies import AR, Prefix, Threshold
from clover.engine.request import Request

# the policies a back end's block loop restates, by exact class (a subclass may decide otherwise)
NATIVE_POLICIES = {AR: "ar", Prefix: "prefix", Threshold: "threshold"}


def native_policy(req: Request) -> str | None:
    """The name of the request's policy when a back end's block loop can decode it, else None."""
    p = req.params
    plain = (
        req.grammar is None
        and req.generator is None
        and req.counts is None
        and not req.banned
        and not p.min_tokens
        and p.logprobs is None
        and not req.allowed
    )
    return NATIVE_POLICIES.get(type(req.policy)) if plain else None


def runs_blocks(model, batch: Batch) -> bool:
    """The model decodes this batch's blocks itself: it offers the loop, has it on, and every
    request of the batch is one the loop covers."""
    return (
        getattr(model, "native_loop", False)
        and hasattr(model, "denoise_blocks")
        and all(native_policy(r) is not None for r in batch.requests)
    )


def denoise_blocks(runner, batch: Batch) -> list[Event]:
    """Every row's active block decoded to its end by the model (with the pending commits: the
    prompt's blocks of a fresh request alone, or each row's finished block, in its first pass);
    the batch is left as the pass-by-pass loop leaves it when the block is final, and each pass
    of each row is reported as that loop reports it (one ``StepEvent``)."""
    reqs = batch.requests
    first = reqs[0].prompt_blocks
    if first is not None:  # a request alone with its prompt not yet committed (Runner.prefill)
        if len(batch) != 1 or bool(batch.pending.any()):
            raise RuntimeError("internal: a deferred prompt commit in a batch that is not a fresh single row")
        reqs[0].prompt_blocks = None
        commits = [first[0]]
    else:
        pending = batch.pending.tolist()
        commits = [batch.to_commit[r] if p else None for r, p in enumerate(pending)]
    x, pass_of, passes = runner.model.denoise_blocks(
        batch.cache,
        commits,
        batch.x,
        batch.masked,
        batch.wanted,
        batch.stop_ids,
        [native_policy(r) for r in reqs],
        batch.threshold,
        batch.bs,
    )
    if first is not None:
        runner.remember(reqs[0], batch.cache)
    runner.forwards += max(passes, default=0)
    step0 = batch.step.tolist()
    batch.x = x.to(batch.x.device)
    batch.masked &= ~(pass_of >= 0).to(batch.masked.device)
    batch.step += torch.tensor(passes, dtype=batch.step.dtype, device=batch.step.device)
    batch.pending = torch.zeros_like(batch.pending)
    events: list[Event] = []
    for r, (req, n) in enumerate(zip(reqs, passes)):
        at, toks, when = pass_of[r].tolist(), x[r].tolist(), {}
        for i, p in enumerate(at):
            if p >= 0:
                when.setdefault(p, []).append(i)
        for p in range(n):
            pos = when.get(p, [])
            req.passes += 1
            events.append(
                StepEvent(
                    req.id, req.block_start, [req.block_start + i for i in pos], [toks[i] for i in pos], step0[r] + p
                )
            )
    return events
