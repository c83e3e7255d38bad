"""The engine's slow, obviously-correct twin: no caches, no batching, the full training
forward over the whole sequence for every denoise pass, the same sampler and policies."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from clover.engine import SamplingParams
from clover.engine.policies import POLICIES, PassView
from clover.engine.sampler import adjust_logits, choose, logit_bias_vector


@torch.inference_mode()
def reference_decode(model, prompt: list[int], params: SamplingParams, with_logprobs: bool = False):
    """→ (generated token ids without EOS, finish reason "stop" | "length"), plus each token's
    log-probability when it was chosen if ``with_logprobs``."""
    cfg = model.config
    bs = params.block_size or cfg.block_size
    mask = cfg.mask_token_id
    eos = set(cfg.eos_ids)
    stop_ids = (set() if params.ignore_eos else eos) | set(params.stop_token_ids or [])
    banned = sorted(eos - stop_ids) if params.ignore_eos else []  # ignore_eos: EOS never chosen
    policy = POLICIES[params.policy]
    steps = params.steps_per_block or max(1, bs // 4)
    gen = None
    if params.temperature > 0:
        gen = torch.Generator().manual_seed(params.seed)
    req = SimpleNamespace(generator=gen, params=params)
    out: list[int] = []
    lps: list[float] = []

    def done(reason: str):
        return (out, reason, lps) if with_logprobs else (out, reason)

    if params.max_tokens == 0:
        return done("length")
    while True:
        seq = list(prompt) + out
        start = len(seq) // bs * bs  # the block holds the prompt tail first (rule 1)
        lo = len(seq) - start
        hi = min(bs, lo + params.max_tokens - len(out))
        block = torch.tensor(seq[start:] + [mask] * (bs - lo))
        masked = torch.arange(bs) >= lo
        wanted = (torch.arange(bs) >= lo) & (torch.arange(bs) < hi)
        first_gen = len(out) - lo  # generated index of block position 0
        allowed = {
            i - first_gen: torch.tensor(v) for i, v in (params.allowed or {}).items() if lo <= i - first_gen < bs
        }
        step = edits = 0
        lp = torch.zeros(bs)
        for i, v in allowed.items():  # a slot with one allowed token is set before the first pass
            if len(v) == 1 and wanted[i]:
                block[i], masked[i] = v[0], False
        while True:
            needed = wanted.clone()
            for i in range(bs):  # nothing after a committed EOS is needed
                if wanted[i] and not masked[i] and int(block[i]) in stop_ids:
                    needed[i + 1 :] = False
                    break
            cand = masked & needed
            if not cand.any():
                break
            x = torch.tensor(seq[:start], dtype=torch.long)
            x = torch.cat([x, block])[None]
            logits = model.forward_train(x, x, bs).logits[:, start : start + bs]  # [1, bs, V]
            if params.adjusts_logits:  # penalties count every generated token committed so far
                V = logits.shape[-1]
                counts = torch.bincount(
                    torch.tensor(out + block[~masked & wanted].tolist(), dtype=torch.long), minlength=V
                )
                bias = logit_bias_vector(params.logit_bias, V) if params.logit_bias else None
                in_prompt = torch.zeros(V, dtype=torch.bool)
                in_prompt[list(prompt)] = True
                adjust_logits(logits[0], params, counts, bias, in_prompt)
            for i in range(bs):  # constrained slots keep their sets; elsewhere no stop before min_tokens
                if i not in allowed:
                    no = banned + (sorted(stop_ids) if first_gen + i < params.min_tokens else [])
                    logits[0, i, no] = -float("inf")
            settled = ~masked & needed & policy.edits
            ch = choose(logits, (cand | settled)[None], block[None], [req], [allowed], mask)
            tok = ch.tok
            v = PassView(
                tok,
                ch.conf,
                ch.cur_p,
                block[None],
                cand[None],
                settled[None],
                torch.tensor([params.threshold], dtype=torch.float),
                torch.tensor([max(1, steps - step)]),
                torch.tensor([params.max_edits - edits]),
                torch.tensor([sorted(stop_ids) or [-1]]),
            )
            commit = policy.commit(v)[0]
            edit = policy.edit(v)
            edit = torch.zeros_like(commit) if edit is None else edit[0]
            block = torch.where(commit | edit, tok[0], block)
            lp = torch.where(commit | edit, ch.logp[0], lp)
            masked = masked & ~commit
            edits += int(edit.sum())
            step += 1
        for t, p in zip(block[needed].tolist(), lp[needed].tolist()):
            if t in stop_ids:
                return done("stop")
            out.append(t)
            lps.append(p)
        if len(out) >= params.max_tokens:
            return done("length")
