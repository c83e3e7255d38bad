"""The command line and benchmark entry points, on a tiny checkpoint (smoke tests)."""

import argparse
import json

import pytest
import torch

import clover.commands.bench
import clover.commands.chat
import clover.commands.common
import clover.commands.generate
from clover.model import CloverForBlockDiffusion, preset
from clover.model.io import save_model


def main(argv):
    """``clover ARGV`` with only the engine's sub-commands (the other packages' are not needed)."""
    p = argparse.ArgumentParser(prog="clover")
    sub = p.add_subparsers(required=True)
    clover.commands.generate.register(sub)
    clover.commands.chat.register(sub)
    clover.commands.bench.register(sub)
    args = p.parse_args(argv)
    raise SystemExit(args.func(args) or 0)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from clover.data.tokenizer import CloverTokenizer, train_tokenizer

    texts = ['<tool_call>{"name": "recall_drone", "arguments": {"drone_id": "D-17"}}</tool_call> hello drone'] * 20
    tok = CloverTokenizer(train_tokenizer(texts, vocab_size=300))
    torch.manual_seed(0)
    cfg = preset("tiny", vocab_size=tok.vocab_size, mask_token_id=tok.mask_token_id, eos_token_id=tok.eos_token_id)
    d = tmp_path_factory.mktemp("ckpt")
    save_model(CloverForBlockDiffusion(cfg), d)
    tok.save(d)
    return d, tok


def _run(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0
    return capsys.readouterr().out


def test_generate_prints_json(checkpoint, capsys):
    d, _ = checkpoint
    out = json.loads(_run(["generate", "hello drone", "--model", str(d), "--max-tokens", "12", "--json"], capsys))
    assert len(out["token_ids"]) <= 12 and out["finish_reason"] in ("stop", "length")
    assert out["stats"]["forward_passes"] >= 1
    out = json.loads(_run(["generate", "hello", "--chat", "--model", str(d), "--max-tokens", "5", "--json"], capsys))
    assert "tool_calls" in out
    sys_out = json.loads(
        _run(
            ["generate", "hello", "--chat", "--system", "Be brief.", "--model", str(d), "--max-tokens", "5", "--json"],
            capsys,
        )
    )
    assert "tool_calls" in sys_out
    with pytest.raises(SystemExit, match="--system needs --chat"):
        main(["generate", "hello", "--system", "x", "--model", str(d)])


def test_generate_json_schema_constrains_the_output(checkpoint, capsys, tmp_path):
    d, _ = checkpoint
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "kind": {"enum": ["a", "b"]}},
        "required": ["ok", "kind"],
    }
    f = tmp_path / "s.json"
    f.write_text(json.dumps(schema))
    for spec in (json.dumps(schema), str(f)):
        out = json.loads(
            _run(["generate", "hi", "--model", str(d), "--max-tokens", "40", "--json", "--json-schema", spec], capsys)
        )
        assert out["finish_reason"] == "stop"  # nothing but these two keys can come out: the object must close
        v = json.loads(out["text"])
        assert isinstance(v["ok"], bool) and v["kind"] in ("a", "b")
    with pytest.raises(SystemExit, match="not a usable schema"):
        main(["generate", "hi", "--model", str(d), "--json-schema", '{"type": "weird"}'])
    with pytest.raises(SystemExit, match="not a usable JSON"):
        main(["generate", "hi", "--model", str(d), "--json-schema", "{nope"])


def test_generate_refuses_bad_settings(checkpoint):
    d, _ = checkpoint
    with pytest.raises(SystemExit, match="threshold"):
        main(["generate", "hi", "--model", str(d), "--threshold", "2"])


