"""The state of one request: its settings, final tokens and text, active block, and statistics."""

from __future__ import annotations

import time

import torch

from clover.engine.outputs import Event, Finished, RequestOutput, TextDelta, TokenLogprob
from clover.engine.params import SamplingParams
from clover.engine.policies import POLICIES
from clover.engine.text import TextStream


class Request:
    def __init__(
        self, rid: str, prompt: list[int], params: SamplingParams, block_size: int, stop_ids, tokenizer, device=None
    ):
        self.id = rid
        self.prompt = prompt
        self.params = params
        self.block_size = block_size
        self.policy = POLICIES[params.policy]
        self.steps_per_block = params.steps_per_block or max(1, block_size // 4)
        self.stop_ids = sorted(stop_ids)
        self.text = TextStream(tokenizer, params.stop, set(stop_ids), params.max_tokens)
        self.tokenizer = tokenizer
        self.generator = None
        if not params.greedy:
            self.generator = torch.Generator(device=device or "cpu")
            self.generator.manual_seed(params.seed) if params.seed is not None else self.generator.seed()
        self.allowed = {i: torch.tensor(ids, device=device) for i, ids in (params.allowed or {}).items()}
        # active block: it starts at the last block boundary of the prompt (docs/architecture.md, Rule 1), so the
        # prompt's tail sits clean at its start
        self.block_start = len(prompt) // block_size * block_size
        self.gen_lo = len(prompt) - self.block_start  # first generated position inside the block
        self.output: RequestOutput | None = None
        self.prompt_blocks: torch.Tensor | None = None  # [1, n] prompt blocks still to commit (fused prefill)
        self.prefill_progress = None  # the prompt's commit so far, while it is prefilled (Runner.PromptCommit)
        self.logprobs: list[TokenLogprob] | None = None if params.logprobs is None else []
        self.counts: torch.Tensor | None = None  # [V] committed tokens so far (penalties), set by the engine
        self.bias: torch.Tensor | None = None  # [V] logit_bias as a vector
        self.in_prompt: torch.Tensor | None = None  # [V] bool, the prompt's tokens (repetition_penalty)
        self.banned: list[int] = []  # the model's EOS ids under ignore_eos: never chosen
        self.grammar = None  # TokenGrammar when params.grammar: set by the engine
        self.prompt_logprobs = None  # set at prefill when params.prompt_logprobs (Runner.prefill)
        self.stop_logprob = None  # the stop token's, when one ended the request and logprobs are asked
        self.gstate = None  # the grammar's state after the tokens committed so far
        # statistics
        self.t_arrival = time.perf_counter()
        self.t_start: float | None = None  # joined a batch (prefill done)
        self.t_first: float | None = None
        self.passes = 0  # denoise passes (a fused commit rides along with one)
        self.commit_passes = 0  # separate commit passes (unfused, or a commit of some rows of a batch)
        self.blocks = 0

    @property
    def finished(self) -> bool:
        return self.output is not None

    @property
    def n_generated(self) -> int:
        return len(self.text.tokens)

    def limit(self) -> int:
        """End of the positions of the active block this request still needs (max_tokens)."""
        return min(self.block_size, self.gen_lo + self.params.max_tokens - self.n_generated)

    def block_allowed(self) -> dict[int, torch.Tensor]:
        """Constrained slots of the active block: block position -> allowed token ids."""
        if not self.allowed:
            return {}
        first = self.n_generated - self.gen_lo  # generated index of block position 0
        return {i - first: ids for i, ids in self.allowed.items() if self.gen_lo <= i - first < self.block_size}

    def finish_block(self, ids: list[int], logprobs: list[TokenLogprob] | None = None) -> list[Event]:
        """The active block is final: ``ids`` are its generated tokens (those this request needs),
        ``logprobs`` theirs (when the request asks for them)."""
        now = time.perf_counter()
        self.blocks += 1
        new_ids, delta = self.text.add(ids)  # new_ids: a prefix of ids (EOS, stop strings, max_tokens cut)
        if self.counts is not None and new_ids:
            self.counts += torch.bincount(torch.tensor(new_ids, device=self.counts.device), minlength=len(self.counts))
        lps = None
        if self.logprobs is not None:
            lps = (logprobs or [])[: len(new_ids)]
            self.logprobs += lps
            if (
                isinstance(self.text.stop_reason, int)
                and self.stop_logprob is None
                and len(logprobs or []) > len(new_ids)
            ):
                self.stop_logprob = logprobs[len(new_ids)]  # the stop token, right after the kept ones
        events: list[Event] = []
        if new_ids or delta:
            if self.t_first is None and new_ids:
                self.t_first = now
            events.append(TextDelta(self.id, new_ids, delta, lps))
        if self.text.finish_reason is not None:
            events.append(self.finish(self.text.finish_reason, now))
        self.block_start += self.block_size
        self.gen_lo = 0
        return events

    def finish(self, reason: str, now: float | None = None) -> Finished:
        now = time.perf_counter() if now is None else now
        wall = now - self.t_arrival
        n = self.n_generated
        stats = {
            "forward_passes": self.passes,
            "commit_passes": self.commit_passes,
            "tokens": n,
            "tpf": n / self.passes if self.passes else 0.0,
            "tokens_per_s": n / wall if wall > 0 else 0.0,
            "ttft_s": (self.t_first if self.t_first is not None else now) - self.t_arrival,
            "time_per_block_s": (now - (self.t_start or self.t_arrival)) / self.blocks if self.blocks else 0.0,
            "wall_s": wall,
        }
        text = self.text.text if self.tokenizer is not None else None
        lps = None if self.logprobs is None else self.logprobs[: self.n_generated]
        self.output = RequestOutput(
            self.id,
            list(self.prompt),
            list(self.text.tokens),
            text,
            reason,
            stats,
            lps,
            self.prompt_logprobs,
            self.text.stop_reason,
            self.stop_logprob,
        )
        return Finished(self.id, self.output)
