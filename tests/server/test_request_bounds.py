"""A request cannot stall the others: a prompt over the model's limit is refused (413) before its
grounded sources are indexed, and a request's preparation runs off the event loop."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from clover.api.errors import APIError
from clover.api.prepare import model_limits, prepare_chat
from clover.api.schemas import ChatRequest

GROUNDED_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "recall_drone",
            "parameters": {
                "type": "object",
                "properties": {"drone_id": {"type": "string", "x-grounded": True}},
                "required": ["drone_id"],
            },
        },
    }
]
HUGE = "drone D-17 near the lake " * 40_000  # 1,000,000 characters


def _huge_request() -> dict:
    assert len(HUGE) == 1_000_000
    return {"model": "clover", "messages": [{"role": "user", "content": HUGE}], "tools": GROUNDED_TOOLS}


def test_an_oversized_prompt_is_refused_before_any_span_index(tokenizer, tiny_model, monkeypatch):
    import clover.engine.grammar as grammar

    def no_index(*a, **k):
        raise AssertionError("a span index was built for a prompt over the limit")

    monkeypatch.setattr(grammar, "SpanIndex", no_index)
    limits = model_limits(tiny_model.config, tokenizer=tokenizer)
    assert limits.max_token_bytes > 0
    for text in (HUGE, "drone D-17 " * (limits.max_prompt_tokens // 2)):  # unread, and just over the limit
        req = ChatRequest.model_validate({**_huge_request(), "messages": [{"role": "user", "content": text}]})
        with pytest.raises(APIError) as e:
            prepare_chat(req, tokenizer, limits, None)
        assert e.value.status == 413 and e.value.code == "prompt_too_long"


def _small(c: httpx.Client) -> None:
    body = {"model": "clover", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16, "ignore_eos": True}
    r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text


def _eight(url: str, big: bytes | None = None, refusals: list | None = None) -> float:
    """Seconds for 8 small requests sent at once (with ``big``: that body sent meanwhile, its
    answer's time added to ``refusals``)."""

    def send_big(c: httpx.Client) -> None:
        t0 = time.perf_counter()
        r = c.post("/v1/chat/completions", content=big, headers={"content-type": "application/json"})
        refusals.append(time.perf_counter() - t0)
        assert r.status_code == 413 and r.json()["error"]["code"] == "prompt_too_long", r.text

    with httpx.Client(base_url=url, timeout=60) as c, ThreadPoolExecutor(9) as pool:
        t0 = time.perf_counter()
        jobs = [pool.submit(_small, c) for _ in range(8)] + ([pool.submit(send_big, c)] if big else [])
        for j in jobs[:8]:
            j.result()
        took = time.perf_counter() - t0
        for j in jobs[8:]:
            j.result()
        return took


@pytest.mark.alone  # it times requests against each other
def test_a_million_characters_are_refused_at_once_and_the_others_go_on(live):
    big = json.dumps(_huge_request()).encode()
    with live(max_queue=64) as srv:
        _eight(srv.url, big, [])  # warm-up
        alone = min(_eight(srv.url) for _ in range(3))
        refusals: list[float] = []
        together = min(_eight(srv.url, big, refusals) for _ in range(3))
    shown = f"8 small requests {alone:.3f} s alone, {together:.3f} s meanwhile"
    print(f"refused in {min(refusals):.3f}-{max(refusals):.3f} s; {shown}")
    assert max(refusals) < 0.2, refusals
    assert together <= 1.5 * alone, (together, alone)
