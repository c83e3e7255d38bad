"""The HTTP requests lm-evaluation-harness (0.4.13, ``local-completions`` and
``local-chat-completions`` with ``tokenizer_backend=remote``) sends for the three runs in
docs/server.md#scoring, sent here as it sends them, on one kept-alive connection, against a running
server: its remote tokenizer's probe, a chat tokenized through ``/tokenize`` (its
``--apply_chat_template``), loglikelihood, rolling loglikelihood over token windows, and
generate-until on both endpoints. lm-eval itself is not a dependency; the task files the docs'
commands read are checked to be what the harness needs."""

from __future__ import annotations

import math
from pathlib import Path

import httpx
import pytest
import yaml
from jinja2 import BaseLoader, Environment, StrictUndefined

ROOT = Path(__file__).parents[2]
TASKS = ROOT / "integrations" / "lm_eval"
SEED = 1234  # the harness' seed, sent with every request
CHAT = [
    {"role": "system", "content": "You are an airspace operations assistant."},
    {"role": "user", "content": "Close the airspace over the harbour until 18:00."},
]


@pytest.fixture(scope="module")
def harness(live):
    with live() as srv, httpx.Client(base_url=srv.url, timeout=60) as http:
        yield http


def _tokens(http, prompt) -> list[int]:
    """The remote tokenizer's ``encode``: what it posts, and what it reads back."""
    r = http.post("/tokenize", json={"prompt": prompt, "add_special_tokens": False})
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def _scores(http, ids: list[int], ctxlen: int) -> tuple[float, bool]:
    """``local-completions``' loglikelihood request for one (context + continuation) and how it
    reads the answer: the continuation's summed logprob and whether each was the top choice."""
    body = {"model": "clover", "prompt": [ids], "temperature": 0, "max_tokens": 1, "logprobs": 1}
    r = http.post("/v1/completions", json={**body, "seed": SEED, "echo": True})
    assert r.status_code == 200, r.text
    lp = r.json()["choices"][0]["logprobs"]
    tokens, tops = lp["token_logprobs"][ctxlen:-1], lp["top_logprobs"][ctxlen:-1]
    return sum(tokens), all(t == max(top.values()) for t, top in zip(tokens, tops))


def test_remote_tokenizer_probe_and_chat_template(harness, tokenizer):
    """``tokenizer_backend=remote``: /tokenizer_info with an eos token and the chat template, and
    /tokenize of text; a chat as the harness tokenizes it (``prompt`` holding the messages) is
    the chat endpoints' prompt, and the template rendered as the harness renders it (plain
    jinja2, strict about undefined names) gives the same tokens."""
    info = harness.get("/tokenizer_info").json()
    assert info["eos_token"] == tokenizer.decode([tokenizer.eos_token_id])
    assert _tokens(harness, "test") == tokenizer.encode("test")
    as_prompt = _tokens(harness, CHAT)
    as_messages = harness.post("/tokenize", json={"messages": CHAT}).json()["tokens"]
    template = Environment(loader=BaseLoader, undefined=StrictUndefined).from_string(info["chat_template"])
    assert as_prompt == as_messages == _tokens(harness, template.render(messages=CHAT, add_generation_prompt=True))
    no_header = harness.post("/tokenize", json={"prompt": CHAT, "add_generation_prompt": False}).json()["tokens"]
    assert as_prompt[: len(no_header)] == no_header and len(no_header) < len(as_prompt)
    started = [*CHAT, {"role": "assistant", "content": "Closing"}]
    cont = harness.post("/tokenize", json={"messages": started, "continue_final_message": True}).json()["tokens"]
    assert cont[: len(as_prompt)] == as_prompt and tokenizer.decode(cont).endswith("Closing")
    bad = harness.post("/tokenize", json={"prompt": [{"role": "nobody", "content": "x"}]})
    assert bad.status_code == 400


def test_loglikelihood_and_rolling_windows(harness):
    """Multiple choice: context + each choice, the context's length cut off; rolling: the text in
    windows of the model's length, each after the eos token (the harness' prefix token)."""
    context = "Close the airspace over the harbour until"
    for choice in (" 18:00.", " tomorrow."):
        ctx = _tokens(harness, context)
        whole = _tokens(harness, context + choice)
        total, greedy = _scores(harness, whole, len(ctx))
        assert math.isfinite(total) and total < 0 and isinstance(greedy, bool)
    eos = _tokens(harness, harness.get("/tokenizer_info").json()["eos_token"])[0]
    text = _tokens(harness, "Drone D-17 returns to base. The zone over the port stays closed. " * 3)
    window = 16  # max_length=16 in the model args: several windows
    for start in range(0, len(text), window):
        pred = text[start : start + window]
        ctx = [eos] if start == 0 else text[start - 1 : start]  # context_len 1, as the harness rolls
        total, _ = _scores(harness, ctx + pred, len(ctx))
        assert math.isfinite(total) and total < 0


def test_generate_until_on_completions_and_chat(harness):
    """``local-completions`` (token ids, the task's ``until`` as stop) and ``local-chat-completions``
    (messages, each with the ``type`` the harness adds; at most four stops)."""
    ids = _tokens(harness, "Q: Which drone returns to base?\nA:")
    body = {"model": "clover", "prompt": [ids], "max_tokens": 8, "temperature": 0, "stop": ["\n"], "seed": SEED}
    r = harness.post("/v1/completions", json=body)
    assert r.status_code == 200 and "\n" not in r.json()["choices"][0]["text"]
    msgs = [{**m, "type": "text"} for m in CHAT]
    stop = ["\n", "<|im_end|>", "<|endoftext|>"]
    body = {"model": "clover", "messages": msgs, "max_tokens": 8, "temperature": 0, "stop": stop, "seed": SEED}
    r = harness.post("/v1/chat/completions", json=body)
    assert r.status_code == 200 and isinstance(r.json()["choices"][0]["message"]["content"], str)


@pytest.mark.parametrize("task", sorted(p.name for p in TASKS.glob("*.yaml")))
def test_the_docs_task_files(task):
    """Each task file the docs' commands name reads a data file kept beside it, with the fields
    its templates use, and has the output type of its run."""
    cfg = yaml.safe_load((TASKS / task).read_text())
    assert cfg["task"] == task.removesuffix(".yaml")
    assert cfg["output_type"] in ("multiple_choice", "loglikelihood_rolling", "generate_until")
    (path,) = cfg["dataset_kwargs"]["data_files"].values()
    rows = [yaml.safe_load(line) for line in (ROOT / path).read_text().splitlines() if line.strip()]
    assert rows and all(isinstance(r, dict) for r in rows)
    used = {
        k for k in rows[0] if any(k in str(cfg.get(f, "")) for f in ("doc_to_text", "doc_to_target", "doc_to_choice"))
    }
    assert used and all(used <= set(r) for r in rows)
