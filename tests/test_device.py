"""``--device`` / ``--dtype`` on every command that loads a model, ``LLM(device=, dtype=)``, and a
bf16 model through the engine, ``LLM`` and the server on the CPU."""

from __future__ import annotations

import httpx
import pytest
import torch

from clover.api.loading import load_model_dir
from clover.cli import build_parser, main
from clover.ops.device import resolve_device, resolve_dtype

# every command that loads a model, with the arguments it needs to parse
COMMANDS = [
    ["serve"],
    ["generate", "hi"],
    ["chat"],
    ["eval", "airspace"],
    ["agent"],
    *[["bench", b] for b in ("decode", "context", "decisions", "serve", "twin", "agent", "quant")],
]


@pytest.fixture()
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_auto_is_cpu_in_the_checkpoint_dtype_without_a_gpu(no_gpu):
    assert resolve_device("auto") == torch.device("cpu") and resolve_device(None) == torch.device("cpu")
    assert resolve_dtype("auto", torch.device("cpu")) is None  # the checkpoint's own
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("float16", torch.device("cpu")) == torch.float16
    with pytest.raises(ValueError, match="no CUDA GPU is visible"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        resolve_device("gpu")
    with pytest.raises(ValueError, match="unknown dtype 'fp8'"):
        resolve_dtype("fp8", torch.device("cpu"))


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a))
def test_every_loading_command_takes_device_and_dtype(argv):
    args = build_parser().parse_args([*argv, "--device", "cpu", "--dtype", "bfloat16"])
    assert (args.device, args.dtype) == ("cpu", "bfloat16")


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a))
def test_cuda_without_a_gpu_is_one_line_before_anything_loads(argv, no_gpu, monkeypatch, capsys):
    import clover.api.loading
    import clover.server.app

    def loaded(*a, **k):
        raise AssertionError("a model was loaded")

    import clover.api.llm
    import clover.commands.common
    import clover.commands.serve

    for module in (clover.api.loading, clover.commands.common):
        monkeypatch.setattr(module, "load_model_dir", loaded)
    for module in (clover.api.loading, clover.api.llm, clover.commands.serve):
        monkeypatch.setattr(module, "load_engine", loaded)
    with pytest.raises(SystemExit) as e:
        main([*argv, "--device", "cuda"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and "--device cuda: no CUDA GPU is visible" in err and len(err.splitlines()) == 1


def test_quantized_checkpoint_stays_on_the_cpu_under_auto(tmp_path, monkeypatch):
    from clover.model.io import CheckpointError, save_model
    from clover.model.quant import quantize_model
    from tests.model.helpers import make_model

    save_model(quantize_model(make_model().float(), 8), tmp_path / "q")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # auto would pick the GPU
    model, _ = load_model_dir(tmp_path / "q", 1)
    assert model.lm_head.weight.device.type == "cpu" and model.lm_head.weight.dtype == torch.float32
    with pytest.raises(CheckpointError, match="runs on the CPU only"):
        load_model_dir(tmp_path / "q", 1, device="cuda")


def test_llm_in_bf16_generates_and_refuses_a_device_for_a_loaded_engine():
    from clover import LLM

    llm = LLM(threads=1, device="cpu", dtype="bfloat16")
    assert llm.engine.model.lm_head.weight.dtype == torch.bfloat16
    out = llm.generate("recall drone 17", max_tokens=12, policy="threshold", ignore_eos=True)[0]
    assert len(out.token_ids) == 12 and out.stats["forward_passes"] >= 1
    r = llm.chat([{"role": "user", "content": "recall drone 17"}], max_tokens=16)
    assert r["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls")
    with pytest.raises(TypeError, match="device, dtype and compile apply when LLM loads"):
        LLM(llm.engine, dtype="float32")
    with pytest.raises(TypeError, match="device, dtype and compile apply when LLM loads"):
        LLM(llm.engine, compile=True)


def test_server_serves_a_bf16_model():
    from clover.server import create_app
    from clover.server.live import LiveServer

    app = create_app(None, threads=1, device="cpu", dtype="bfloat16")
    assert app.state.clover.model.lm_head.weight.dtype == torch.bfloat16
    with LiveServer(app) as srv:
        r = httpx.post(
            f"{srv.url}/v1/chat/completions",
            timeout=60,
            json={"model": "clover", "messages": [{"role": "user", "content": "recall drone 17"}], "max_tokens": 16},
        )
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] > 0
