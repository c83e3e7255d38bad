"""``clover bench llama.cpp`` on the bundled model alone, without stock llama.cpp (no libllama
build in CI) and with few prompts: every JSON key the issue lists, and the f32 figures that are
exact by construction (the logits within 1e-4, the same committed tokens as PyTorch)."""

from __future__ import annotations

import json

import pytest

from clover.cli import main


def test_bench_llama_cpp_small(libclover, tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = [
        "bench",
        "llama.cpp",
        "--no-stock",
        "--no-medium",
        "--n",
        "4",
        "--same",
        "2",
        "--same-max-tokens",
        "24",
        "--reps",
        "2",
        "--speed-prompts",
        "1",
        "--max-tokens",
        "8",
        "--work",
        str(tmp_path),
        "--json",
        str(out),
    ]
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code in (0, None), capsys.readouterr().err
    fig = json.loads(out.read_text())["figures"]
    for key in (
        "pass_ms",
        "pass_efficiency",
        "llamacpp_tokens_per_s",
        "torch_tokens_per_s",
        "twin_llamacpp_tokens_per_s",
        "speedup_vs_twin",
        "max_rel_logit_err_f32",
        "exact_match",
    ):
        assert key in fig, key
    passes = fig["pass_ms"]["bundled"]
    assert set(passes["clover_llamacpp"]) == {"f32", "q8_0", "q4_k"} and set(passes["clover_torch"]) == {"f32"}
    assert set(passes["clover_llamacpp"]["f32"]) == {"1", "8", "32"}
    assert fig["max_rel_logit_err_f32"]["bundled"] < 1e-4
    assert set(fig["exact_match"]) == {"f32", "q8_0", "q4_k"}
    assert fig["same_tokens_f32"] == {"ar": {"same": 2, "of": 2}, "default": {"same": 2, "of": 2}}
    assert set(fig["llamacpp_tokens_per_s"]["bundled"]) == {"ar", "default"}
