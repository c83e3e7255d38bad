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


def test_kept_alive_round_trip_within_twice_a_fresh_one(live):
    """Nagle's algorithm with the client's delayed ACK held every answer on a reused connection
    about 40 ms; a fresh connection (connect included) took a few. Medians of 3 x 15 each, taken
    in turns."""
    with live() as srv:
        r = compare(srv.host, srv.port, "GET", "/health", n=15, rounds=3)
        t = compare(srv.host, srv.port, "POST", "/tokenize", {"prompt": "hello there"}, n=15, rounds=3)
    for name, x in (("/health", r), ("/tokenize", t)):
        assert x["kept_alive_ms"] <= 2 * x["fresh_ms"], (name, x)
