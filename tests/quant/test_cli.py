"""clover quantize, the commands that take --model on its output, clover info --bits, clover
bench quant (tiny settings) and clover serve on a quantized checkpoint."""

import json
import os
import subprocess
import sys

import pytest

from clover.data import default_model_dir

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def clover(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "clover", *args], capture_output=True, text=True, timeout=timeout, env=ENV
    )


@pytest.fixture(scope="module")
def q4(tmp_path_factory):
    out = tmp_path_factory.mktemp("ck") / "q4"
    r = clover("quantize", "--model", str(default_model_dir()), "--out", str(out), "--bits", "4")
    assert r.returncode == 0, r.stderr
    assert "4-bit weights (groups of 128)" in r.stdout
    return out


def test_quantize_writes_a_checkpoint_with_its_tokenizer_and_header(q4):
    assert (q4 / "tokenizer.json").exists() and (q4 / "model.safetensors").exists()
    q = json.loads((q4 / "config.json").read_text())["quantization"]
    assert q["bits"] == 4 and q["group_size"] == 128 and q["scheme"] == "asymmetric" and len(q["modules"]) == 51
    full = (default_model_dir() / "model.safetensors").stat().st_size
    assert (q4 / "model.safetensors").stat().st_size < 0.35 * full


def test_quantize_refuses_what_it_cannot_do(q4, tmp_path):
    r = clover("quantize", "--model", str(q4), "--out", str(tmp_path / "x"), "--bits", "8")
    assert r.returncode != 0 and "already quantized" in r.stderr
    r = clover(
        "quantize",
        "--model",
        str(default_model_dir()),
        "--out",
        str(tmp_path / "y"),
        "--bits",
        "4",
        "--group-size",
        "48",
    )
    assert r.returncode != 0 and "group size 48 does not divide" in r.stderr


def test_generate_and_eval_load_a_quantized_checkpoint(q4):
    msg = "Create a no-fly zone called Alpha at 47.1, 8.5 with radius 500 m"
    r = clover("generate", "--model", str(q4), "--chat", msg, "--max-tokens", "64")
    assert r.returncode == 0, r.stderr
    assert "tool_call" in r.stdout or r.stdout.strip()


def test_info_on_a_quantized_checkpoint_and_a_preset(q4):
    r = clover("info", "--model", str(q4), "--json")
    d = json.loads(r.stdout)
    assert d["quantization"] == {"bits": 4, "group_size": 128, "scheme": "asymmetric"}
    assert d["memory"]["bits"] == 4
    for bits, fits16, fits24 in (("4", False, True), ("8", False, False)):
        d = json.loads(clover("info", "--preset", "qwen3.6-35b-a3b", "--bits", bits, "--json").stdout)["memory"]
        assert d["context"] == 8192
        assert d["gpus"]["16GiB"]["fits"] is fits16 and d["gpus"]["24GiB"]["fits"] is fits24
        assert "layers' experts would have to stay in host memory" in d["gpus"]["16GiB"]["not_fitting"]
        # int4: 35 B parameters at about half a byte, plus bf16 embeddings and head
        assert 15 * 2**30 < d["weight_bytes"] < (20 if bits == "4" else 36) * 2**30
        assert 0.1 * 2**30 < d["cache_bytes"] < 0.5 * 2**30
    r = clover("info", "--preset", "qwen3.6-35b-a3b", "--bits", "4")
    assert "fits a 24 GiB GPU" in r.stdout and "16 GiB:" in r.stdout


def test_train_refuses_a_quantized_init(q4, tmp_path):
    r = clover("train", "--recipe", "airspace", "--init-from", str(q4), "--out", str(tmp_path / "run"), "--steps", "1")
    assert r.returncode != 0 and "quantized checkpoint" in r.stderr


def test_bench_quant_writes_its_figures(tmp_path):
    out = tmp_path / "q.json"
    r = clover(
        "bench",
        "quant",
        "--no-medium",
        "--n",
        "2",
        "--max-tokens",
        "4",
        "--speed-prompts",
        "1",
        "--batch",
        "2",
        "--json",
        str(out),
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(out.read_text())["figures"]
    assert set(d["bytes"]["bundled"]) == {"fp32", "bf16", "int8", "int4"}
    assert set(d["tokens_per_s"]["bundled"]) == {"fp32", "int8", "int4"}
    assert set(d["tokens_per_s"]["bundled"]["int4"]) == {"ar@1", "ar@2", "threshold@1", "threshold@2"}
    assert set(d["exact_match"]) == {"fp32", "int8", "int4"} and set(d["exact_match"]["int8"]) == {"ar", "threshold"}
    assert d["bytes"]["bundled"]["int4"] < d["bytes"]["bundled"]["int8"] < d["bytes"]["bundled"]["bf16"]


def test_serve_serves_a_quantized_model(q4):
    import openai

    from clover.server import create_app
    from clover.server.live import LiveServer

    with LiveServer(create_app(str(q4), max_batch_size=2, threads=1)) as srv:
        c = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=120)
        assert [m.id for m in c.models.list().data]
        r = c.chat.completions.create(
            model="clover",
            messages=[{"role": "user", "content": "Create a no-fly zone called Alpha at 47.1, 8.5 with radius 500 m"}],
            max_tokens=64,
        )
        choice = r.choices[0]
        assert choice.message.content or choice.message.tool_calls
        assert r.usage.completion_tokens > 0
