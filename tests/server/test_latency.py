"""The server's own latency: every accepted connection sends without Nagle's delay, so a request on
a kept-alive connection costs no more than one on a fresh connection."""

from __future__ import annotations

import socket

import pytest

from clover.bench.latency import compare
from clover.server.listen import listen


def _loopbacks() -> list[str]:
    hosts = ["127.0.0.1"]
    if socket.has_ipv6:
        s, problem = listen("::1", 0)
        if s is not None:
            s.close()
            hosts.append("::1")
    return hosts


@pytest.mark.parametrize("host", _loopbacks())
def test_accepted_sockets_are_tcp_with_nodelay(host):
    """``clover serve``'s socket (any host, port 0 too): TCP by protocol, so asyncio sets
    TCP_NODELAY on each accepted socket, and TCP_NODELAY already on what it accepts."""
    s, problem = listen(host, 0)
    assert problem is None
    with s, socket.create_connection((host, s.getsockname()[1]), timeout=5):
        conn, _ = s.accept()
        with conn:
            assert s.proto == conn.proto == socket.IPPROTO_TCP
            assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


@pytest.mark.alone  # it times round trips
def test_kept_alive_round_trip_within_twice_a_fresh_one(live):
    """Nagle's algorithm with the client's delayed ACK held every answer on a reused connection
    about 40 ms; a fresh connection (connect included) took a few. Medians of 3 x 15 each, taken
    in turns."""
    with live() as srv:
        r = compare(srv.host, srv.port, "GET", "/health", n=15, rounds=3)
        t = compare(srv.host, srv.port, "POST", "/tokenize", {"prompt": "hello there"}, n=15, rounds=3)
    for name, x in (("/health", r), ("/tokenize", t)):
        assert x["kept_alive_ms"] <= 2 * x["fresh_ms"], (name, x)


def test_the_servers_share_of_a_request_in_metrics(live):
    """Each answered engine request adds its times outside the engine to /metrics: arrival to
    submitted, submitted to its first engine step, its last step to its last byte (a stream's too);
    a request that never reaches the engine adds none."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    with live() as srv, httpx.Client(base_url=srv.url, timeout=60) as http:
        body = {"model": "clover", "prompt": "drone", "max_tokens": 2}
        assert http.post("/v1/completions", json=body).status_code == 200
        with http.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
            assert r.status_code == 200 and "[DONE]" in "".join(r.iter_text())
        assert http.post("/tokenize", json={"prompt": "drone"}).status_code == 200
        text = http.get("/metrics").text
    got = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    for name in (
        "clover_server_before_engine_seconds",
        "clover_engine_wait_seconds",
        "clover_server_after_engine_seconds",
    ):
        assert got[name + "_count"] == 2, name
        assert 0 <= got[name + "_sum"] < 10, name
