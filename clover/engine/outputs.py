"""What the engine hands back: streamed events and the final output of a request."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TokenLogprob:
    """One generated token's log-probability when it was chosen, and the most likely alternatives
    (``SamplingParams.logprobs`` of them) with theirs, most likely first."""

    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)


@dataclass
class RequestOutput:
    request_id: str
    prompt_ids: list[int]
    token_ids: list[int]  # generated tokens: EOS excluded, nothing after EOS or a stop string
    text: str | None  # decoded text, stop string removed (None without a tokenizer)
    finish_reason: str  # "stop" | "length" | "abort"
    # forward_passes, commit_passes, tokens, tpf, tokens_per_s, ttft_s, time_per_block_s, wall_s
    stats: dict = field(default_factory=dict)
    logprobs: list[TokenLogprob] | None = None  # one per token of token_ids, when asked for
    # one per prompt token (the first None: nothing before it), when asked for (clover.engine.scoring)
    prompt_logprobs: list[TokenLogprob | None] | None = None
    stop_reason: int | str | None = None  # the stop token id or stop string that ended it (vLLM's field)
    stop_logprob: TokenLogprob | None = None  # that stop token's log-probability, when logprobs are asked


@dataclass
class StepEvent:
    """One denoise pass of one request: the positions it committed (or edited), absolute."""

    request_id: str
    block_start: int  # absolute position of the active block's first token
    positions: list[int]
    tokens: list[int]
    step: int  # index of the pass inside the block, from 0


@dataclass
class TextDelta:
    """Newly final text: sent once a block is finished and EOS / stop strings are handled."""

    request_id: str
    token_ids: list[int]
    text: str
    logprobs: list[TokenLogprob] | None = None  # one per token of token_ids, when asked for


@dataclass
class Finished:
    request_id: str
    output: RequestOutput


Event = StepEvent | TextDelta | Finished
