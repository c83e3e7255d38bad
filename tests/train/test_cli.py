"""``clover train`` from the command line: warm start, export, checkpoints, bad overrides."""

import json
import os
import subprocess
import sys
from pathlib import Path

BUNDLED = Path(__file__).parents[2] / "clover" / "assets" / "default"


def _train(*args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "clover", "train", "--recipe", "airspace", "--no-progress", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


def test_init_from_the_bundled_model_trains_checkpoints_and_exports(tmp_path):
    r = _train("--out", tmp_path / "run", "--steps", 2, "--init-from", BUNDLED, "--export", tmp_path / "exp")
    assert r.returncode == 0, r.stderr[-2000:]
    record = json.loads((tmp_path / "exp" / "training.json").read_text())
    assert record["step"] == 2 and record["init_from"] == str(BUNDLED) and record["val_loss"] > 0
    step = tmp_path / "run" / "step-00000002"
    assert (step / "model.safetensors").exists() and (step / "tokenizer.json").exists()  # a loadable model dir
    assert (tmp_path / "exp" / "tokenizer.json").read_text() == (BUNDLED / "tokenizer.json").read_text()
    evals = [
        json.loads(x)["eval"] for x in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines() if '"eval"' in x
    ]
    ce = evals[-1]["val_ce"]  # validation cross-entropy by kind of token
    assert {"digit", "word", "markup", "end"} <= set(ce) and all(v > 0 for v in ce.values())
    # resumed without --init-from: the run keeps the checkpoint's shape (not the recipe's default)
    r = _train("--out", tmp_path / "run", "--steps", 3, "--resume")
    assert r.returncode == 0 and "resumed from step 2" in r.stdout, r.stderr[-2000:]
    # the newest checkpoint cut short (a crash mid-save): --resume passes over it, in one line
    weights = tmp_path / "run" / "step-00000003" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    r = _train("--out", tmp_path / "run", "--steps", 4, "--resume")
    assert r.returncode == 0 and "resumed from step 2" in r.stdout, r.stderr[-2000:]
    said = [line for line in r.stdout.splitlines() if "passed over" in line]
    assert len(said) == 1 and "step-00000003" in said[0] and said[0].endswith("resuming from step-00000002")


def test_steps_zero_evaluates_and_exports_the_starting_model(tmp_path):
    r = _train("--out", tmp_path / "run", "--steps", 0, "--init-from", BUNDLED, "--export", tmp_path / "exp")
    assert r.returncode == 0 and "step 0: val_loss=" in r.stdout, r.stderr[-2000:]
    record = json.loads((tmp_path / "exp" / "training.json").read_text())
    assert record["step"] == 0 and record["val_loss"] > 0
    r = _train("--out", tmp_path / "run2", "--steps", -1)
    assert r.returncode != 0 and "--steps must be >= 0" in r.stderr


def test_unknown_override_fields_are_refused_by_name(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"train": {"learning_rate": 1e-3}}))
    r = _train("--out", tmp_path / "run", "--config", bad, "--steps", 1)
    assert r.returncode != 0 and "unknown train field 'learning_rate'" in r.stderr
    bad.write_text(json.dumps({"model": {"hidden": 64}}))
    r = _train("--out", tmp_path / "run", "--config", bad, "--steps", 1)
    assert r.returncode != 0 and "unknown model field" in r.stderr
    bad.write_text(json.dumps({"data": {"decision_share": 0.5}}))
    r = _train("--out", tmp_path / "run", "--config", bad, "--steps", 1)
    assert r.returncode != 0 and "unknown data field 'decision_share'" in r.stderr and "decision_frac" in r.stderr
    bad.write_text(json.dumps({"data": {"batch_size": 0.5}}))  # not truncated to 0
    r = _train("--out", tmp_path / "run", "--config", bad, "--steps", 1)
    assert r.returncode != 0 and "data field 'batch_size' must be int, got 0.5" in r.stderr


def test_init_from_a_model_of_another_shape_is_refused(tmp_path):
    over = tmp_path / "o.json"
    over.write_text(json.dumps({"model": {"hidden_size": 64}}))
    r = _train("--out", tmp_path / "run", "--config", over, "--init-from", BUNDLED, "--steps", 1)
    assert r.returncode != 0 and "differs from the recipe's" in r.stderr and "hidden_size" in r.stderr


