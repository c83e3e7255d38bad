"""Per-request decoding settings (docs/engine-api.md), validated on construction."""

from __future__ import annotations

from dataclasses import dataclass, field

from clover.engine.grammar import Grammar
from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD, POLICIES

MAX_TOP_LOGPROBS = 20  # alternatives per token, as OpenAI's top_logprobs


class ParamError(ValueError):
    """A decoding setting refused; ``param`` names it (the first one, when several are wrong), so
    the OpenAI layer reports it as the error's ``param`` without reading the message."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


@dataclass
class SamplingParams:
    """How one request is decoded. Greedy by default; invalid values raise ``ParamError`` (a
    ``ValueError`` naming the first bad field in ``param``).

    Checks that need the model (block size against ``max_block_size``, token ids against the
    vocabulary, stop strings against a tokenizer) run when the request is added to an engine.
    """

    max_tokens: int = 256  # new tokens, >= 0
    block_size: int | None = None  # None: model.config.block_size
    policy: str = DEFAULT_POLICY  # which positions of the active block to commit each pass
    threshold: float = DEFAULT_THRESHOLD  # commit where p(chosen) >= threshold (threshold, prefix, edit, ...)
    steps_per_block: int | None = None  # "fixed": passes per block (None: block_size // 4)
    max_edits: int = 4  # "edit": re-predictions allowed per block
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    seed: int | None = None  # per-request generator when sampling
    stop: list[str] = field(default_factory=list)  # stop strings (need a tokenizer); removed from the text
    stop_token_ids: list[int] | None = None  # added to the model's (and tokenizer's) EOS ids
    allowed: dict[int, list[int]] | None = None  # generated-position index -> allowed token ids
    logprobs: int | None = None  # None: off; k: each generated token's log-probability and the top k (k <= 20)
    prompt_logprobs: int | None = None  # None: off; k: each prompt token's (clover.engine.scoring) and the top k
    presence_penalty: float = 0.0  # subtracted from the logit of every token already generated (-2..2)
    frequency_penalty: float = 0.0  # subtracted once per earlier occurrence of the token (-2..2)
    logit_bias: dict[int, float] | None = None  # token id -> added to its logit (-100..100)
    repetition_penalty: float = 1.0  # > 0; tokens in the prompt or generated: logit / p if positive, else * p
    min_p: float = 0.0  # sampling: drop tokens less likely than min_p x the most likely one (0..1)
    min_tokens: int = 0  # stop tokens (EOS included) cannot come before this many generated tokens
    ignore_eos: bool = False  # the model's EOS never comes: run to max_tokens (stop_token_ids still stop)
    grammar: Grammar | None = None  # structured output (clover.engine.grammar): JSON, a JSON Schema, tool calls

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        problems: list[tuple[str, str]] = []  # (the parameter, what is wrong with it)

        def bad(param: str, message: str) -> None:
            problems.append((param, message))

        if not _is_int(self.max_tokens) or self.max_tokens < 0:
            bad("max_tokens", f"max_tokens must be an integer >= 0, got {self.max_tokens!r}")
        if self.block_size is not None and (not _is_int(self.block_size) or self.block_size <= 0):
            bad("block_size", f"block_size must be a positive integer, got {self.block_size!r}")
        if self.policy not in POLICIES:
            bad("policy", f"unknown policy {self.policy!r}; choose from {', '.join(sorted(POLICIES))}")
        if not _is_num(self.threshold) or not 0 < self.threshold <= 1:
            bad("threshold", f"threshold must lie in (0, 1], got {self.threshold!r}")
        if self.steps_per_block is not None and (not _is_int(self.steps_per_block) or self.steps_per_block <= 0):
            bad("steps_per_block", f"steps_per_block must be a positive integer, got {self.steps_per_block!r}")
        if not _is_int(self.max_edits) or self.max_edits < 0:
            bad("max_edits", f"max_edits must be an integer >= 0, got {self.max_edits!r}")
        if not _is_num(self.temperature) or self.temperature < 0:
            bad("temperature", f"temperature must be >= 0, got {self.temperature!r}")
        if not _is_num(self.top_p) or not 0 < self.top_p <= 1:
            bad("top_p", f"top_p must lie in (0, 1], got {self.top_p!r}")
        if not _is_int(self.top_k) or self.top_k < 0:
            bad("top_k", f"top_k must be an integer >= 0, got {self.top_k!r}")
        if self.seed is not None and not _is_int(self.seed):
            bad("seed", f"seed must be an integer, got {self.seed!r}")
        if not isinstance(self.stop, (list, tuple)) or not all(isinstance(s, str) and s for s in self.stop):
            bad("stop", f"stop must be a list of non-empty strings, got {self.stop!r}")
        if self.stop_token_ids is not None and not all(_is_int(t) and t >= 0 for t in self.stop_token_ids):
            bad("stop_token_ids", f"stop_token_ids must be token ids >= 0, got {self.stop_token_ids!r}")
        if self.allowed is not None:
            for k, v in self.allowed.items():
                if not _is_int(k) or k < 0:
                    bad("allowed", f"allowed: position {k!r} must be an integer >= 0 (index of a generated token)")
                elif not isinstance(v, (list, tuple)) or not v or not all(_is_int(t) and t >= 0 for t in v):
                    bad("allowed", f"allowed[{k}] must be a non-empty list of token ids, got {v!r}")
        for name in ("logprobs", "prompt_logprobs"):
            v = getattr(self, name)
            if v is not None and (not _is_int(v) or not 0 <= v <= MAX_TOP_LOGPROBS):
                bad(name, f"{name} must be an integer in [0, {MAX_TOP_LOGPROBS}] or None, got {v!r}")
        for name in ("presence_penalty", "frequency_penalty"):
            v = getattr(self, name)
            if not _is_num(v) or not -2 <= v <= 2:
                bad(name, f"{name} must lie in [-2, 2], got {v!r}")
        if self.logit_bias is not None:
            if not isinstance(self.logit_bias, dict) or not all(
                _is_int(k) and k >= 0 and _is_num(v) and -100 <= v <= 100 for k, v in self.logit_bias.items()
            ):
                bad(
                    "logit_bias",
                    f"logit_bias must map token ids >= 0 to numbers in [-100, 100], got {self.logit_bias!r}",
                )
        if not _is_num(self.repetition_penalty) or self.repetition_penalty <= 0:
            bad("repetition_penalty", f"repetition_penalty must be > 0 (1: off), got {self.repetition_penalty!r}")
        if not _is_num(self.min_p) or not 0 <= self.min_p <= 1:
            bad("min_p", f"min_p must lie in [0, 1], got {self.min_p!r}")
        if not _is_int(self.min_tokens) or self.min_tokens < 0:
            bad("min_tokens", f"min_tokens must be an integer >= 0, got {self.min_tokens!r}")
        elif _is_int(self.max_tokens) and 0 <= self.max_tokens < self.min_tokens:  # a bad max_tokens: said above
            bad("min_tokens", f"min_tokens ({self.min_tokens}) must not exceed max_tokens ({self.max_tokens})")
        if not isinstance(self.ignore_eos, bool):
            bad("ignore_eos", f"ignore_eos must be true or false, got {self.ignore_eos!r}")
        elif self.ignore_eos and self.grammar is not None:
            bad(
                "ignore_eos",
                "ignore_eos cannot be combined with a grammar (structured output, tool calls: they end at EOS)",
            )
        if self.grammar is not None and not isinstance(self.grammar, Grammar):
            bad("grammar", f"grammar must be a clover.engine.grammar.Grammar, got {type(self.grammar).__name__}")
        if self.grammar is not None and self.allowed:
            bad("grammar", "grammar and allowed cannot be combined")
        if problems:
            raise ParamError("invalid sampling parameters: " + "; ".join(m for _, m in problems), problems[0][0])

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def adjusts_logits(self) -> bool:
        return bool(self.presence_penalty or self.frequency_penalty or self.logit_bias or self.repetition_penalty != 1)
