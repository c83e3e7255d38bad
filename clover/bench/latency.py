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
    text = r.read().decode(errors="replace")
    dt = time.perf_counter() - t0
    if r.status != 200:
        raise RuntimeError(f"{method} {path}: HTTP {r.status}: {text[:300]}")
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


def measure_latency(host: str, port: int, n: int = 20, rounds: int = 3, model: str = "clover") -> dict:
    """Every one of ``CASES``: name → ``compare``'s medians and their ratio. ``model``: the id to
    send in the completion's body."""
    out = {}
    for name, method, path, body in CASES:
        if path.startswith("/v1/"):
            body = dict(body, model=model)
        r = compare(host, port, method, path, body, n, rounds)
        r["ratio"] = r["kept_alive_ms"] / r["fresh_ms"]
        out[name] = r
    return out


SHARE = (
    ("clover_server_before_engine_seconds", "arrival to submitted"),
    ("clover_engine_wait_seconds", "submitted to first step"),
    ("clover_server_after_engine_seconds", "last step to last byte"),
)
CHAT = {
    "messages": [{"role": "user", "content": "Close the airspace over the harbour until 18:00."}],
    "max_tokens": 32,
    "temperature": 0,
    "stream": True,
}


def _share_totals(host: str, port: int) -> dict:
    """The server's /metrics: (sum, count) of each of ``SHARE``'s histograms."""
    from prometheus_client.parser import text_string_to_metric_families  # deferred: only when measured

    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    got = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    return {name: (got.get(name + "_sum", 0.0), got.get(name + "_count", 0.0)) for name, _ in SHARE}


def server_share(host: str, port: int, streams: int, per_stream: int, model: str = "clover") -> dict:
    """``streams`` clients at once, each sending ``per_stream`` streamed chat requests one after
    another on its own kept-alive connection (``CHAT``) → the server's mean share of a request in
    ms (``SHARE``'s names → ms, from /metrics over these requests only) and the mean round trip."""
    from concurrent.futures import ThreadPoolExecutor

    body = dict(CHAT, model=model)

    def client(_):
        conn = http.client.HTTPConnection(host, port, timeout=600)
        try:
            return [_request(conn, "POST", "/v1/chat/completions", body, {}) for _ in range(per_stream)]
        finally:
            conn.close()

    before = _share_totals(host, port)
    with ThreadPoolExecutor(streams) as pool:
        times = [t for ts in pool.map(client, range(streams)) for t in ts]
    after = _share_totals(host, port)
    out = {"requests": len(times), "round_trip_ms": 1e3 * statistics.mean(times)}
    for name, _ in SHARE:
        s, n = (a - b for a, b in zip(after[name], before[name]))
        out[name] = 1e3 * s / n if n else float("nan")
    return out
