"""``clover serve --prefill-chunk`` reaches the engine, and the long-prompt benchmark
(``clover.bench.serve_gaps``) measures streams' gaps alone, under a prefill and after it."""

from __future__ import annotations

import pytest

from clover.bench.serve_gaps import Stream, measure, measure_long_prompt, model_for
from clover.cli import build_parser


def test_serve_passes_prefill_chunk_to_the_engine(monkeypatch):
    import clover.commands.serve as serve

    seen = {}

    def fake_load_engine(*args, **kwargs):
        seen["args"] = {**dict(enumerate(args)), **kwargs}
        raise ValueError("stop here")  # cmd_serve reports it and returns 2, before any server starts

    monkeypatch.setattr(serve, "load_engine", fake_load_engine)
    for argv, want in (
        (["serve", "--port", "0", "--prefill-chunk", "64"], 64),
        (["serve", "--port", "0"], 512),
        (["serve", "--port", "0", "--prefill-chunk", "0"], 0),
    ):
        args = build_parser().parse_args(argv)
        assert args.func(args) == 2
        assert seen["args"]["prefill_chunk"] == want
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--prefill-chunk", "-1"])


def test_gaps_within_and_over_a_window():
    s = Stream([0.0, 1.0, 1.5, 4.0, 4.25])
    assert s.gaps_within(0.5, 4.0) == [0.5, 2.5]
    assert s.gaps_over(2.0, 3.0) == [2.5]
    assert s.gaps_over(1.2, 4.1) == [0.5, 2.5, 0.25]


def test_a_model_too_short_for_the_prompt_is_replaced_by_random_weights_of_its_shape(tiny_model):
    same, note = model_for(tiny_model, 1000, 32)
    assert same is tiny_model and "own weights" in note
    other, note = model_for(tiny_model, 3000, 32)
    assert other.config.max_position_embeddings == 3032 and "random weights" in note
    assert other.config.replace(max_position_embeddings=2048) == tiny_model.config
    assert [p.shape for p in other.parameters()] == [p.shape for p in tiny_model.parameters()]


def test_measure_reports_the_gaps_alone_and_under_a_long_prompt(tiny_model, tokenizer):
    figures = measure(tiny_model, tokenizer, prefill_chunk=16, streams=2, long_prompt=300, long_tokens=8)
    assert figures["prefill_chunk"] == 16 and figures["clock"] == "wall"
    assert figures["gaps_alone"] >= 2 * 4 and figures["gaps_long_prompt"] >= 2  # every stream, each window
    assert 0 < figures["median_gap_ms_alone"] <= figures["max_gap_ms_alone"]
    assert figures["max_gap_ms_long_prompt"] > 0 and figures["max_gap_ms_long_first_block"] > 0
    assert 0 < figures["long_prompt_prefill_s"] < figures["long_prompt_ttft_s"]
    assert figures["gap_ratio"] == figures["max_gap_ms_long_prompt"] / figures["max_gap_ms_alone"]


def test_measure_on_the_cpu_clock(tiny_model, tokenizer):
    figures = measure(tiny_model, tokenizer, prefill_chunk=0, streams=2, long_prompt=300, long_tokens=8, clock="cpu")
    assert figures["clock"] == "cpu" and figures["prefill_chunk"] == 0
    assert 0 < figures["max_gap_ms_alone"] and 0 < figures["long_prompt_prefill_s"] < figures["long_prompt_ttft_s"]


def test_the_long_prompt_figures_hold_the_chunked_run_and_the_whole_prompts(tiny_model, tokenizer):
    """``clover bench serve --long-prompt``'s figures: the run in chunks at the top level, the run
    with the prompt whole under ``whole_prompt``, and what they ran on."""
    figures = measure_long_prompt(tiny_model, tokenizer, 300, 2, 16, "wall", 1)
    assert (figures["long_prompt"], figures["streams"], figures["threads"]) == (300, 2, 1)
    assert figures["prefill_chunk"] == 16 and figures["whole_prompt"]["prefill_chunk"] == 0
    assert "own weights" in figures["weights"] and figures["block_size"] == tiny_model.config.block_size
    assert figures["device"] == "cpu" and figures["dtype"] == str(tiny_model.lm_head.weight.dtype)[6:]
    assert figures["max_gap_ms_long_prompt"] > 0 and figures["whole_prompt"]["max_gap_ms_long_prompt"] > 0
