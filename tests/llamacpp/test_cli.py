"""``clover generate``, ``chat`` and ``serve`` on the llama.cpp back end (``--backend llama.cpp
--model FILE.gguf``, or a .gguf path alone): the same tokens as the PyTorch engine, the same
grammars and OpenAI API; and a one-line message for each wrong combination."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clover.cli import main

BUNDLED = Path(__file__).parents[2] / "clover" / "assets" / "default"


@pytest.fixture(scope="module")
def gguf(tmp_path_factory, libclover):
    from clover.export.gguf import export_gguf

    out = tmp_path_factory.mktemp("cli") / "clover.gguf"
    export_gguf(BUNDLED, out, "f32")
    return out


def _json_run(capsys, argv) -> dict:
    with pytest.raises(SystemExit) as e:
        main(argv)
    out, err = capsys.readouterr()
    assert e.value.code == 0, err
    return json.loads(out)


def _fails(capsys, argv) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    code, err = e.value.code, capsys.readouterr().err
    if isinstance(code, str):
        code, err = 1, err + code
    assert code not in (0, None) and "Traceback" not in err
    return err


@pytest.mark.parametrize("extra", [["--policy", "ar"], [], ["--regex", "[a-z ]+"]])
def test_generate_on_llama_cpp_writes_what_torch_writes(gguf, capsys, extra):
    """Greedy ``ar``, the default policy, and a grammar: the same tokens from the .gguf as from the directory."""
    base = ["generate", "recall drone 17", "--chat", "--threads", "1", "--max-tokens", "40", "--json", *extra]
    ref = _json_run(capsys, [*base, "--model", str(BUNDLED)])
    got = _json_run(capsys, [*base, "--model", str(gguf), "--backend", "llama.cpp"])
    implied = _json_run(capsys, [*base, "--model", str(gguf)])  # a .gguf path implies the back end
    assert got["token_ids"] == ref["token_ids"] == implied["token_ids"]
    assert got["tool_calls"] == ref["tool_calls"]


def test_chat_on_llama_cpp(gguf, capsys, monkeypatch):
    from rich.console import Console

    lines = ["recall drone 17"]

    def scripted(self, prompt="", **kw):
        if not lines:
            raise EOFError
        return lines.pop(0)

    monkeypatch.setattr(Console, "input", scripted)
    with pytest.raises(SystemExit) as e:
        main(["chat", str(gguf), "--threads", "1", "--max-tokens", "64"])
    assert e.value.code == 0
    assert "tool call recall_drone" in capsys.readouterr().out


def test_serve_on_llama_cpp(gguf):
    """The OpenAI API over a GGUF file: a tool call from a chat completion, as the PyTorch engine's."""
    import openai

    from clover.airspace.tools import AIRSPACE_TOOLS
    from clover.server import create_app
    from clover.server.live import LiveServer

    tools = [{"type": "function", "function": t["function"] if "function" in t else t} for t in AIRSPACE_TOOLS]
    answers = {}
    for name, kw in (("torch", {"backend": "torch"}), ("llama.cpp", {"backend": "llama.cpp"})):
        model = BUNDLED if name == "torch" else gguf
        with LiveServer(create_app(str(model), threads=1, **kw)) as srv:
            client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=120)
            r = client.chat.completions.create(
                model="clover",
                messages=[{"role": "user", "content": "recall drone 17"}],
                tools=tools,
                max_tokens=64,
                temperature=0,
            )
            msg = r.choices[0].message
            answers[name] = (msg.content, [(c.function.name, c.function.arguments) for c in msg.tool_calls or []])
    assert answers["llama.cpp"] == answers["torch"]
    assert answers["torch"][1], answers


def test_wrong_combinations_are_one_line(tmp_path, capsys):
    """No library needed: each refusal comes before anything loads."""
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF")
    gen = ["generate", "hi", "--max-tokens", "2"]
    assert "--backend llama.cpp" in _fails(capsys, [*gen, "--model", str(fake), "--backend", "torch"])
    err = _fails(capsys, [*gen, "--model", str(BUNDLED), "--backend", "llama.cpp"])
    assert "clover export gguf" in err
    assert "clover export gguf" in _fails(capsys, [*gen, "--backend", "llama.cpp"])
    assert "--compile" in _fails(capsys, [*gen, "--model", str(fake), "--compile"])
    assert "drop --dtype" in _fails(capsys, [*gen, "--model", str(fake), "--dtype", "bfloat16"])
    assert "no such file" in _fails(capsys, [*gen, "--model", str(tmp_path / "none.gguf")])
    with pytest.raises(SystemExit):  # the CLI's own check (no GPU here) or the back end's (CPU only)
        main([*gen, "--model", str(fake), "--device", "cuda"])


def test_a_missing_library_says_make_llama_cpp(tmp_path, capsys, monkeypatch):
    from clover.backends import llamacpp

    monkeypatch.setenv("CLOVER_LLAMACPP_LIB", str(tmp_path / "libclover.so"))
    llamacpp.load_library.cache_clear()
    try:
        fake = tmp_path / "m.gguf"
        fake.write_bytes(b"GGUF")
        err = _fails(capsys, ["generate", "hi", "--model", str(fake)])
        assert "make llama-cpp" in err and len(err.strip().splitlines()) == 1
    finally:
        llamacpp.load_library.cache_clear()
