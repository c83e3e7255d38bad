"""From logits to one chosen token and its probability per position.

Constrained slots are masked to their allowed set first, so nothing else can ever come out;
the mask token is never produced unless a slot allows it. Greedy rows are done together;
sampled rows use their own ``torch.Generator`` (temperature, top-k, top-p, min-p) and draw once per
position of the block each pass, so a seeded request is reproducible in any batch.
The confidence is the probability of the chosen token under the distribution it came from.
``choose`` computes every position of the block (the reference); ``choose_selected``, what the
engine calls, computes only the positions a pass selects and gives the same figures there.
Log-probabilities (for ``logprobs``) are the model's, after constraints and before temperature,
top-k and top-p (what OpenAI-style clients expect), over every position each pass.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from clover.engine.request import Request


class Choice(NamedTuple):
    tok: torch.Tensor  # [R, bs] chosen token (x where not selected)
    conf: torch.Tensor  # [R, bs] its probability where selected, else -1
    cur_p: torch.Tensor  # [R, bs] probability of the token now in x
    logp: torch.Tensor  # [R, bs] log-probability of tok
    top_ids: torch.Tensor | None  # [R, bs, top] the most likely tokens (None when top == 0)
    top_lp: torch.Tensor | None  # [R, bs, top] their log-probabilities


def logit_bias_vector(logit_bias: dict[int, float], vocab_size: int, device=None) -> torch.Tensor:
    """``{token id: bias}`` as a ``[V]`` vector (zero elsewhere)."""
    v = torch.zeros(vocab_size, device=device)
    v[list(logit_bias)] = torch.tensor(list(logit_bias.values()), dtype=torch.float, device=device)
    return v


def adjust_logits(
    logits: torch.Tensor, params, counts: torch.Tensor, bias: torch.Tensor | None, in_prompt: torch.Tensor | None = None
) -> None:
    """In place, one request's logits ``[n, V]``: repetition_penalty on every token of the prompt
    (``in_prompt [V]`` bool) or generated so far (divides a positive logit, multiplies a negative
    one, as Hugging Face and vLLM), then + logit_bias, - presence_penalty for every token
    generated so far, - frequency_penalty per earlier occurrence (``counts [V]``: committed tokens)."""
    if params.repetition_penalty != 1:
        seen = counts > 0 if in_prompt is None else (counts > 0) | in_prompt
        pen = torch.where(logits > 0, 1 / params.repetition_penalty, params.repetition_penalty)
        logits.mul_(torch.where(seen, pen, torch.ones_like(pen)))
    adj = torch.zeros_like(logits[0]) if bias is None else bias.to(logits.dtype).clone()
    if params.presence_penalty:
        adj -= params.presence_penalty * (counts > 0).to(logits.dtype)
    if params.frequency_penalty:
        adj -= params.frequency_penalty * counts.to(logits.dtype)
    logits += adj


def choose(
    logits: torch.Tensor,
    sel: torch.Tensor,
    x: torch.Tensor,
    requests: list[Request],
    allowed,
    mask_id: int,
    top: int = 0,
) -> Choice:
    """logits ``[R, bs, V]`` (modified in place), sel ``[R, bs]`` bool, x ``[R, bs]`` the block now,
    ``top``: how many alternatives to report per position (the most any row asks for).

    Every position is computed (a few vector ops, cheap next to the LM head that made the
    logits); ``sel`` only masks the result.
    """
    lg = logits.to(torch.promote_types(logits.dtype, torch.float32))
    lg[..., mask_id] = -float("inf")
    for r, slots in enumerate(allowed):
        for i, ids in slots.items():  # constrained slot: only its allowed tokens survive
            keep = lg[r, i, ids]
            lg[r, i] = -float("inf")
            lg[r, i, ids] = keep
    lse = lg.logsumexp(-1, keepdim=True)
    best, tok = lg.max(-1)
    conf = (best - lse[..., 0]).exp()
    cur_p = (lg.gather(-1, x[..., None])[..., 0] - lse[..., 0]).exp()
    for r, req in enumerate(requests):
        if req.generator is not None:
            tok[r], conf[r], cur_p[r] = _sample(lg[r], x[r], req)
    tok = torch.where(sel, tok, x)
    logp = lg.gather(-1, tok[..., None])[..., 0] - lse[..., 0]
    top_ids = top_lp = None
    if top:
        top_lp, top_ids = lg.topk(min(top, lg.shape[-1]), -1)
        top_lp = top_lp - lse
    return Choice(tok, conf.masked_fill(~sel, -1.0), cur_p, logp, top_ids, top_lp)


def choose_selected(
    logits: torch.Tensor,
    sel: torch.Tensor,
    x: torch.Tensor,
    requests: list[Request],
    allowed,
    mask_id: int,
    top: int = 0,
) -> Choice:
    """``choose`` computed at the selected positions only (``sel``: the open positions, and the
    committed ones of rows that edit): the softmax, argmax and gathers run over those rows of the
    logits alone, and a sampled request's row is drawn whole, as ``choose`` draws it, so its
    random stream is the same. At every selected position ``tok``, ``conf``, ``cur_p``, ``logp``
    and the alternatives equal ``choose``'s; elsewhere ``tok`` is ``x``, ``conf`` -1 and the rest
    0, which nothing reads (a pass changes selected positions only)."""
    R, bs, V = logits.shape
    lg = logits.to(torch.promote_types(logits.dtype, torch.float32)).reshape(R * bs, V)
    flat = sel.reshape(-1)
    where = flat.nonzero()[:, 0]
    at = where.tolist()  # the selected positions, flat (row * bs + position)
    rows = lg if len(at) == R * bs else lg.index_select(0, where)  # [n, V]
    rows[:, mask_id] = -float("inf")
    index = {p: j for j, p in enumerate(at)}
    for r, slots in enumerate(allowed):
        for i, ids in slots.items():  # constrained slot: only its allowed tokens survive
            j = index.get(r * bs + i)
            if j is not None:
                keep = rows[j, ids]
                rows[j] = -float("inf")
                rows[j, ids] = keep
    lse = rows.logsumexp(-1)
    best, tok_s = rows.max(-1)
    conf_s = (best - lse).exp()
    xs = x.reshape(-1).index_select(0, where)
    cur_s = (rows.gather(-1, xs[:, None])[:, 0] - lse).exp()
    sampled = [r for r, req in enumerate(requests) if req.generator is not None]
    if sampled:
        full = lg.view(R, bs, V)
        for r in sampled:  # the whole row, as ``choose`` prepares and draws it
            row = full[r]
            row[:, mask_id] = -float("inf")
            for i, ids in allowed[r].items():
                keep = row[i, ids]
                row[i] = -float("inf")
                row[i, ids] = keep
            t, c, p = _sample(row, x[r], requests[r])
            js = [j for j, q in enumerate(at) if q // bs == r]
            if js:
                pos = torch.tensor([at[j] - r * bs for j in js], device=x.device)
                js_t = torch.tensor(js, device=x.device)
                tok_s[js_t], conf_s[js_t], cur_s[js_t] = t[pos], c[pos], p[pos]
    logp_s = rows.gather(-1, tok_s[:, None])[:, 0] - lse
    tok = x.clone().view(-1)
    tok[where] = tok_s
    conf = torch.full((R * bs,), -1.0, dtype=conf_s.dtype, device=x.device)
    conf[where] = conf_s
    cur_p = torch.zeros_like(conf)
    cur_p[where] = cur_s
    logp = torch.zeros_like(conf)
    logp[where] = logp_s
    top_ids = top_lp = None
    if top:
        k = min(top, V)
        tl, ti = rows.topk(k, -1)
        top_lp = torch.zeros(R * bs, k, dtype=tl.dtype, device=x.device)
        top_ids = torch.zeros(R * bs, k, dtype=ti.dtype, device=x.device)
        top_lp[where] = tl - lse[:, None]
        top_ids[where] = ti
        top_lp, top_ids = top_lp.view(R, bs, k), top_ids.view(R, bs, k)
    return Choice(tok.view(R, bs), conf.view(R, bs), cur_p.view(R, bs), logp.view(R, bs), top_ids, top_lp)


def _sample(logits: torch.Tensor, cur: torch.Tensor, req: Request):
    p = req.params
    z = logits / p.temperature
    if p.top_k and p.top_k < z.shape[-1]:
        kth = z.topk(p.top_k, -1).values[:, -1:]
        z = z.masked_fill(z < kth, -float("inf"))
    if p.top_p < 1:
        sp, si = z.softmax(-1).sort(-1, descending=True)
        drop = sp.cumsum(-1) - sp > p.top_p  # keep the smallest prefix reaching top_p (>= 1 token)
        z = z.masked_fill(torch.zeros_like(drop).scatter(-1, si, drop), -float("inf"))
    probs = z.softmax(-1)
    if p.min_p > 0:  # keep tokens at least min_p times as likely as the most likely one
        probs = probs.masked_fill(probs < p.min_p * probs.max(-1, keepdim=True).values, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    tok = torch.multinomial(probs, 1, generator=req.generator)[:, 0]  # one draw per position of the block
    return tok, probs.gather(1, tok[:, None])[:, 0], probs.gather(1, cur[:, None])[:, 0]
