"""Chat and text completions through the official openai client against a live server."""

import json

import httpx
import openai
import pytest

from clover.data.chat import render
from tests.server.conftest import API_KEY

MSG = [{"role": "user", "content": "Recall drone 17 please"}]


def test_models(client, server):
    assert [m.id for m in client.models.list().data] == ["clover"]
    assert client.models.retrieve("clover").id == "clover"
    assert client.models.retrieve("clover").max_model_len == 2048  # vLLM's field
    assert "version" in httpx.get(server.url + "/version").json()


def test_plain_chat_and_usage(client, tokenizer):
    r = client.chat.completions.create(model="clover", messages=MSG, max_tokens=12)
    (choice,) = r.choices
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    prompt = tokenizer.encode(render(MSG, add_generation_prompt=True))
    assert r.usage.prompt_tokens == len(prompt)
    assert 0 < r.usage.completion_tokens <= 12 or choice.finish_reason == "stop"
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    stats = r.model_extra["clover"]
    assert stats["tokens"] == r.usage.completion_tokens and stats["forward_passes"] >= 1


def test_streamed_chat_equals_non_streamed(client):
    kw = dict(model="clover", messages=MSG, max_tokens=20)
    full = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content  # greedy + batch-invariant engine: same tokens
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert reasons == [full.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_sampling_seed_is_reproducible(client):
    kw = dict(model="clover", messages=MSG, max_tokens=16, temperature=1.0, top_p=0.9, seed=123)
    a = client.chat.completions.create(**kw).choices[0].message.content
    b = client.chat.completions.create(**kw).choices[0].message.content
    assert a == b


def test_text_completions_plain_stream_and_stop(client):
    # a raw ChatML prompt: the model answers it (a bare phrase may end at once with EOS)
    prompt = "<|im_start|>user\nhow is drone 17 doing?<|im_end|>\n<|im_start|>assistant\n"
    kw = dict(model="clover", prompt=prompt, max_tokens=16)
    r = client.completions.create(**kw)
    text = r.choices[0].text
    assert r.object == "text_completion" and r.usage.completion_tokens > 0
    streamed = "".join(c.choices[0].text for c in client.completions.create(**kw, stream=True) if c.choices)
    assert streamed == text
    stop = text[4:7]
    if stop:
        r2 = client.completions.create(**kw, stop=[stop])
        assert r2.choices[0].text == text[: text.find(stop)] and r2.choices[0].finish_reason == "stop"


def test_clover_extras_are_accepted(client):
    r = client.chat.completions.create(
        model="clover", messages=MSG, max_tokens=8, extra_body={"block_size": 4, "policy": "ar", "threshold": 0.5}
    )
    assert r.model_extra["clover"]["block_size"] == 4
    assert r.model_extra["clover"]["forward_passes"] >= r.usage.completion_tokens  # ar: one token per pass


def test_step_events_in_the_stream(server):
    body = {
        "model": "clover",
        "messages": MSG,
        "max_tokens": 12,
        "stream": True,
        "stream_options": {"include_steps": True},
    }
    events = []
    with httpx.stream(
        "POST",
        server.url + "/v1/chat/completions",
        json=body,
        timeout=60,
        headers={"Authorization": f"Bearer {API_KEY}"},
    ) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    clover = [e["clover"] for e in events if "clover" in e]
    assert clover[0]["type"] == "start" and clover[0]["block_size"] == 8
    steps = [c for c in clover if c["type"] == "step"]
    assert steps and sum(len(s["positions"]) for s in steps) >= 12
    assert all(len(s["pieces"]) == len(s["tokens"]) == len(s["positions"]) for s in steps)
    assert clover[-1]["type"] == "stats"


def test_health_and_metrics(server, client):
    client.chat.completions.create(model="clover", messages=MSG, max_tokens=4)
    h = httpx.get(server.url + "/health").json()
    assert h["status"] == "ok" and h["model"] == "clover" and h["capacity"] == 16 + 64
    m = httpx.get(server.url + "/metrics").text
    for name in (
        'clover_requests_total{endpoint="/v1/chat/completions",status="200"}',
        "clover_tokens_per_forward_bucket",
        "clover_queue_depth",
        "clover_request_latency_seconds_bucket",
        "clover_generation_tokens_total",
        "clover_time_to_first_token_seconds",
    ):
        assert name in m, name


def test_logprobs_in_chat_streamed_chat_and_completions(client, tokenizer):
    import math

    import openai
    import pytest

    kw = dict(model="clover", messages=MSG, max_tokens=20, logprobs=True, top_logprobs=3)
    r = client.chat.completions.create(**kw)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens > 0
    text = b"".join(bytes(e.bytes) for e in content).decode("utf-8", "replace")  # a tiny random model: any bytes
    assert text.strip() == r.choices[0].message.content
    for e in content:
        assert e.logprob <= 0
        tops = [t.logprob for t in e.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True) and tops[0] >= e.logprob - 1e-5
        assert sum(math.exp(t) for t in tops) <= 1 + 1e-4
    streamed = [
        e
        for c in client.chat.completions.create(**kw, stream=True)
        if c.choices and c.choices[0].logprobs
        for e in c.choices[0].logprobs.content
    ]
    assert [(e.token, round(e.logprob, 4)) for e in streamed] == [(e.token, round(e.logprob, 4)) for e in content]
    plain = client.chat.completions.create(model="clover", messages=MSG, max_tokens=5)
    assert plain.choices[0].logprobs is None
    # legacy completions: parallel lists
    prompt = "<|im_start|>user\nhow is drone 17 doing?<|im_end|>\n<|im_start|>assistant\n"
    c = client.completions.create(model="clover", prompt=prompt, max_tokens=12, logprobs=2)
    lp = c.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == c.usage.completion_tokens
    assert all(len(t) <= 2 for t in lp.top_logprobs) and lp.text_offset[0] == 0
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):
        client.chat.completions.create(model="clover", messages=MSG, max_tokens=4, top_logprobs=2)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="clover", messages=MSG, max_tokens=4, logprobs=True, top_logprobs=21)


