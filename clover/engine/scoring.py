"""Prompt log-probabilities: how likely the model finds each token of a given text.

A block-diffusion model has no single next-token distribution; Clover scores a text in the
order its ``ar`` policy decodes it: token ``i`` (in block ``b``, at offset ``j``) is predicted
with the blocks before ``b`` committed, the tokens of block ``b`` before ``j`` given, and
positions ``j..`` of the block masked. The sum over the tokens is an exact log-likelihood
(the chain rule in that order), comparable across prompts and what scoring tools expect from
``echo`` + ``logprobs`` (``lm-evaluation-harness``' ``loglikelihood``, perplexity).

One model call covers many positions at once: the training forward
(``CloverForBlockDiffusion.forward_blocks``) takes the prompt as the clean stream and, per
scored position, its block with that position and the rest masked as a noisy block, reading
the logits of the scored position only. Probabilities are over the tokens a decode can choose
(the mask token left out, as the sampler leaves it out). ``prompt_logprobs_reference`` computes the same
numbers through the engine's incremental path, one position per call (the slow reference
the tests compare with).
"""

from __future__ import annotations

import torch

from clover.engine.outputs import TokenLogprob

MAX_NOISY_TOKENS = 8192  # noisy-stream tokens per model call: long prompts are scored in chunks


def _entries(logits: torch.Tensor, targets: torch.Tensor, top: int, mask_id: int) -> list[TokenLogprob]:
    """Log-probabilities over the tokens a decode may choose: the mask token is never one (as in
    ``clover.engine.sampler.choose``), so a prompt scores as the ``ar`` decode would report it."""
    lg = logits.to(torch.promote_types(logits.dtype, torch.float32))
    lg[:, mask_id] = -float("inf")
    lp = torch.log_softmax(lg, -1)
    chosen = lp.gather(1, targets[:, None])[:, 0].tolist()
    if top:
        v, i = lp.topk(min(top, lp.shape[-1]), -1)
        tops = [list(zip(a, b)) for a, b in zip(i.tolist(), v.tolist())]
    else:
        tops = [[] for _ in chosen]
    return [TokenLogprob(t, c, tp) for t, c, tp in zip(targets.tolist(), chosen, tops)]


def _variant(x0: torch.Tensor, i: int, bs: int, mask_id: int) -> torch.Tensor:
    """Position ``i``'s block with ``i`` and the positions after it in the block masked."""
    b, j = divmod(i, bs)
    blk = x0[b * bs : (b + 1) * bs].clone()
    blk[j:] = mask_id
    return blk


def model_place(model) -> tuple[torch.device, torch.dtype]:
    """Where a model's tensors live and their dtype: its head's weight for a PyTorch model, the
    ``device`` and ``dtype`` a native back end declares (``clover.backends.llamacpp.LlamaCppClover``)."""
    head = getattr(model, "lm_head", None)
    if head is not None:
        return head.weight.device, head.weight.dtype
    return model.device, model.dtype


