"""What a new user types after reading the README: every mistake gets a one-line message and a
nonzero exit, never a traceback (``clover.cli.main`` in this process, on the bundled model)."""

import argparse
import io
import json
import shutil
import socket
from pathlib import Path

import pytest

import clover.commands.generate
from clover.cli import main

BUNDLED = Path(__file__).parents[1] / "clover" / "assets" / "default"


def _fails(argv, capsys) -> tuple[int, str]:
    """``clover ARGV`` must exit nonzero; returns (exit code, the message it gave)."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    code = e.value.code
    err = capsys.readouterr().err
    if isinstance(code, str):  # raise SystemExit("clover: ..."): Python prints it, exit status 1
        code, err = 1, err + code
    assert code not in (0, None), err
    assert "Traceback" not in err
    return code, err


def _model_copy(tmp_path, files: dict[str, str]) -> Path:
    """The bundled model with some of its files overwritten."""
    d = tmp_path / "model"
    shutil.copytree(BUNDLED, d, ignore=shutil.ignore_patterns("train_log*"))
    for name, text in files.items():
        (d / name).write_text(text)
    return d


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("clover ")


def test_the_command_line_does_not_import_the_web_stack():
    """Training needs no FastAPI: a GPU box with torch and tokenizers alone runs ``clover train``
    (the server's names are imported on first use)."""
    import subprocess
    import sys

    code = (
        "import sys, clover.cli; clover.cli.build_parser(); import clover.commands.train, clover.server; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'pydantic', 'uvicorn', 'starlette')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    from clover.server import create_app  # still importable by name

    assert callable(create_app)


def test_the_parser_does_not_import_torch():
    """``clover --help``, ``clover tools`` and the benchmark list build the whole parser: torch,
    transformers and the web stack load only when a command runs (a second, not four)."""
    import subprocess
    import sys

    heavy = ("torch", "transformers", "fastapi", "uvicorn")
    code = (
        "import sys, clover.cli; clover.cli.build_parser(); "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_info_describes_the_bundled_model_unless_told_otherwise(capsys):
    """Bare ``clover info`` describes the model ``clover serve`` runs, not a preset shape."""
    with pytest.raises(SystemExit) as e:
        main(["info", "--json"])
    assert e.value.code == 0
    info = json.loads(capsys.readouterr().out)
    bundled = json.loads((BUNDLED / "config.json").read_text())
    assert info["preset"] is None and Path(info["model"]).resolve() == BUNDLED.resolve()
    assert info["vocab_size"] == bundled["vocab_size"] and info["layer_types"] == bundled["layer_types"]
    with pytest.raises(SystemExit):
        main(["info", "--preset", "small", "--json"])
    assert json.loads(capsys.readouterr().out)["preset"] == "small"
    assert "not both" in _fails(["info", "--preset", "small", "--model", str(BUNDLED)], capsys)[1]


def test_info_with_an_unknown_preset_or_a_missing_model(tmp_path, capsys):
    assert "unknown preset 'nope'" in _fails(["info", "--preset", "nope"], capsys)[1]
    assert "no config.json" in _fails(["info", "--model", str(tmp_path / "nowhere")], capsys)[1]
    bad = _model_copy(tmp_path, {"config.json": "{not json"})
    assert "not valid JSON" in _fails(["info", "--model", str(bad), "--json"], capsys)[1]
    err = _fails(["generate", "hi", "--model", str(bad), "--threads", "1"], capsys)[1]
    assert err.count("config.json") == 1 and "not valid JSON" in err  # the path named once


def test_generate_reads_the_prompt_from_stdin_with_a_dash(monkeypatch, capsys):
    seen = []
    encode = clover.commands.generate.encode_prompt
    monkeypatch.setattr(
        clover.commands.generate, "encode_prompt", lambda tok, text: seen.append(text) or encode(tok, text)
    )
    monkeypatch.setattr("sys.stdin", io.StringIO("recall drone 17\n"))
    with pytest.raises(SystemExit) as e:
        main(["generate", "-", "--chat", "--threads", "1", "--max-tokens", "4", "--json"])
    assert e.value.code == 0
    assert "recall drone 17" in seen[0]  # not the prompt "-"
    assert "token_ids" in json.loads(capsys.readouterr().out)


def test_a_corrupt_tokenizer_is_a_message(tmp_path, capsys):
    from clover.data.tokenizer import CloverTokenizer

    bad = _model_copy(tmp_path, {"tokenizer.json": "{garbage"})
    with pytest.raises(ValueError, match="not a valid tokenizer file"):
        CloverTokenizer.load(bad)
    err = _fails(["generate", "hi", "--model", str(bad), "--threads", "1", "--max-tokens", "4"], capsys)[1]
    assert "tokenizer.json: not a valid tokenizer file" in err
    bad.joinpath("tokenizer.json").write_text(BUNDLED.joinpath("tokenizer.json").read_text())
    bad.joinpath("tokenizer_config.json").write_text("{oops")
    err = _fails(["generate", "hi", "--model", str(bad), "--threads", "1", "--max-tokens", "4"], capsys)[1]
    assert "tokenizer_config.json: not valid JSON" in err


@pytest.mark.parametrize("command", [["generate", "hi"], ["chat"], ["eval", "airspace"], ["serve"]])
def test_threads_must_be_positive(command, capsys):
    for n in ("0", "-1"):
        code, err = _fails([*command, "--threads", n], capsys)
        assert code == 2 and "--threads: must be a positive integer" in err


def test_train_refuses_bad_workers_and_time_budgets(tmp_path):
    for flags, said in (
        (["--workers", "-1"], "--workers must be >= 0"),
        (["--time-budget", "0"], "--time-budget must be > 0 minutes"),
        (["--time-budget", "nan"], "--time-budget must be > 0 minutes"),
    ):
        with pytest.raises(SystemExit, match=said):
            main(["train", "--out", str(tmp_path / "run"), *flags])
    assert not (tmp_path / "run").exists()  # refused before anything is written


def test_json_schema_names_a_missing_file():
    for spec, what in (("schema.json", "no such file"), (str(BUNDLED), "a directory")):
        with pytest.raises(SystemExit, match=f"--json-schema: .*{what}"):
            clover.commands.generate._schema_grammar(spec)
    assert clover.commands.generate._schema_grammar('{"type": "boolean"}') is not None


def test_eval_refuses_bad_settings_before_it_runs(tmp_path, capsys):
    run = [
        "eval",
        "airspace",
        "--n",
        "1",
        "--groups",
        "0",
        "--text",
        "0",
        "--multiturn",
        "0",
        "--threads",
        "1",
        "--json",
    ]
    for extra, msg in (
        (["--threshold", "2"], "threshold must lie in (0, 1]"),
        (["--block-size", "0"], "block_size must be a positive integer"),
        (["--block-size", "1000"], "exceeds this model's max_block_size"),
        (["--policy", "ar,threshold", "--threshold", "0"], "threshold must lie in (0, 1]"),
        (["--cases", str(tmp_path / "none.jsonl")], "--cases: "),
        (["--errors", str(tmp_path / "no" / "dir.jsonl")], "--errors: "),
    ):
        assert msg in _fails(run + extra, capsys)[1], extra
    code, err = _fails(["eval", "airspace", "--n", "-3", "--threads", "1"], capsys)  # was a slice: [:-3]
    assert code == 2 and "--n: must be >= 0" in err
    assert (
        "nothing to evaluate"
        in _fails(
            ["eval", "airspace", "--n", "0", "--groups", "0", "--text", "0", "--multiturn", "0", "--plain", "0"], capsys
        )[1]
    )


def _train(tmp_path, *args):
    return ["train", "--out", str(tmp_path / "run"), "--steps", "1", "--threads", "1", "--no-progress", *map(str, args)]


def test_train_config_file_problems(tmp_path, capsys):
    cfg = tmp_path / "cfg.json"
    assert "No such file" in _fails(_train(tmp_path, "--config", tmp_path / "none.json"), capsys)[1]
    for text, msg in (
        ("{bad", "not valid JSON"),
        ('{"train": []}', "section 'train' must be an object"),
        ('{"data": [1]}', "section 'data' must be an object"),
        ('{"train": {"lr": "fast"}}', "train field 'lr' must be float, got 'fast'"),
        ('{"train": {"warmup": true}}', "train field 'warmup' must be int"),
        ('{"train": {"masking": 5}}', "'masking' must be an object"),
        ('{"train": {"masking": {"bogus": 1}}}', "unknown masking field(s) ['bogus']"),
        ('{"train": {"masking": {"t_min": 2}}}', "need 0 < t_min"),
    ):
        cfg.write_text(text)
        assert msg in _fails(_train(tmp_path, "--config", cfg), capsys)[1], text
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_train_refuses_a_bad_model_override_with_a_message(tmp_path, capsys):
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"model": {"hidden_size": "x"}}')
    assert "hidden_size must be a positive integer" in _fails(_train(tmp_path, "--config", cfg), capsys)[1]


def test_train_output_paths_and_init_from(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    err = _fails(["train", "--out", str(afile), "--steps", "1", "--threads", "1"], capsys)[1]
    assert "--out" in err and "not a directory" in err
    err = _fails(_train(tmp_path, "--export", afile), capsys)[1]
    assert "--export" in err and "not a directory" in err
    err = _fails(_train(tmp_path, "--init-from", tmp_path / "nowhere"), capsys)[1]
    assert "--init-from" in err and "no config.json" in err
    assert not (tmp_path / "run").exists()
    bad = _model_copy(tmp_path, {"tokenizer.json": "{garbage"})
    assert "not a valid tokenizer file" in _fails(_train(tmp_path, "--init-from", bad), capsys)[1]
    assert "--threads must be >= 1" in _fails(_train(tmp_path, "--threads", "0"), capsys)[1]


def test_serve_on_a_port_in_use_or_an_unknown_host(capsys):
    from clover.server.listen import bind_problem

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, err = _fails(["serve", "--port", str(port), "--threads", "1"], capsys)
        assert code == 2 and f"port {port} on 127.0.0.1 is already in use" in err
    assert "not a known host" in bind_problem("nonexistent.invalid", port)


def test_the_model_as_a_positional_like_vllm_serve(tmp_path, capsys, monkeypatch):
    """``clover serve DIR`` (``vllm serve``'s form) and ``clover chat DIR`` name the model as --model does."""
    missing = str(tmp_path / "nowhere")
    code, err = _fails(["serve", missing, "--port", "0"], capsys)
    assert code == 2 and f"{missing}: no such directory" in err
    assert "two models given" in _fails(["serve", missing, "--model", str(BUNDLED)], capsys)[1]
    assert "two models given" in _fails(["chat", missing, "--model", str(BUNDLED)], capsys)[1]
    seen = {}
    import clover.api.loading

    load = clover.api.loading.load_engine
    monkeypatch.setattr(
        "clover.commands.serve.load_engine", lambda model, *a, **kw: seen.setdefault("model", model) and load()
    )
    monkeypatch.setattr("clover.server.app.create_app", lambda engine, **kw: None)
    monkeypatch.setattr("uvicorn.Server.run", lambda self, sockets=None: None)
    with pytest.raises(SystemExit) as e:
        main(["serve", str(BUNDLED), "--port", "0"])
    assert e.value.code == 0 and seen["model"] == str(BUNDLED)


def test_generate_with_a_regex_or_a_choice(capsys):
    import re

    for extra, ok in [
        (["--choice", "yes", "--choice", "no"], lambda t: t in ("yes", "no")),
        (["--regex", r"D-\d{1,3}"], lambda t: re.fullmatch(r"D-\d{1,3}", t)),
    ]:
        with pytest.raises(SystemExit) as e:
            main(["generate", "Recall drone 17.", "--chat", "--threads", "1", "--max-tokens", "6", "--json", *extra])
        assert e.value.code == 0
        out = json.loads(capsys.readouterr().out)
        assert out["finish_reason"] == "stop" and ok(out["text"]), out
    assert "invalid regular expression" in _fails(["generate", "hi", "--regex", "(", "--threads", "1"], capsys)[1]
    assert "not allowed with" in _fails(["generate", "hi", "--regex", "a", "--choice", "b"], capsys)[1]


def test_choice_takes_the_readmes_form_and_the_repeated_one():
    """``--choice A B`` (the README's) and ``--choice A --choice B`` give the same choices."""
    import re

    from clover.cli import build_parser

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    usage = re.search(r"`clover generate PROMPT [^`]*--choice A B[^`]*`", readme)
    assert usage is not None, "the README's generate line lost its --choice A B"
    parse = lambda *argv: build_parser().parse_args(["generate", "Is it?", *argv]).choice
    assert parse("--choice", "A", "B") == parse("--choice", "A", "--choice", "B") == ["A", "B"]
    assert parse("--choice", "yes", "no", "--choice", "maybe") == ["yes", "no", "maybe"]


def test_a_reader_gone_early_is_no_traceback():
    """``clover tools airspace2 --json | head -c 0``: the pipe is closed before the command writes;
    it stops quietly with the shell's SIGPIPE status, as ``yes | head`` does."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "clover", "tools", "airspace2", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.close()  # the reader is gone before the first write (start-up takes longer than this)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err and "Exception ignored" not in err, err


def test_a_bad_max_tokens_is_one_clear_message(capsys):
    err = _fails(["generate", "hi", "--max-tokens", "-3", "--threads", "1"], capsys)[1]
    assert "max_tokens must be an integer >= 0, got -3" in err and "min_tokens" not in err


def test_chat_shows_each_tool_call_once():
    """``clover chat`` on the bundled model: the answer's call is printed once, as a call (the
    live view's raw ``<tool_call>`` markup does not stay on screen above it)."""
    from rich.console import Console

    from clover.airspace.tools import AIRSPACE_TOOLS
    from clover.api.loading import load_model_dir
    from clover.api.structured import tools_grammar
    from clover.commands.chat import run_chat
    from clover.engine import SamplingParams

    class Scripted(Console):
        def __init__(self, lines, **kw):
            super().__init__(**kw)
            self.lines = list(lines)

        def input(self, prompt="", **kw):
            if not self.lines:
                raise EOFError
            return self.lines.pop(0)

    model, tok = load_model_dir(None, 1)
    out = io.StringIO()
    params = SamplingParams(max_tokens=64, grammar=tools_grammar(AIRSPACE_TOOLS))
    assert run_chat(model, tok, params, tools=AIRSPACE_TOOLS, console=Scripted(["recall drone 17"], file=out)) == 0
    text = out.getvalue()
    assert text.count("recall_drone") == 1 and "tool call recall_drone" in text and "<tool_call>" not in text, text


def test_generate_without_chat_on_a_chat_model_points_to_chat(capsys):
    """A bare prompt is continued as plain text; when the model writes nothing or chat markup
    after it (a model trained on chats only), the user is told to try --chat."""
    with pytest.raises(SystemExit) as e:
        main(["generate", "recall drone 17", "--threads", "1", "--max-tokens", "16"])
    assert e.value.code == 0
    out, err = capsys.readouterr()
    assert ("try --chat" in err) == (out.strip() == "" or "tool_call>" in out), (out, err)
    with pytest.raises(SystemExit):
        main(["generate", "recall drone 17", "--chat", "--threads", "1", "--max-tokens", "40"])
    out, err = capsys.readouterr()
    assert "recall_drone" in out and "try --chat" not in err


def test_help_texts_show_the_defaults(monkeypatch):
    """``clover serve --help`` says the port, ``clover generate --help`` the policy and threshold;
    an API key taken from the environment is never printed."""
    from clover.cli import build_parser

    monkeypatch.setenv("CLOVER_API_KEY", "sk-secret")

    def help_of(command):
        parser = build_parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return " ".join(sub.choices[command].format_help().split())

    serve = help_of("serve")
    assert "port to listen on (default: 8000)" in serve and "sk-secret" not in serve
    gen = help_of("generate")
    from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD

    assert (
        f"(default: {DEFAULT_POLICY})" in gen and f"(default: {DEFAULT_THRESHOLD})" in gen and "(default: 256)" in gen
    )
    assert "'default' (the default policy)" in help_of("eval") and "default: the default policy's" in help_of("eval")