def test_logit_bias_and_penalties_are_applied(client, tokenizer):
    import openai
    import pytest

    kw = dict(model="clover", messages=MSG, max_tokens=16)
    base = client.chat.completions.create(**kw, logprobs=True)
    first = base.choices[0].logprobs.content[0]
    tid = tokenizer.encode(first.token)
    if len(tid) == 1:  # ban the first token the model chose: it must change
        banned = client.chat.completions.create(**kw, logprobs=True, logit_bias={str(tid[0]): -100})
        assert all(e.token != first.token for e in banned.choices[0].logprobs.content)
    pen = client.chat.completions.create(**kw, presence_penalty=2.0, frequency_penalty=2.0)
    assert pen.choices[0].finish_reason in ("stop", "length")
    for bad in ({"logit_bias": {"abc": 1}}, {"logit_bias": {"999999": 1}}, {"presence_penalty": 3}):
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(**kw, **bad)


def test_n_choices_chat(client):
    """n samples of one prompt: one choice each (seed + i per choice), the prompt counted once."""
    kw = dict(model="clover", messages=MSG, max_tokens=10, temperature=1.0, seed=5)
    r = client.chat.completions.create(**kw, n=3)
    assert [c.index for c in r.choices] == [0, 1, 2]
    one = client.chat.completions.create(**kw)
    assert r.usage.prompt_tokens == one.usage.prompt_tokens
    assert r.choices[0].message.content == one.choices[0].message.content  # choice 0 samples with the seed
    texts = [c.message.content for c in r.choices]
    assert len(set(texts)) > 1  # seeds 5, 6, 7 on a random model: different samples
    chunks = list(client.chat.completions.create(**kw, n=3, stream=True, stream_options={"include_usage": True}))
    streamed = {
        i: "".join(c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].index == i)
        for i in range(3)
    }
    assert [streamed[i] for i in range(3)] == texts
    finishes = [c.choices[0].index for c in chunks if c.choices and c.choices[0].finish_reason]
    assert sorted(finishes) == [0, 1, 2]
    assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens


