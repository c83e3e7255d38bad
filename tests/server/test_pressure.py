"""The server under pressure: a full queue answers every extra request with OpenAI's 429, a
client that disconnects while its prompt is being prefilled is aborted, and a client that reads
its stream slowly still gets all of it; afterwards the engine holds nothing. The moments are
chosen by the test, not by timing: the engine thread is held inside the model's prefill until
the test lets it go. (The resident memory over 500 such requests is a benchmark:
benchmarks/bench_server_pressure.py.)"""

from __future__ import annotations

import json
import socket
import threading

import httpx
import pytest

from tests.server.test_concurrency import _finished, _send_raw, _until, _wait_idle

MSG = [{"role": "user", "content": "Status of drones 3, 4 and 5, and every zone near the lake?"}]


def _read_slowly(s: socket.socket, piece: int = 64) -> bytes:
    """The whole response, read ``piece`` bytes at a time (a client on a slow link)."""
    data = b""
    while chunk := s.recv(piece):
        data += chunk
        if b"data: [DONE]" in data:
            break
    return data


def _sse_text(raw: bytes) -> str:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    text = ""
    for line in body.decode().splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                text += choice["delta"].get("content") or ""
    return text


@pytest.fixture()
def gated_engine(tiny_model, tokenizer):
    """A one-slot engine whose prefill (the runner's: a request's admission) waits, in the engine
    thread, until the test sets ``release``."""
    from clover.engine import Engine

    engine = Engine(tiny_model, tokenizer, max_batch_size=1)
    entered, release = threading.Event(), threading.Event()
    prefill = engine.runner.prefill

    def gated(*args, **kwargs):
        entered.set()
        release.wait(600)
        return prefill(*args, **kwargs)

    engine.runner.prefill = gated
    yield engine, entered, release
    release.set()


def test_full_queue_prefill_disconnect_and_slow_reader(live, gated_engine):
    engine, entered, release = gated_engine
    body = {"model": "clover", "messages": MSG, "max_tokens": 64, "stream": True, "ignore_eos": True, "temperature": 0}
    with live(engine, max_queue=1) as srv:
        health = lambda: httpx.get(srv.url + "/health").json()
        first = _send_raw(srv.url, "/v1/chat/completions", body)  # its prefill holds the engine
        assert entered.wait(600), "the request never reached the engine"
        second = _send_raw(srv.url, "/v1/chat/completions", body)  # waits in the queue
        _until(lambda: health()["outstanding"] == 2, "the second request queued")
        # the queue is full: every further request is a 429 in OpenAI's shape, and none is kept
        for stream in (True, False) * 5:
            r = httpx.post(srv.url + "/v1/chat/completions", json={**body, "stream": stream}, timeout=60)
            assert r.status_code == 429 and r.headers["Retry-After"] == "1"
            err = r.json()["error"]
            assert err["code"] == "queue_full" and err["type"] == "rate_limit_error" and "capacity" in err["message"]
            assert set(err) == {"message", "type", "param", "code"}
        assert health()["outstanding"] == 2
        first.close()  # the first client goes away while its prompt is being prefilled
        release.set()
        raw = _read_slowly(second)  # the second, read slowly, gets its whole stream
        second.close()
        _wait_idle(srv.url)
        # the first never finished: counted as aborted, the second by its length
        assert sorted(_finished(srv.url)) == [
            'clover_engine_requests_total{reason="aborted"} 1.0',
            'clover_engine_requests_total{reason="length"} 1.0',
        ]
        fast = httpx.post(srv.url + "/v1/chat/completions", json={**body, "stream": False}, timeout=600)
        assert fast.status_code == 200
        slow_text = _sse_text(raw)
        assert slow_text and slow_text == fast.json()["choices"][0]["message"]["content"]
        h = _wait_idle(srv.url)
        assert h["outstanding"] == 0 and h["active"] == 0
