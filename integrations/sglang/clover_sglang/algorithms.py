"""Clover's unmasking policies as SGLang dLLM algorithms: ``--dllm-algorithm CloverPrefix``
(Clover's default, τ 0.97), ``CloverThreshold``, ``CloverAR`` and ``CloverFixed``.

Each pass is the same decision Clover's engine makes (``clover.engine.policies``, greedy rows):
the mask token is never chosen, each open position's confidence is the probability of its most
likely token, and the policy picks the positions to commit from a ``PassView``. Positions after
a committed stop token are no longer open (the request ends there), as in Clover's engine.

Configured with ``--dllm-algorithm-config FILE.yaml``: ``threshold`` (τ, default 0.97),
``steps`` (passes per block for CloverFixed), ``block_size``, ``stop_token_ids`` (default: the
model's EOS ids, filled in by ``clover_sglang.plugin``). Sampling (temperature, top-p) is not
applied by these algorithms: every pass is greedy, as Clover's default.

``CLOVER_SGLANG_LOGITS_DIR`` (an environment variable of the server): while that folder exists,
every pass writes its rows' blocks, start positions and logits to a file there (``pass-*.pt``),
which the logit test and ``clover bench sglang`` compare with Clover's own model. Off when unset.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from sglang.srt.dllm.algorithm.base import DllmAlgorithm
from sglang.srt.dllm.config import DllmConfig

from clover.engine.policies import DEFAULT_THRESHOLD, POLICIES, PassView, is_stop

ARCHITECTURES = ("CloverForCausalLM",)


class CloverPolicyAlgorithm(DllmAlgorithm):
    """One Clover policy (``policy``, a name in ``clover.engine.policies.POLICIES``) per pass."""

    policy = "prefix"
    supported_architectures = ARCHITECTURES

    def __init__(self, config: DllmConfig):
        super().__init__(config)
        cfg = config.algorithm_config
        self.threshold = float(cfg.get("threshold", DEFAULT_THRESHOLD))
        self.steps = int(cfg.get("steps", 4))
        self.stop_ids = [int(t) for t in cfg.get("stop_token_ids", [])]
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold must lie in (0, 1], got {self.threshold}")
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        self._policy = POLICIES[self.policy]

    @classmethod
    def configure_server_args(cls, server_args) -> None:
        """The radix prefix cache shares attention history between requests but not GDN state:
        off (``clover_sglang.state``)."""
        from sglang.srt.arg_groups.overrides import declare_resolution

        declare_resolution(server_args, "clover_sglang", disable_radix_cache=True)

    def init_step_state(self, forward_batch) -> list:
        """Per row: which positions of the block are generated (masked at the first pass) and
        the passes run so far."""
        B = forward_batch.batch_size
        ids = forward_batch.input_ids.view(B, self.block_size)
        gen = ids == self.mask_id
        if forward_batch.dllm_prompt_mask is not None:
            gen &= ~forward_batch.dllm_prompt_mask.view(B, self.block_size)
        return [{"gen": gen[r].clone(), "passes": 0} for r in range(B)]

    def step(self, forward_batch, full_logits: torch.Tensor, states: list) -> list[bool]:
        B, bs = forward_batch.batch_size, self.block_size
        ids = forward_batch.input_ids.view(B, bs)
        gen = torch.stack([s["gen"] for s in states])
        masked = gen & (ids == self.mask_id)
        stop_ids = torch.tensor(self.stop_ids or [-1], device=ids.device).expand(B, -1)
        eos = gen & ~masked & is_stop(ids, stop_ids)
        cand = masked & ((eos.long().cumsum(1) - eos.long()) == 0)  # open, and before any committed stop
        done = ~cand.any(1)
        if LOGITS_DIR and os.path.isdir(LOGITS_DIR):
            dump_pass(forward_batch, full_logits, B, bs)
        lg = full_logits.view(B, bs, -1).to(torch.promote_types(full_logits.dtype, torch.float32)).clone()
        lg[..., self.mask_id] = -float("inf")
        best, tok = lg.max(-1)
        conf = (best - lg.logsumexp(-1)).exp()
        passes = torch.tensor([s["passes"] for s in states], device=ids.device)
        view = PassView(
            tok=torch.where(cand, tok, ids),
            conf=conf.masked_fill(~cand, -1.0),
            cur_p=torch.zeros_like(conf),
            x=ids,
            cand=cand,
            settled=torch.zeros_like(cand),
            threshold=torch.full((B,), self.threshold, device=ids.device),
            steps_left=(self.steps - passes).clamp(min=1),
            edits_left=torch.zeros(B, dtype=torch.long, device=ids.device),
            stop_ids=stop_ids,
        )
        commit = self._policy.commit(view) & cand
        forward_batch.input_ids.copy_(torch.where(commit, view.tok, ids).view(-1))  # in place (SGLang's contract)
        for s in states:
            s["passes"] += 1
        return done.tolist()


LOGITS_DIR = os.environ.get("CLOVER_SGLANG_LOGITS_DIR")
_passes = [0]


def dump_pass(forward_batch, full_logits: torch.Tensor, B: int, bs: int) -> None:
    """One pass's blocks ``[B, bs]``, start positions ``[B]`` and logits ``[B, bs, V]`` to LOGITS_DIR
    (by the first rank of a tensor-parallel group only: every rank has the same logits)."""
    from sglang.srt.runtime_context import get_parallel

    if get_parallel().tp_rank != 0:
        return
    out = Path(LOGITS_DIR)
    rec = {
        "ids": forward_batch.input_ids.view(B, bs).cpu().clone(),
        "start": forward_batch.positions.view(B, bs)[:, 0].cpu().clone(),
        "logits": full_logits.view(B, bs, -1).float().cpu().clone(),
    }
    torch.save(rec, out / f"pass-{os.getpid()}-{_passes[0]:06d}.pt")
    _passes[0] += 1


def _algorithm(policy: str, name: str) -> type[CloverPolicyAlgorithm]:
    doc = f"Clover's ``{policy}`` policy (clover.engine.policies) as an SGLang dLLM algorithm."
    return type(name, (CloverPolicyAlgorithm,), {"policy": policy, "__doc__": doc})


CloverPrefix = _algorithm("prefix", "CloverPrefix")
CloverThreshold = _algorithm("threshold", "CloverThreshold")
CloverAR = _algorithm("ar", "CloverAR")
CloverFixed = _algorithm("fixed", "CloverFixed")
ALGORITHMS = (CloverPrefix, CloverThreshold, CloverAR, CloverFixed)