@torch.inference_mode()
def prompt_logprobs(model, ids: list[int], block_size: int, top: int = 0) -> list[TokenLogprob | None]:
    """Per prompt token, its log-probability given the tokens before it (and the ``top`` most
    likely tokens at its place with theirs). The first token has nothing before it: None (as
    OpenAI's ``echo`` and vLLM's ``prompt_logprobs`` report it)."""
    if not hasattr(model, "forward_blocks"):  # a back end with the incremental API only (llama.cpp)
        return prompt_logprobs_reference(model, ids, block_size, top)
    cfg = model.config
    bs = cfg.check_block_size(block_size)
    P = len(ids)
    if P < 2:
        return [None] * P
    device = model_place(model)[0]
    nb = -(-P // bs)
    x0 = torch.full((nb * bs,), cfg.mask_token_id, dtype=torch.long, device=device)
    x0[:P] = torch.tensor(ids, dtype=torch.long, device=device)
    out: list[TokenLogprob | None] = [None]
    per_call = max(1, MAX_NOISY_TOKENS // bs)
    for lo in range(1, P, per_call):
        pos = list(range(lo, min(P, lo + per_call)))
        xt = torch.stack([_variant(x0, i, bs, cfg.mask_token_id) for i in pos])
        blks = torch.tensor([i // bs for i in pos], device=device)
        at = torch.zeros(len(pos), bs, dtype=torch.bool, device=device)
        at[torch.arange(len(pos)), torch.tensor([i % bs for i in pos], device=device)] = True
        end = (pos[-1] // bs + 1) * bs  # later blocks do not reach these positions (block-causal)
        res = model.forward_blocks(x0[None, :end], None, xt, torch.zeros_like(blks), blks, bs, logits_at=at)
        out += _entries(res.logits, x0[pos], top, cfg.mask_token_id)
    return out


@torch.inference_mode()
def prompt_logprobs_reference(model, ids: list[int], block_size: int, top: int = 0) -> list[TokenLogprob | None]:
    """``prompt_logprobs`` one position per call through the incremental API (``model.step`` on a
    cache holding the blocks before the position's block): slow, for tests."""
    cfg = model.config
    bs = cfg.check_block_size(block_size)
    device = model_place(model)[0]
    P = len(ids)
    x0 = torch.full((-(-P // bs) * bs,), cfg.mask_token_id, dtype=torch.long, device=device)
    x0[:P] = torch.tensor(ids, dtype=torch.long, device=device)
    out: list[TokenLogprob | None] = [None] * min(P, 1)
    for i in range(1, P):
        cache = model.new_cache(1)
        start = i // bs * bs
        if start:
            model.step(cache, commit=x0[None, :start], block_size=bs)
        logits = model.step(cache, denoise=_variant(x0, i, bs, cfg.mask_token_id)[None], block_size=bs)
        out += _entries(logits[0, i % bs][None], x0[i : i + 1], top, cfg.mask_token_id)
    return out


def _log_probs(logits: torch.Tensor, mask_id: int) -> torch.Tensor:
    """``[N, V]`` log-probabilities over the tokens a decode may choose (the mask token left out)."""
    lg = logits.to(torch.promote_types(logits.dtype, torch.float32))
    lg[:, mask_id] = -float("inf")
    return torch.log_softmax(lg, -1)


def _scored(lp: torch.Tensor, token: int, any_of: list[int] | None) -> float:
    """One position's score: its token's log-probability, or the total of ``any_of``'s."""
    if any_of is None:
        return float(lp[token])
    return float(torch.logsumexp(lp[torch.tensor(any_of, device=lp.device)], 0))


@torch.inference_mode()
def continuation_logprobs(
    model,
    context: list[int],
    conts: list[list[int]],
    block_size: int,
    last: list[list[int]] | None = None,
    final_only: bool = False,
) -> list[list[float]]:
    """Per continuation, the log-probability of each of its tokens after ``context`` and its own
    tokens before it, in the order ``prompt_logprobs`` scores a text (``context + cont`` scored
    whole gives the same numbers at those positions): every continuation in one model call (the
    training forward, one clean stream per continuation, one noisy block per scored token), in
    chunks past ``MAX_NOISY_TOKENS``. ``last``: per continuation, token ids whose total
    probability is scored after it, as one more entry (any of the ways a text may go on there:
    a closing quote alone, or with the JSON after it). ``final_only``: the final entry alone (one
    noisy block per continuation). ``continuation_logprobs_reference`` is the slow reference."""
    if not hasattr(model, "forward_blocks"):  # a back end with the incremental API only
        return continuation_logprobs_reference(model, context, conts, block_size, last, final_only)
    cfg = model.config
    bs = cfg.check_block_size(block_size)
    if not context:
        raise ValueError("continuation_logprobs: the context is empty (the first token has nothing before it)")
    device = model_place(model)[0]
    seqs = _with_last(conts, last)
    C, K = len(context), len(seqs)
    if K == 0:
        return []
    T = -(-max(C + len(c) for c in seqs) // bs) * bs
    full = torch.full((K, T), cfg.mask_token_id, dtype=torch.long, device=device)  # past a continuation: masked
    for k, c in enumerate(seqs):
        full[k, : C + len(c)] = torch.tensor(context + c, dtype=torch.long, device=device)
    # a noisy block sees the clean stream's blocks before its own only: continuations that end
    # in the same block share one clean stream (those inside the context's last block, the
    # context's), so the context is read once, not once per continuation
    row_of: dict[tuple, int] = {}
    rows_k = []
    for k, c in enumerate(seqs):
        seen = (C + len(c) - 1) // bs * bs  # the clean tokens its last position sees
        rows_k.append(row_of.setdefault(tuple(full[k, :seen].tolist()), len(row_of)))
    x0 = full[[rows_k.index(r) for r in range(len(row_of))]]
    jobs = [(k, C + i) for k, c in enumerate(seqs) for i in range(len(c) - 1 if final_only else 0, len(c))]
    out: list[list[float]] = [[] for _ in seqs]
    per_call = max(1, MAX_NOISY_TOKENS // bs)
    for lo in range(0, len(jobs), per_call):
        part = jobs[lo : lo + per_call]
        xt = torch.stack([_variant(full[k], i, bs, cfg.mask_token_id) for k, i in part])
        rows = torch.tensor([rows_k[k] for k, _ in part], device=device)
        blks = torch.tensor([i // bs for _, i in part], device=device)
        at = torch.zeros(len(part), bs, dtype=torch.bool, device=device)
        at[torch.arange(len(part)), torch.tensor([i % bs for _, i in part], device=device)] = True
        end = (max(i for _, i in part) // bs + 1) * bs  # later blocks do not reach these positions
        res = model.forward_blocks(x0[:, :end], None, xt, rows, blks, bs, logits_at=at)
        lp = _log_probs(res.logits, cfg.mask_token_id)
        for n, (k, i) in enumerate(part):
            any_of = last[k] if last is not None and i == C + len(seqs[k]) - 1 else None
            out[k].append(_scored(lp[n], int(full[k, i]), any_of))
    return out


def _with_last(conts: list[list[int]], last: list[list[int]] | None) -> list[list[int]]:
    """The continuations, each with a stand-in for its ``last`` entry (the first of its ids)."""
    if last is None:
        return [list(c) for c in conts]
    if len(last) != len(conts) or not all(last):
        raise ValueError("continuation_logprobs: last needs a non-empty list of ids per continuation")
    return [list(c) + [ids[0]] for c, ids in zip(conts, last)]


@torch.inference_mode()
def continuation_logprobs_reference(
    model,
    context: list[int],
    conts: list[list[int]],
    block_size: int,
    last: list[list[int]] | None = None,
    final_only: bool = False,
) -> list[list[float]]:
    """``continuation_logprobs`` one continuation and one position per call through the
    incremental API, as ``prompt_logprobs_reference`` scores a prompt: slow, for tests and back
    ends without the training forward."""
    cfg = model.config
    bs = cfg.check_block_size(block_size)
    device = model_place(model)[0]
    out = []
    for k, c in enumerate(_with_last(conts, last)):
        ids = context + c
        x0 = torch.full((-(-len(ids) // bs) * bs,), cfg.mask_token_id, dtype=torch.long, device=device)
        x0[: len(ids)] = torch.tensor(ids, dtype=torch.long, device=device)
        lps = []
        for i in range(len(ids) - 1 if final_only else len(context), len(ids)):
            cache = model.new_cache(1)
            start = i // bs * bs
            if start:
                model.step(cache, commit=x0[None, :start], block_size=bs)
            logits = model.step(cache, denoise=_variant(x0, i, bs, cfg.mask_token_id)[None], block_size=bs)
            any_of = last[k] if last is not None and i == len(ids) - 1 else None
            lps.append(_scored(_log_probs(logits[0, i % bs][None], cfg.mask_token_id)[0], ids[i], any_of))
        out.append(lps)
    return out