def test_missing_or_corrupt_checkpoint_is_a_message_not_a_traceback(checkpoint, tmp_path, capsys):
    from clover.cli import main as clover_main

    with pytest.raises(SystemExit) as e:
        clover_main(["generate", "hi", "--model", str(tmp_path / "nowhere")])
    assert e.value.code == 2 and "nowhere: no such directory" in capsys.readouterr().err
    d, _ = checkpoint
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in d.iterdir():
        (bad / f.name).write_bytes(f.read_bytes()[:100] if f.suffix == ".safetensors" else f.read_bytes())
    with pytest.raises(SystemExit) as e:
        clover_main(["generate", "hi", "--model", str(bad)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("clover: ") and "Traceback" not in err


def test_serve_refuses_a_port_out_of_range(capsys):
    from clover.cli import main as clover_main

    with pytest.raises(SystemExit) as e:
        clover_main(["serve", "--port", "99999"])
    assert e.value.code == 2 and "out of range" in capsys.readouterr().err


def test_bench_decode_writes_its_figures(checkpoint, tmp_path, capsys):
    d, tok = checkpoint
    prompts = tmp_path / "p.jsonl"
    gold = [{"name": "recall_drone", "arguments": {"drone_id": "D-17"}}]
    prompts.write_text("\n".join(json.dumps({"prompt": f"hello drone {i}", "gold_calls": gold}) for i in range(3)))
    out = tmp_path / "decode.json"
    argv = ["bench", "decode", "--model", str(d), "--prompts", str(prompts), "--n", "3", "--max-tokens", "8"]
    _run(argv + ["--batch-sizes", "1,2", "--thresholds", "0.9", "--json", str(out), "--no-hf"], capsys)
    result = json.loads(out.read_text())
    fig = result["figures"]
    # the full table, then the two summaries the docs quote (README's, then one row per batch size)
    assert [t["columns"][0] for t in result["tables"]] == ["batch", "decoding", "batch"]
    summary = {r[0]: r for r in result["tables"][1]["rows"]}
    assert summary["ar (one position per pass)"][1] == f"{fig['ar_tokens_per_s']:.0f}"
    assert [r[0] for r in result["tables"][2]["rows"]] == ["1", "2"]
    for k in (
        "default_policy",
        "default_exact_match",
        "default_tpf",
        "default_tokens_per_s",
        "speedup_vs_ar",
        "ar_tokens_per_s",
        "threshold_tokens_per_s",
        "threshold_tpf",
        "ar_exact_match",
        "threshold_exact_match",
        "hf_tokens_per_s",
    ):
        assert k in fig
    from clover.engine.policies import DEFAULT_POLICY

    assert fig["default_policy"] == DEFAULT_POLICY and fig["headline"] == "default"
    assert 0 <= fig["ar_exact_match"] <= 1 and fig["default_tpf"] > 0 and fig["fused_same_tokens"]
    assert fig["speedup_vs_ar"] == fig["default_tokens_per_s"] / fig["ar_tokens_per_s"]
    assert set(fig["by_batch"]["1"]) == {"ar", "default", "unfused"}


def test_transformers_baseline_has_the_clovers_shape():
    from clover.bench.decode import hf_twin, run_hf

    cfg = preset("tiny")
    hf = hf_twin(cfg)
    clover_params = CloverForBlockDiffusion(cfg).num_parameters()["total_params"]
    hf_params = sum(p.numel() for p in hf.parameters())
    assert abs(hf_params - clover_params) / clover_params < 0.02  # Clover adds a few per-head parameters
    # a batch runs to its longest row; each row counts its own length (3 + 2), not 2 x 3
    assert run_hf(hf, [([1, 2, 3], None), ([4, 5], None)], [3, 2], batch=2)["tokens"] == 5


def test_bench_context_writes_its_figures(tmp_path, capsys):
    out = tmp_path / "context.json"
    _run(["bench", "context", "--preset", "tiny", "--lengths", "64,128", "--tokens", "8", "--json", str(out)], capsys)
    fig = json.loads(out.read_text())["figures"]
    assert fig["context_lengths"] == [64, 128]
    for k in ("clover_ms_per_token", "attention_ms_per_token", "clover_cache_bytes", "attention_cache_bytes"):
        assert len(fig[k]) == 2
    assert fig["clover_cache_bytes"][1] < fig["attention_cache_bytes"][1]


def test_chat_offers_the_airspace_tools_only_to_a_model_trained_for_them():
    from clover.airspace.extraction_tools import EXTRACTION_TOOLS as AIRSPACE_TOOLS

    m = CloverForBlockDiffusion(preset("tiny"))
    args = argparse.Namespace(tools="auto")
    assert clover.commands.common.offered_tools(args, m) is None
    m.config.extra = {"recipe": "airspace"}  # as the bundled default records it
    assert clover.commands.common.offered_tools(args, m) == AIRSPACE_TOOLS
    assert clover.commands.common.offered_tools(argparse.Namespace(tools="none"), m) is None
    assert clover.commands.common.offered_tools(argparse.Namespace(tools="airspace"), None) == AIRSPACE_TOOLS


def test_generate_ends_its_text_with_a_newline_and_counts_in_words(checkpoint, capsys):
    """The streamed text ends with a newline (a shell prompt after it starts on its own line);
    the stats say "1 pass", not "1 passes"."""
    d, _ = checkpoint
    with pytest.raises(SystemExit):
        main(["generate", "hello", "--model", str(d), "--max-tokens", "1", "--policy", "ar"])
    out, err = capsys.readouterr()
    assert out.endswith("\n")
    assert "1 pass," in err and "1 passes" not in err and ("1 token," in err or "0 tokens," in err)
    assert clover.commands.common.count(1, "pass", "passes") == "1 pass"
    assert clover.commands.common.count(2, "model call") == "2 model calls"


def test_cuda_graphs_are_refused_off_a_gpu(checkpoint, capsys):
    """``--cuda-graphs`` with the model on the CPU: a one-line exit naming the flag, before loading."""
    from clover.cli import main as clover_main

    d, _ = checkpoint
    for argv in (["generate", "hi", "--model", str(d)], ["bench", "decode", "--random", "--no-hf"], ["serve"]):
        with pytest.raises(SystemExit) as e:
            clover_main(argv + ["--cuda-graphs", "--device", "cpu"])
        err = capsys.readouterr().err
        assert e.value.code == 2 and "--cuda-graphs: CUDA graphs need --device cuda (the model runs on cpu)" in err
    for cmd in ("generate", "serve"):
        with pytest.raises(SystemExit):
            clover_main([cmd, "--help"])
        assert "--cuda-graphs, --no-cuda-graphs" in capsys.readouterr().out


def test_bench_decode_graph_figures(checkpoint, monkeypatch):
    """``clover bench decode --cuda-graphs``' figures, the graphs replayed by their CPU stand-in:
    the default policy at each batch size, against the eager run's tokens."""
    import clover.engine.engine
    from clover.bench.decode import DEFAULT_NAME, graph_figures, run_engine
    from clover.engine import SamplingParams
    from clover.engine.graphs import DecodeGraphs, EagerGraph
    from clover.model.io import load_model

    d, tok = checkpoint
    model = load_model(d)
    stand_in = lambda m, rows: DecodeGraphs(m, rows, min_width=16, capture=EagerGraph)
    monkeypatch.setattr(clover.engine.engine, "DecodeGraphs", stand_in)
    cases = [(tok.encode(f"hello drone {i}"), None) for i in range(3)]
    configs = {DEFAULT_NAME: SamplingParams(max_tokens=12, ignore_eos=True)}
    by_batch = {b: {DEFAULT_NAME: run_engine(model, tok, cases[: max(b, 1)], configs[DEFAULT_NAME], b)} for b in (1, 3)}
    fig = graph_figures(model, tok, cases, configs, by_batch, [1, 3], speed_prompts=1)
    assert set(fig) == {1, 3}
    for r in fig.values():
        assert r["same_tokens"] == 1.0 and r["graph_passes"] > 0 and r["eager_passes"] == 0 and r["speedup"] > 0
