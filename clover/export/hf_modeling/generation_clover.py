"""Block-diffusion ``generate`` for the Clover model (modeling_clover.py); torch only.

Text is written in blocks of ``block_size`` positions cut by absolute position. The prompt's
complete blocks are committed into the cache; its last ``len(prompt) % block_size`` tokens sit,
clean, at the start of the first generated block, whose other positions hold the mask token.
Each denoising pass reads the cache and the block, picks the most likely token for every masked
position, and a policy decides which of them to commit:

* ``prefix`` (the default): left to right in runs: the leftmost open position, then each next
  one while it is >= ``threshold`` (no token is chosen while a position to its left is open);
* ``threshold``: every position whose probability is >= ``threshold``, and at least the most
  confident one;
* ``fixed``: ``steps_per_block`` passes per block, the most confident positions first;
* ``ar``: one position per pass, left to right (autoregressive decoding on the same model).

A finished block is committed (one forward over its clean tokens, fused with the next block's
first pass) and the next block starts. A row ends at a stop token (kept in the output, as
transformers' ``generate`` keeps its EOS) or after ``max_new_tokens``. Decoding is greedy.
"""

from __future__ import annotations

import torch

DEFAULT_POLICY = "prefix"  # Clover's engine default (clover/engine/policies.py), with its threshold
DEFAULT_THRESHOLD = 0.97
DEFAULT_MAX_NEW_TOKENS = 256


# -- policies: one pass of one row, tensors [1, bs] -------------------------------------------
def _threshold(conf, cand, threshold, steps_left):
    sure = cand & (conf >= threshold)
    alone = cand.any(1) & ~sure.any(1)  # nothing sure: the most confident (leftmost on ties)
    best = conf.masked_fill(~cand, -float("inf")).argmax(1)
    pos = torch.arange(cand.shape[1], device=cand.device)
    return sure | (alone[:, None] & (pos == best[:, None]))


def _prefix(conf, cand, threshold, steps_left):
    first = cand & (cand.long().cumsum(1) == 1)
    ok = first | (cand & (conf >= threshold))
    return (ok | ~cand).long().cumprod(1).bool() & cand  # a run stops at the first unsure open position


def _ar(conf, cand, threshold, steps_left):
    return cand & (cand.cumsum(1) == 1)


def _fixed(conf, cand, threshold, steps_left):
    k = (cand.sum(1) + steps_left - 1) // steps_left  # ceil(remaining / passes left)
    s = conf.masked_fill(~cand, -float("inf"))
    rank = s.argsort(dim=1, descending=True, stable=True).argsort(dim=1)
    return cand & (rank < k[:, None])


POLICIES = {"threshold": _threshold, "prefix": _prefix, "ar": _ar, "fixed": _fixed}


