"""Scoring through the server as evaluation tools do it: ``echo`` + ``logprobs`` on
``/v1/completions`` (lm-evaluation-harness' ``local-completions`` loglikelihood request, sent by
the official client), and vLLM's ``/tokenize``, ``/detokenize``, ``/tokenizer_info``, which such
tools probe for before falling back to a tokenizer of their own."""

import math

import httpx
import pytest

from clover.engine.scoring import prompt_logprobs
from tests.server.conftest import API_KEY

AUTH = {"Authorization": f"Bearer {API_KEY}"}


def _tok(server, path, body=None):
    r = httpx.post(server.url + path, json=body, timeout=60) if body is not None else httpx.get(server.url + path)
    return r


def test_echo_with_logprobs_scores_the_prompt_as_the_engine_does(server, client, tokenizer, tiny_model):
    context, continuation = "The drone flies to", " the harbor"
    ids = tokenizer.encode(context + continuation)
    ctxlen = len(tokenizer.encode(context))
    # lm-evaluation-harness' loglikelihood payload (token ids, one token generated, echo)
    r = client.completions.create(
        model="clover", prompt=[ids], temperature=0, max_tokens=1, logprobs=1, echo=True, seed=1234
    )
    lp = r.choices[0].logprobs
    assert len(lp.token_logprobs) == len(ids) + 1 and lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert r.choices[0].text.startswith(tokenizer.decode(ids)) and r.usage.completion_tokens == 1
    want = prompt_logprobs(tiny_model, ids, tiny_model.config.block_size, top=1)
    got = lp.token_logprobs[ctxlen:-1]  # what the harness sums
    assert all(math.isclose(g, w.logprob, abs_tol=1e-5) for g, w in zip(got, want[ctxlen:]))
    for tok, top in zip(lp.token_logprobs[1:-1], lp.top_logprobs[1:-1]):  # the harness' is_greedy check
        assert len(top) == 1 and max(top.values()) >= tok - 1e-9
    assert lp.text_offset[: len(ids)] == [len(tokenizer.decode(ids[:i])) for i in range(len(ids))]
    # max_tokens 0: the prompt only (legacy completions' scoring form)
    r0 = client.completions.create(model="clover", prompt=context + continuation, max_tokens=0, logprobs=0, echo=True)
    assert r0.choices[0].text == context + continuation and r0.usage.completion_tokens == 0
    assert r0.choices[0].logprobs.token_logprobs[1:] == pytest.approx(lp.token_logprobs[1:-1], abs=1e-6)


def test_echo_counts_a_generated_eos_as_the_generated_token(server, client, tokenizer):
    """The harness drops the last entry as the generated token: when that token is EOS (text and
    usage leave it out) its entry must still be there, or a continuation token would be dropped."""
    ids = tokenizer.encode("Recall drone 4")
    eos = {str(tokenizer.eos_token_id): 100}  # the model's first token is EOS
    r = client.completions.create(model="clover", prompt=[ids], max_tokens=1, logprobs=1, echo=True, logit_bias=eos)
    c = r.choices[0]
    assert c.finish_reason == "stop" and r.usage.completion_tokens == 0 and c.text == tokenizer.decode(ids)
    assert len(c.logprobs.token_logprobs) == len(ids) + 1 and c.logprobs.tokens[-1] == tokenizer.decode(
        [tokenizer.eos_token_id]
    )


def test_echo_without_logprobs_and_streamed(server, client):
    r = client.completions.create(model="clover", prompt="Recall drone 4", max_tokens=3, echo=True)
    assert r.choices[0].text.startswith("Recall drone 4") and r.choices[0].logprobs is None
    parts = [
        c.choices[0].text
        for c in client.completions.create(
            model="clover", prompt="Recall drone 4", max_tokens=3, echo=True, stream=True
        )
        if c.choices
    ]
    assert parts[0] == "Recall drone 4" and "".join(parts) == r.choices[0].text
    bad = httpx.post(
        server.url + "/v1/completions",
        headers=AUTH,
        timeout=60,
        json={"model": "clover", "prompt": "x", "echo": True, "stream": True, "logprobs": 1},
    )
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "echo"


def test_tokenize_detokenize_and_tokenizer_info(server, tokenizer, client):
    r = _tok(server, "/tokenize", {"prompt": "drone 17", "add_special_tokens": False}).json()
    assert r["tokens"] == tokenizer.encode("drone 17") and r["count"] == len(r["tokens"]) and r["max_model_len"] > 0
    assert _tok(server, "/detokenize", {"tokens": r["tokens"]}).json() == {"prompt": "drone 17"}
    msgs = [{"role": "user", "content": "hello"}]
    chat = _tok(server, "/tokenize", {"messages": msgs, "return_token_strs": True}).json()
    used = client.chat.completions.create(model="clover", messages=msgs, max_tokens=1).usage.prompt_tokens
    assert chat["count"] == used and "".join(chat["token_strs"]) == tokenizer.decode(chat["tokens"])
    info = _tok(server, "/tokenizer_info").json()
    assert info["eos_token"] == tokenizer.decode([tokenizer.eos_token_id]) and "bos_token" in info
    for body, param in [
        ({}, "prompt"),
        ({"prompt": "a", "messages": msgs}, "prompt"),
        ({"tokens": [-1]}, "tokens"),
        ({"prompt": "a", "model": "other"}, "model"),
    ]:
        res = _tok(server, "/detokenize" if "tokens" in body else "/tokenize", body)
        assert res.status_code in (400, 404) and res.json()["error"]["param"] == param
