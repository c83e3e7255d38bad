"""Many concurrent streams; a full queue answers 429; a cancelled stream frees its slot."""

import asyncio
import contextlib
import json
import logging
import socket
import time

import httpx
import openai

MSG = [{"role": "user", "content": "Status of drone 3?"}]


def test_32_concurrent_streams(server):
    from tests.server.conftest import API_KEY

    async def main():
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)

        async def one(i):
            stream = await client.chat.completions.create(
                model="clover",
                messages=[{"role": "user", "content": f"Recall drone {i}"}],
                max_tokens=10 + i % 7,
                stream=True,
                stream_options={"include_usage": True},
            )
            reasons, usage = [], None
            async for ch in stream:
                if ch.choices and ch.choices[0].finish_reason:
                    reasons.append(ch.choices[0].finish_reason)
                usage = ch.usage or usage
            return reasons, usage

        try:
            return await asyncio.gather(*(one(i) for i in range(32)))
        finally:
            await client.close()

    results = asyncio.run(main())
    assert len(results) == 32
    for reasons, usage in results:
        assert len(reasons) == 1 and usage is not None and usage.completion_tokens > 0


def _wait_idle(url: str, timeout: float = 600) -> dict:  # a guard against a hang, not a bound on speed
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        h = httpx.get(url + "/health").json()
        if h["outstanding"] == 0 and h["active"] == 0:
            return h
        time.sleep(0.05)
    raise AssertionError(f"not idle: {h}")


def test_queue_full_then_cancelled_stream_frees_its_slot(live, caplog):
    with live(max_batch_size=1, max_queue=0) as srv, _access_log(caplog):
        # ignore_eos: the stream can end only by its length (1500 tokens, far past the test) or an abort
        body = {"model": "clover", "messages": MSG, "max_tokens": 1500, "stream": True, "ignore_eos": True}
        with httpx.Client(timeout=60) as http:
            with http.stream("POST", srv.url + "/v1/chat/completions", json=body) as r:
                assert r.status_code == 200
                lines = r.iter_lines()
                next(lines)  # the role chunk: the request is in the engine
                assert httpx.get(srv.url + "/health").json()["outstanding"] == 1
                busy = httpx.post(srv.url + "/v1/chat/completions", json={**body, "stream": False}, timeout=30)
                assert busy.status_code == 429 and busy.headers["Retry-After"] == "1"
                assert busy.json()["error"]["code"] == "queue_full"
            # the client went away mid-stream: its request is aborted and the slot freed
        _wait_idle(srv.url)
        ok = httpx.post(srv.url + "/v1/chat/completions", json={**body, "stream": False, "max_tokens": 4}, timeout=60)
        assert ok.status_code == 200
        metrics = httpx.get(srv.url + "/metrics").text
        finished = sorted(ln for ln in metrics.splitlines() if ln.startswith("clover_engine_requests_total{"))
        # the stream was aborted, never finished by its length; the one request served is the last
        assert finished == [
            'clover_engine_requests_total{reason="aborted"} 1.0',
            'clover_engine_requests_total{reason="length"} 1.0',
        ], finished
        assert 'status="429"' in metrics
        # the stream began with 200, but its client went away before the end: 499, as in the access log
        assert 'clover_requests_total{endpoint="/v1/chat/completions",status="499"} 1.0' in metrics
        assert 'clover_requests_total{endpoint="/v1/chat/completions",status="200"} 1.0' in metrics
    lines = [r.getMessage() for r in caplog.records if r.name == "uvicorn.access"]
    posts = [ln for ln in lines if '"POST /v1/chat/completions HTTP/1.1"' in ln]
    assert [ln.rsplit(" ", 1)[1] for ln in posts] == ["429", "499", "200"], lines  # one line each, as it ended


@contextlib.contextmanager
def _access_log(caplog):
    """The server's access lines (uvicorn's access logger, set up by uvicorn not to propagate)."""
    logger = logging.getLogger("uvicorn.access")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(caplog.handler)
    try:
        yield
    finally:
        logger.removeHandler(caplog.handler)
        logger.setLevel(level)


def _send_raw(url: str, path: str, body: dict) -> socket.socket:
    """An HTTP POST written on a socket of its own, its answer never read: closing the socket is
    the client going away, at a moment the test chooses."""
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    s = socket.create_connection((host, int(port)))
    s.sendall(
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    return s


def _until(check, what: str, guard_s: float = 600):
    """Poll ``check`` until it is true; ``guard_s`` only keeps a broken server from hanging the test."""
    t0 = time.monotonic()
    while not check():
        if time.monotonic() - t0 > guard_s:
            raise AssertionError(f"never: {what}")
        time.sleep(0.02)


def _finished(url: str) -> list[str]:
    return [
        ln for ln in httpx.get(url + "/metrics").text.splitlines() if ln.startswith("clover_engine_requests_total{")
    ]


def test_non_streaming_client_that_disconnects_is_aborted(live):
    """The client closes its connection while its request is in the engine (not before it got
    there, not after it finished: 1500 tokens past any end of text): the request is aborted, its
    slot freed, and it is never counted as finished."""
    with live(max_batch_size=1, max_queue=0) as srv:
        body = {"model": "clover", "messages": MSG, "max_tokens": 1500, "ignore_eos": True}
        s = _send_raw(srv.url, "/v1/chat/completions", body)
        _until(lambda: httpx.get(srv.url + "/health").json()["active"] == 1, "the request in the engine")
        s.close()
        _wait_idle(srv.url)
        aborted = 'clover_engine_requests_total{reason="aborted"} 1.0'
        assert _finished(srv.url) == [aborted]  # aborted, not finished by its length
        # the route answers 499 at its next look at the connection
        label = 'clover_requests_total{endpoint="/v1/chat/completions",status="499"} 1.0'
        _until(lambda: label in httpx.get(srv.url + "/metrics").text, "the 499 counted")
        ok = httpx.post(srv.url + "/v1/chat/completions", json={**body, "max_tokens": 4}, timeout=600)
        assert ok.status_code == 200  # the slot is free again
        assert sorted(_finished(srv.url)) == [aborted, 'clover_engine_requests_total{reason="length"} 1.0']


def test_responses_have_their_own_endpoint_labels(server):
    from tests.server.conftest import API_KEY

    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)
    r = client.responses.create(model="clover", input="hi", max_output_tokens=4)
    client.responses.retrieve(r.id)
    client.responses.input_items.list(r.id)
    metrics = httpx.get(server.url + "/metrics").text
    for label in ("/v1/responses", "/v1/responses/{id}", "/v1/responses/{id}/input_items"):
        assert f'clover_requests_total{{endpoint="{label}",status="200"}}' in metrics, label
