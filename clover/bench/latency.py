"""Request latency against a running server, over one kept-alive connection and over a fresh
connection per request (``benchmarks/bench_latency.py``, and the test that a kept-alive round trip
costs no more than a fresh one): each request's round trip, request sent to the last byte of
its answer read, with the standard library's HTTP client.
"""

from __future__ import annotations

import http.client
import json
import statistics
import time

# (name, method, path, body): the requests the benchmark times; the completion asks for one token
CASES = (
    ("/health", "GET", "/health", None),
    ("/tokenize", "POST", "/tokenize", {"prompt": "Close the airspace over the harbour until 18:00."}),
    (
        "1-token completion",
        "POST",
        "/v1/completions",
        {"prompt": "Close the airspace over the harbour", "max_tokens": 1, "temperature": 0},
    ),
)


def _request(conn: http.client.HTTPConnection, method: str, path: str, body, headers: dict) -> float:
    """One request on ``conn``: seconds from sending it to the last byte of the answer read."""
    data = None if body is None else json.dumps(body).encode()
    head = dict(headers, **({"Content-Type": "application/json"} if data is not None else {}))
    t0 = time.perf_counter()
    conn.request(method, path, body=data, headers=head)
    r = conn.getresponse()
    r.read()
    dt = time.perf_counter() - t0
    if r.status != 200:
        raise RuntimeError(f"{method} {path}: HTTP {r.status}")
    return dt


def round_trips(
    host: str, port: int, method: str, path: str, body=None, n: int = 20, fresh: bool = False, headers=None
) -> list[float]:
    """``n`` round trips of one request, each on a fresh connection (connect included, as a client
    without keep-alive pays it) or all on one kept-alive connection (after one untimed request
    that opens it)."""
    headers = headers or {}
    times = []
    if fresh:
        for _ in range(n):
            conn = http.client.HTTPConnection(host, port, timeout=60)
            t0 = time.perf_counter()
            conn.connect()
            times.append(time.perf_counter() - t0 + _request(conn, method, path, body, headers))
            conn.close()
        return times
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        _request(conn, method, path, body, headers)  # opens the connection
        times = [_request(conn, method, path, body, headers) for _ in range(n)]
    finally:
        conn.close()
    return times


def compare(host: str, port: int, method: str, path: str, body=None, n: int = 20, rounds: int = 3, headers=None):
    """{"kept_alive_ms", "fresh_ms"}: median round trips, the two kinds taken in turns over
    ``rounds`` rounds of ``n`` each (so a busy moment of the machine falls on both)."""
    kept, fresh = [], []
    for _ in range(rounds):
        kept += round_trips(host, port, method, path, body, n, False, headers)
        fresh += round_trips(host, port, method, path, body, n, True, headers)
    return {"kept_alive_ms": 1e3 * statistics.median(kept), "fresh_ms": 1e3 * statistics.median(fresh)}


def measure_latency(host: str, port: int, n: int = 20, rounds: int = 3, model: str | None = None) -> dict:
    """Every one of ``CASES``: name → ``compare``'s medians and their ratio. ``model``: the id to
    send in the completion's body."""
    out = {}
    for name, method, path, body in CASES:
        if body is not None and model is not None and path.startswith("/v1/"):
            body = dict(body, model=model)
        r = compare(host, port, method, path, body, n, rounds)
        r["ratio"] = r["kept_alive_ms"] / r["fresh_ms"]
        out[name] = r
    return out