def test_batched_completion_prompts(client, tokenizer):
    """A list of prompts (strings or token ids) × n: choice k*n + i is sample i of prompt k."""
    kw = dict(model="clover", max_tokens=6)
    a, b = "drone 17 to", "zone Harbor"
    r = client.completions.create(**kw, prompt=[a, b], n=2)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    sa = client.completions.create(**kw, prompt=a).choices[0].text
    sb = client.completions.create(**kw, prompt=b).choices[0].text
    assert [c.text for c in r.choices] == [sa, sa, sb, sb]  # greedy: the n samples agree
    assert r.usage.prompt_tokens == len(tokenizer.encode(a)) + len(tokenizer.encode(b))
    ids = client.completions.create(**kw, prompt=[tokenizer.encode(a), tokenizer.encode(b)])
    assert [c.text for c in ids.choices] == [sa, sb]
    streamed = list(client.completions.create(**kw, prompt=[a, b], stream=True))
    assert "".join(c.choices[0].text for c in streamed if c.choices and c.choices[0].index == 1) == sb
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(**kw, prompt=[a] * 9, n=2)
    assert e.value.body["param"] == "prompt"


def test_an_agent_loop_reuses_the_previous_turns_prefix(live, tiny_model, tokenizer):
    """Each turn's prompt is the previous one plus the answer and a tool result: it starts from
    the cached blocks, and answers exactly as an engine without the cache."""
    from clover.engine import Engine, SamplingParams

    engine = Engine(tiny_model, tokenizer, prefix_cache_mb=64)
    plain = Engine(tiny_model, tokenizer)
    msgs = [{"role": "system", "content": "You operate drones. " * 8}, {"role": "user", "content": "Recall drone 17"}]
    with live(engine) as srv:
        c = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=60)
        for turn in range(3):
            r = c.chat.completions.create(model="clover", messages=msgs, max_tokens=10)
            ids = tokenizer.encode(render(msgs, None, add_generation_prompt=True))
            assert r.choices[0].message.content == plain.generate(ids, SamplingParams(max_tokens=10)).text.strip()
            msgs += [
                {"role": "assistant", "content": r.choices[0].message.content},
                {"role": "user", "content": f"And drone {turn + 3}?"},
            ]
        metrics = httpx.get(srv.url + "/metrics").text
    assert engine.prefix_cache.hits >= 2 and "clover_prefix_cache_hit_tokens" in metrics


def test_grounded_reply_holds_numbers_and_ids_to_the_conversation(client):
    """``grounded_reply``: a random model's sampled replies, streamed or not, hold only the
    conversation's numbers and ids; the same requests without it make some up."""
    from clover.engine.reply_grounding import id_runs

    msgs = [{"role": "user", "content": "status of drone 26 and Golf-3 please"}]
    held, made_up = {"26", "Golf-3"}, 0
    for seed in range(8):
        kw = dict(model="clover", messages=msgs, max_tokens=24, temperature=1.0, seed=seed)
        on = client.chat.completions.create(**kw, extra_body={"grounded_reply": True})
        assert set(id_runs(on.choices[0].message.content or "")) <= held
        chunks = client.chat.completions.create(**kw, extra_body={"grounded_reply": True}, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == on.choices[0].message.content
        off = client.chat.completions.create(**kw)
        made_up += not set(id_runs(off.choices[0].message.content or "")) <= held
    assert made_up >= 2


def test_reply_words_over_http(client):
    """A model whose config names no task has no reply vocabulary: ``grounded_reply`` alone leaves
    words free, ``reply_words: true`` is a 400; a list holds the sampled replies' words to it and
    the conversation's."""
    import re

    msgs = [{"role": "user", "content": "status of drone 26 please"}]
    own, free = {"ok", "done", "status", "of", "drone", "please"}, 0
    for seed in range(6):
        kw = dict(model="clover", messages=msgs, max_tokens=24, temperature=1.0, seed=seed)
        on = client.chat.completions.create(**kw, extra_body={"grounded_reply": True, "reply_words": ["ok", "Done"]})
        assert set(re.findall(r"[a-z]+", (on.choices[0].message.content or "").lower())) <= own
        alone = client.chat.completions.create(**kw, extra_body={"grounded_reply": True})
        free += not set(re.findall(r"[a-z]+", (alone.choices[0].message.content or "").lower())) <= own
    assert free >= 2
    for body, param in (({"grounded_reply": True, "reply_words": True}, "reply_words"),
                        ({"reply_words": ["ok"]}, "reply_words"),
                        ({"grounded_reply": True, "reply_words": ["ok", "d-26"]}, "reply_words")):  # fmt: skip
        with pytest.raises(openai.BadRequestError, match=param):
            client.chat.completions.create(model="clover", messages=msgs, max_tokens=4, extra_body=body)