def _chats(path, n=25):
    """Chat JSONL in OpenAI's fine-tuning format: airspace turns plus a tool the model never saw."""
    from clover.airspace.tokenizer_corpus import generate

    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
    lines = [json.dumps({"messages": e["messages"], "tools": e["tools"]}) for e in generate("train", n - 5, seed=4)]
    for city in ("Oslo", "Lyon", "Perth", "Quito", "Graz"):
        call = {
            "id": "c1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": city})},
        }
        msgs = [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": f"weather in {city}?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
        ]
        lines.append(json.dumps({"messages": msgs, "tools": [weather]}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_fine_tune_on_chat_jsonl_and_train_from_scratch_on_it(tmp_path):
    data = _chats(tmp_path / "chats.jsonl")
    r = _train(
        "--out", tmp_path / "ft", "--steps", 2, "--init-from", BUNDLED, "--data", data, "--export", tmp_path / "exp"
    )
    assert r.returncode == 0, r.stderr[-2000:]
    record = json.loads((tmp_path / "exp" / "training.json").read_text())
    assert record["recipe"] == f"chat data {data}" and record["step"] == 2 and record["val_loss"] > 0
    assert (tmp_path / "exp" / "tokenizer.json").read_text() == (BUNDLED / "tokenizer.json").read_text()
    # from scratch: the recipe's model (made smaller here) and a tokenizer trained on the data
    small = tmp_path / "small.json"
    small.write_text(json.dumps({"model": {"hidden_size": 64, "num_hidden_layers": 2, "full_attention_interval": 2}}))
    r = _train("--out", tmp_path / "scratch", "--steps", 1, "--data", data, "--config", small)
    assert r.returncode == 0, r.stderr[-2000:]
    from clover.data.tokenizer import CloverTokenizer

    tok = CloverTokenizer.load(tmp_path / "scratch")
    assert tok.mask_token_id is not None and "get_weather" in tok.decode(tok.encode("get_weather"))


def test_bad_chat_data_is_refused_with_its_line(tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text(
        '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n'
        '{"messages": [{"role": "user", "content": "no answer"}]}\n'
    )
    r = _train("--out", tmp_path / "run", "--steps", 1, "--data", data)
    assert r.returncode != 0 and f"{data}:2: no assistant message" in r.stderr
    data.write_text("not json\n")
    r = _train("--out", tmp_path / "run", "--steps", 1, "--data", data)
    assert r.returncode != 0 and f"{data}:1: not valid JSON" in r.stderr


def test_chat_source_is_a_pure_function_of_the_step():
    import torch

    from clover.airspace.recipes import AirspaceRecipe
    from clover.airspace.tokenizer_corpus import generate
    from clover.data.tokenizer import CloverTokenizer
    from clover.train.recipes import chat_source

    tok = CloverTokenizer.load(BUNDLED)
    exs = [{"messages": e["messages"], "tools": e["tools"]} for e in generate("train", 30, seed=1)]
    a, b = chat_source(tok, exs, AirspaceRecipe())(7), chat_source(tok, exs, AirspaceRecipe())(7)
    assert all(torch.equal(a[k], b[k]) for k in a) and a["target"].any()


def test_conversation_frac_mixes_in_conversations_with_earlier_turns():
    import dataclasses

    from clover.airspace.diffusion_recipe import Airspace2Recipe, airspace2_source
    from clover.data.tokenizer import CloverTokenizer

    tok = CloverTokenizer.load(BUNDLED)
    base = dataclasses.replace(Airspace2Recipe(), batch_size=24, decision_frac=0.0, greeting_frac=0.0, max_len=2048)
    users = lambda batch: [tok.decode(r.tolist()).count("<|im_start|>user") for r in batch["x0"]]
    off = airspace2_source(tok, dataclasses.replace(base, conversation_frac=0.0))(5)
    on = airspace2_source(tok, dataclasses.replace(base, conversation_frac=0.5))(5)
    assert sum(n >= 2 for n in users(off)) < 6  # the corpus's own follow-ups only
    assert 8 < sum(n >= 2 for n in users(on)) < 22  # about half hold earlier turns
    assert all(on["target"][i].any() for i in range(len(on["x0"])))  # each row has an answer to learn


def test_device_cuda_without_a_gpu_is_refused_before_anything_is_written(tmp_path):
    import torch

    from clover.train.trainer import train_device

    assert train_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert train_device("cpu").type == "cpu"
    if not torch.cuda.is_available():
        r = _train("--device", "cuda", "--out", tmp_path / "run", "--steps", 1)
        assert r.returncode != 0 and "no CUDA GPU is visible to torch" in r.stderr and "Traceback" not in r.stderr
        assert not (tmp_path / "run").exists()
