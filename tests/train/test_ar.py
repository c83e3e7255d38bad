"""The autoregressive base (``clover train --recipe airspace-ar``): a Hugging Face Qwen3.5-MoE
causal LM trained by Clover's loop, loadable by transformers, convertible and adaptable."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from clover.airspace.ar_recipe import AirspaceArRecipe
from clover.airspace.diffusion_recipe import airspace2_source
from clover.data.chat import parse_assistant
from clover.data.tokenizer import CloverTokenizer
from clover.train.ar import ArTrainer, build_model, next_token_loss
from clover.train.hf_checkpoint import save_hf
from clover.train.recipes import collate, encode_example

pytest.importorskip("transformers")

BUNDLED = Path(__file__).parents[2] / "clover" / "assets" / "default"
TINY = dict(
    hidden_size=32,
    num_hidden_layers=4,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
    linear_num_key_heads=2,
    linear_num_value_heads=2,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    num_experts=4,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=32,
)
CALL = {"name": "recall_drone", "arguments": {"drone_id": "D-17"}}
CHAT = {
    "messages": [
        {"role": "user", "content": "recall drone 17"},
        {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": CALL}]},
    ],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "recall_drone",
                "parameters": {
                    "type": "object",
                    "properties": {"drone_id": {"type": "string"}},
                    "required": ["drone_id"],
                },
            },
        }
    ],
}


def _recipe(**train):
    r = AirspaceArRecipe()
    r.model.update(TINY)
    r.batch_size, r.max_len = 4, 256
    for k, v in train.items():
        setattr(r.train, k, v)
    return r


def _tok():
    return CloverTokenizer.load(BUNDLED)


def test_the_answer_tokens_are_the_targets_and_padding_never_reaches_them():
    tok = _tok()
    r = _recipe()
    torch.manual_seed(0)
    model = build_model(r.hf_config(tok)).eval()
    ids, tgt = encode_example(tok, CHAT, 256, block_size=1)  # block size 1: no EOS fill after the answer
    assert tok.decode([i for i, t in zip(ids, tgt) if t]) == f"<tool_call>{json.dumps(CALL)}</tool_call><|im_end|>"
    short = collate([(ids, tgt)], tok.pad_token_id)
    padded = collate([(ids, tgt), (ids + ids, tgt + tgt)], tok.pad_token_id)  # row 0 padded to row 1
    with torch.no_grad():
        a = next_token_loss(model, short, 1.0)[2]
        b = next_token_loss(model, {k: v[:1] for k, v in padded.items()}, 1.0)[2]
    assert torch.allclose(a, b, atol=1e-5)


def test_loss_falls_on_a_micro_run_and_resume_is_bit_exact(tmp_path):
    tok = _tok()

    def run(steps, until=None, resume=False):
        torch.manual_seed(0)
        r = _recipe(steps=steps, lr=1e-2, warmup=2, ckpt_every=5, log_every=1, eval_every=1000)
        model = build_model(r.hf_config(tok))
        t = ArTrainer(model, airspace2_source(tok, r, "train", seed=0), r.train, tmp_path / "run", tokenizer=tok)
        if resume:
            assert t.resume()
        return [h["loss"] for h in t.fit(progress=False, until=until)]

    whole = run(20)
    assert sum(whole[-3:]) / 3 < 0.8 * sum(whole[:3]) / 3, whole
    shutil.rmtree(tmp_path / "run")
    first = run(20, until=10)
    rest = run(20, resume=True)
    assert first + rest == whole  # bit-exact: batches and the optimizer state are restored exactly
    ck = tmp_path / "run" / "step-00000020"
    assert (ck / "chat_template.jinja").exists() and json.loads((ck / "config.json").read_text())["model_type"] == (
        "qwen3_5_moe_text"
    )


def test_the_checkpoint_loads_in_transformers_and_generates_a_tool_call_that_parses(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = _tok()
    torch.manual_seed(0)
    r = _recipe(steps=80, lr=5e-3, warmup=5)
    model = build_model(r.hf_config(tok))
    batch = collate([encode_example(tok, CHAT, 256, block_size=1)], tok.pad_token_id)
    ArTrainer(model, lambda step: batch, r.train, None).fit(progress=False)  # learn this one chat by heart
    save_hf(model, tok, tmp_path / "ar")
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "ar").eval()
    hf_tok = AutoTokenizer.from_pretrained(tmp_path / "ar")
    ids = hf_tok.apply_chat_template(CHAT["messages"][:1], tools=CHAT["tools"], add_generation_prompt=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    assert ids == tok.encode(tok.render_chat(CHAT["messages"][:1], CHAT["tools"], True))
    out = hf.generate(torch.tensor([ids]), max_new_tokens=40, do_sample=False)
    text = hf_tok.decode(out[0, len(ids) :])
    assert parse_assistant(text)[1] == [CALL], text


def _clover(*args, timeout=600):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "clover", *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_train_ar_then_convert_then_adapt_with_init_from(tmp_path):
    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps({"model": TINY, "data": {"batch_size": 4, "max_len": 256}}))
    train = ["train", "--recipe", "airspace-ar", "--config", cfg, "--out", tmp_path / "ar_run", "--steps", 2]
    train += ["--export", tmp_path / "ar", "--no-progress"]
    r = _clover(*train, "--init-from", BUNDLED)
    assert r.returncode != 0 and "--init-from" in r.stderr  # a Clover model is not an AR base
    r = _clover(*train)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((tmp_path / "ar" / "training.json").read_text())["step"] == 2
    r = _clover("convert", "--from", tmp_path / "ar", "--out", tmp_path / "c", "--dtype", "fp32")
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "c" / "chat_template.jinja").exists()
    r = _clover(
        "train",
        "--init-from",
        tmp_path / "c",
        "--out",
        tmp_path / "adapt",
        "--steps",
        1,
        "--export",
        tmp_path / "clover",
        "--no-progress",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    record = json.loads((tmp_path / "clover" / "training.json").read_text())
    assert record["step"] == 1 and 0 < record["val_loss"] < float("inf")
    log = [json.loads(x) for x in (tmp_path / "adapt" / "train_log.jsonl").read_text().splitlines()]
    assert all(torch.isfinite(torch.tensor(x["loss"])) for x in log if "loss" in x)
    assert (tmp_path / "clover" / "chat_template.jinja").exists()  # the template travels with the model
    ablation = tmp_path / "causal.json"  # an ablation switch on top of the converted model's own shape
    ablation.write_text(json.dumps({"model": {"gdn_block_mixing": "causal"}}))
    r = _clover(
        "train",
        "--init-from",
        tmp_path / "c",
        "--config",
        ablation,
        "--out",
        tmp_path / "abl",
        "--steps",
        1,
        "--export",
        tmp_path / "abl_out",
        "--no-progress",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    config = json.loads((tmp_path / "abl_out" / "config.json").read_text())
    assert config["gdn_block_mixing"] == "causal" and config["hidden_size"] == TINY["hidden_size"]


def test_bench_twin_measures_clover_against_its_ar_twin(tmp_path):
    tok = _tok()
    torch.manual_seed(0)
    save_hf(build_model(_recipe().hf_config(tok)), tok, tmp_path / "twin")  # random weights: speeds only
    r = _clover(
        "bench",
        "twin",
        "--twin",
        tmp_path / "twin",
        "--n",
        2,
        "--text",
        0,
        "--multiturn",
        0,
        "--speed-prompts",
        1,
        "--batch",
        2,
        "--max-tokens",
        8,
        "--json",
        tmp_path / "t.json",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    f = json.loads((tmp_path / "t.json").read_text())["figures"]
    for k in (
        "twin_exact_match",
        "clover_ar_exact_match",
        "clover_threshold_exact_match",
        "clover_threshold_tpf",
        "twin_tokens_per_s",
        "clover_threshold_tokens_per_s",
        "speedup_vs_twin",
    ):
        assert f[k] is not None and f[k] >= 0, k
    assert set(f["by_batch"]) == {"1", "2"} and f["n"] == 2
    assert f["speedup_vs_twin"] == f["clover_threshold_tokens_per_s"] / f["twin_tokens_per_s"]