class BlockDiffusionGenerationMixin:
    """``generate`` for a model with ``step``, ``new_cache`` and ``check_block_size``."""

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        max_new_tokens: int | None = None,
        block_size: int | None = None,
        policy: str = DEFAULT_POLICY,
        threshold: float = DEFAULT_THRESHOLD,
        steps_per_block: int | None = None,
        eos_token_id: int | list[int] | None = None,
        pad_token_id: int | None = None,
        max_length: int | None = None,
        do_sample: bool = False,
        **kwargs,
    ) -> torch.LongTensor:
        """Greedy block-diffusion decoding of ``input_ids [B, P]`` (rows padded on either side and
        marked by ``attention_mask``; each row decodes on its own, as it would alone).

        ``max_new_tokens`` (default: the generation config's, else 256; or ``max_length`` minus the
        prompt), ``block_size`` (default: the model's), ``policy`` (prefix, threshold, fixed, ar),
        ``threshold`` (for threshold and prefix), ``steps_per_block`` (for fixed; default
        block_size // 4), ``eos_token_id`` (int or list: the stop tokens; default the generation
        config's, else the model config's). Returns ``[B, P + n]``: each row's input, its new tokens
        (the stop token included), then ``pad_token_id``."""
        if do_sample or kwargs.get("num_beams", 1) != 1:
            raise ValueError("Clover's generate decodes greedily: do_sample and beam search are not supported")
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; choose from {sorted(POLICIES)}")
        if not 0 < threshold <= 1:
            raise ValueError(f"threshold must lie in (0, 1], got {threshold!r}")
        bs = self.check_block_size(block_size)
        gen = getattr(self, "generation_config", None)
        if max_new_tokens is None and max_length is not None:
            max_new_tokens = max_length - input_ids.shape[1]
        if max_new_tokens is None:
            max_new_tokens = getattr(gen, "max_new_tokens", None) or DEFAULT_MAX_NEW_TOKENS
        stops = eos_token_id if eos_token_id is not None else getattr(gen, "eos_token_id", None)
        stops = self.config.eos_ids if stops is None else [stops] if isinstance(stops, int) else list(stops)
        if pad_token_id is None:
            pad_token_id = getattr(gen, "pad_token_id", None)
        pad = pad_token_id if pad_token_id is not None else self.config.pad_token_id or (stops or [0])[0]
        steps = steps_per_block or max(1, bs // 4)
        rows = []
        for r in range(input_ids.shape[0]):
            ids = input_ids[r] if attention_mask is None else input_ids[r][attention_mask[r].bool()]
            rows.append(self._generate_row(ids, max(0, max_new_tokens), bs, POLICIES[policy], threshold, steps, stops))
        width = max(len(t) for t in rows)
        out = input_ids.new_full((input_ids.shape[0], input_ids.shape[1] + width), pad)
        out[:, : input_ids.shape[1]] = input_ids
        for r, t in enumerate(rows):
            out[r, input_ids.shape[1] : input_ids.shape[1] + len(t)] = torch.tensor(t, dtype=out.dtype)
        return out

    def _generate_row(self, prompt, max_new: int, bs: int, policy, threshold, steps, stops) -> list[int]:
        """One row: ``prompt [P]`` → its new tokens (ending with the stop token when one came)."""
        if max_new == 0:
            return []
        if not len(prompt) and self.config.shift_logits:
            raise ValueError("the prompt is empty: this model predicts each token from the one before")
        mask_id, dev = self.config.mask_token_id, prompt.device
        stop_ids = torch.tensor(stops or [-1], device=dev)
        full = len(prompt) // bs * bs
        cache = self.new_cache(1)
        commit = prompt[None, :full] if full else None  # rides with the first pass
        if self.config.shift_logits and not full:
            cache.last_logits = torch.zeros(1, self.config.vocab_size, device=dev, dtype=self.lm_head.weight.dtype)
        pos = torch.arange(bs, device=dev)[None]
        tail, out = prompt[full:], []  # the prompt's last tokens start the first block, clean
        while True:
            lo = len(tail)  # the block's first generated position
            x = torch.full((1, bs), mask_id, dtype=torch.long, device=dev)
            x[0, :lo] = tail
            wanted = (pos >= lo) & (pos < min(bs, lo + max_new - len(out)))
            masked, need, passes = pos >= lo, wanted, 0
            while bool((masked & need).any()):
                logits = self.step(cache, commit=commit, denoise=x, block_size=bs)
                commit = None
                lg = logits.to(torch.promote_types(logits.dtype, torch.float32))
                lg[..., mask_id] = -float("inf")  # the mask token is never written
                best, tok = lg.max(-1)
                cand = masked & need
                conf = (best - lg.logsumexp(-1)).exp().masked_fill(~cand, -1.0)
                steps_left = torch.tensor([max(1, steps - passes)], device=dev)
                chosen = policy(conf, cand, threshold, steps_left)
                x = torch.where(chosen, tok, x)
                masked &= ~chosen
                passes += 1
                # positions after a committed stop token are dropped, so never worth a pass
                stop = ~masked & wanted & (x[..., None] == stop_ids).any(-1)
                need = wanted & ((stop.cumsum(1) - stop.long()) == 0)
            new = x[need].tolist()
            for j, t in enumerate(new):
                if t in stops:
                    return out + new[: j + 1]
            out += new[: max_new - len(out)]
            if len(out) >= max_new:
                return out
            commit, tail = x, tail[:0]
