"""A soak under mixed load: many clients for minutes against ``clover serve`` on loopback, each
sending, one after another, a random request of the mix:

- ``short``: a chat of one word, a few tokens (its latency is the one reported);
- ``tool call``: a chat offering the model's own tools, whose arguments are x-grounded;
- ``structured``: ``response_format`` json_schema;
- ``stored + chained``: ``/v1/responses`` stored, then a second turn naming it
  (``previous_response_id``), then read back, then deleted;
- ``stream cut``: a streamed chat whose client goes away at a random point;
- ``oversized``: a body over the server's limit, or a 1,000,000-character message with grounded
  tools (413 either way);
- ``malformed``: a body that is not JSON, or JSON that is not a request (400).

The server (the bundled model, ``--responses-db`` in a temporary folder) runs in its own process
(``clover.bench.served``); its resident set (VmRSS) is read after a warm-up of the same
mix and again at the end, each time once it is idle, and every minute meanwhile. The prompts are
drawn from a small set (8 drones, 4 zones), as a deployment's repeat: the server's bounded
memories (the prefix cache, the grammars' caches) fill during the warm-up, so what grows after
it is what no bound holds. An error is any answer the request's kind
does not expect (every 2xx, the 4xx it asks for and 429 are expected), a connection that
failed, or a body that is not what the route promises.

    python benchmarks/soak.py [--clients 64] [--minutes 10] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from clover.bench import print_table, write_json
from clover.bench.results import Recorder
from clover.bench.served import ServeProcess

SCHEMA = {
    "type": "object",
    "properties": {"drone": {"type": "string"}, "count": {"type": "integer"}},
    "required": ["drone", "count"],
}
HUGE = "drone D-17 near the lake " * 40_000  # 1,000,000 characters
WEIGHTS = {
    "short": 4,
    "tool call": 3,
    "structured": 2,
    "stored + chained": 2,
    "stream cut": 2,
    "oversized": 1,
    "malformed": 1,
}


class Failed(Exception):
    """An answer the request's kind does not expect."""


def _expect(r: httpx.Response, *codes: int) -> httpx.Response:
    """``r`` when its status is one of ``codes`` (429, a full queue, always is: it says so)."""
    if r.status_code == 429:
        raise Busy()
    if r.status_code not in codes:
        raise Failed(f"{r.request.url.path}: {r.status_code} {r.text[:200]}")
    return r


class Busy(Exception):
    """429: the queue was full (expected under load)."""


def _chat(c: httpx.Client, messages: list[dict], **kw) -> dict:
    body = {"model": "clover", "messages": messages, "temperature": 0, **kw}
    return _expect(c.post("/v1/chat/completions", json=body), 200).json()


def short(c: httpx.Client, rng: random.Random, tools: list[dict]) -> None:
    out = _chat(c, [{"role": "user", "content": "hello"}], max_tokens=4)
    if out["choices"][0]["message"]["role"] != "assistant":
        raise Failed("short: no assistant message")


def tool_call(c: httpx.Client, rng: random.Random, tools: list[dict]) -> None:
    ask = f"Recall drone D-{rng.randint(1, 8)} to its base, and check zone Z{rng.randint(1, 4)}."
    out = _chat(c, [{"role": "user", "content": ask}], tools=tools, max_tokens=64)
    for call in out["choices"][0]["message"].get("tool_calls") or []:
        json.loads(call["function"]["arguments"])  # grounded or not, arguments are JSON


def structured(c: httpx.Client, rng: random.Random, tools: list[dict]) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "count", "schema": SCHEMA}}
    out = _chat(
        c, [{"role": "user", "content": "How many drones are near the lake?"}], response_format=fmt, max_tokens=48
    )
    choice = out["choices"][0]
    if choice["finish_reason"] != "length":
        json.loads(choice["message"]["content"])


def stored(c: httpx.Client, rng: random.Random, tools: list[dict]) -> None:
    first = {"model": "clover", "input": f"Where is drone {rng.randint(1, 8)}?", "max_output_tokens": 12}
    rid = _expect(c.post("/v1/responses", json=first), 200).json()["id"]
    second = {"model": "clover", "input": "And now?", "previous_response_id": rid, "max_output_tokens": 12}
    rid2 = _expect(c.post("/v1/responses", json=second), 200).json()["id"]
    if _expect(c.get(f"/v1/responses/{rid2}"), 200).json()["id"] != rid2:
        raise Failed("stored: another response read back")
    _expect(c.get(f"/v1/responses/{rid2}/input_items"), 200)
    _expect(c.delete(f"/v1/responses/{rid}"), 200)
    _expect(c.get(f"/v1/responses/{rid}"), 404)


def stream_cut(c: httpx.Client, rng: random.Random, tools: list[dict]) -> None:
    body = {"model": "clover", "messages": [{"role": "user", "content": "Status of every drone?"}]}
    body.update(stream=True, max_tokens=48, ignore_eos=True)
    keep = rng.randint(0, 12)  # lines read before going away
    with c.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            r.read()
            _expect(r, 200)
        for i, _line in enumerate(r.iter_lines()):
            if i >= keep:
                break


def oversized(c: httpx.Client, rng: random.Random, tools: list[dict]) -> None:
    if rng.random() < 0.5:
        body = {"model": "clover", "messages": [{"role": "user", "content": HUGE}], "tools": tools}
        r = _expect(c.post("/v1/chat/completions", json=body), 413)
        if r.json()["error"]["code"] != "prompt_too_long":
            raise Failed(f"oversized: {r.text[:200]}")
        return
    port = c.base_url.port
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:  # says 8 MiB, sends 64 KiB
        head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        s.sendall(f"{head}Content-Length: {8 << 20}\r\nConnection: close\r\n\r\n".encode() + b"{" * (64 << 10))
        status = s.recv(64).split(b" ", 2)[1:2]
    if status != [b"413"]:
        raise Failed(f"oversized body: {status}")


def malformed(c: httpx.Client, rng: random.Random, tools: list[dict]) -> None:
    bodies = [b"{not json", b"[1, 2]", json.dumps({"model": "clover", "messages": "hi"}).encode()]
    body = bodies[rng.randrange(len(bodies))]
    _expect(c.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"}), 400, 422)


KINDS = {
    "short": short,
    "tool call": tool_call,
    "structured": structured,
    "stored + chained": stored,
    "stream cut": stream_cut,
    "oversized": oversized,
    "malformed": malformed,
}


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.outcomes: dict[str, Counter] = {k: Counter() for k in KINDS}
        self.latency: dict[str, list[float]] = {k: [] for k in KINDS}
        self.errors: list[str] = []

    def add(self, kind: str, outcome: str, seconds: float, error: str | None = None) -> None:
        with self.lock:
            self.outcomes[kind][outcome] += 1
            if outcome == "ok":
                self.latency[kind].append(seconds)
            if error is not None and len(self.errors) < 20:
                self.errors.append(f"{kind}: {error}")


def client(url: str, seed: int, until: float, tools: list[dict], tally: Tally) -> None:
    rng = random.Random(seed)
    kinds, weights = list(WEIGHTS), list(WEIGHTS.values())
    with httpx.Client(base_url=url, timeout=120) as c:
        while time.monotonic() < until:
            kind = rng.choices(kinds, weights)[0]
            t0 = time.perf_counter()
            try:
                KINDS[kind](c, rng, tools)
                tally.add(kind, "ok", time.perf_counter() - t0)
            except Busy:
                tally.add(kind, "429", 0)
                time.sleep(0.05)
            except (Failed, httpx.HTTPError, OSError, ValueError, KeyError) as e:
                tally.add(kind, "error", 0, f"{type(e).__name__}: {e}")


def run(srv: ServeProcess, clients: int, seconds: float, tools: list[dict], seed: int) -> tuple[Tally, float, list]:
    """``clients`` clients for ``seconds``; → their tally, the wall time, the server's VmRSS each minute."""
    tally, t0, rss = Tally(), time.monotonic(), []
    with ThreadPoolExecutor(clients + 1) as pool:
        jobs = [pool.submit(client, srv.url, seed + i, t0 + seconds, tools, tally) for i in range(clients)]
        while not all(j.done() for j in jobs):
            if time.monotonic() - t0 >= 60 * (len(rss) + 1):
                rss.append(round(srv.rss_mib(), 1))
            time.sleep(0.5)
        for j in jobs:
            j.result()
    return tally, time.monotonic() - t0, rss


def wait_idle(url: str, limit_s: float = 300) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        h = httpx.get(url + "/health", timeout=30).json()
        if not h["outstanding"] and not h["active"]:
            return
        time.sleep(0.2)
    raise RuntimeError("the server did not go idle")


def quantile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def ms(x: float | None) -> str:
    return "-" if x is None else f"{1000 * x:.0f}"


def kinds_table(rec: Recorder, a, tally: Tally, wall: float) -> int:
    """Each kind's counts and latencies; → the requests sent."""
    rows = []
    for kind, n in tally.outcomes.items():
        lat = tally.latency[kind]
        p50, p99 = ms(quantile(lat, 0.5)), ms(quantile(lat, 0.99))
        rows.append([kind, sum(n.values()), n["ok"], n["429"], n["error"], p50, p99])
    print_table(
        rec,
        f"soak: {a.clients} clients for {wall / 60:.1f} minutes against clover serve (bundled model, 1 thread)",
        ["request", "sent", "answered as expected", "429", "errors", "p50 ms", "p99 ms"],
        rows,
    )
    return sum(r[1] for r in rows)


def report(rec: Recorder, a, tally: Tally, wall: float, before: float, after: float) -> dict:
    sent = kinds_table(rec, a, tally, wall)
    errors = sum(n["error"] for n in tally.outcomes.values())
    change = 100 * (after - before) / before
    p50, p99 = quantile(tally.latency["short"], 0.5), quantile(tally.latency["short"], 0.99)
    columns = ["clients", "minutes", "requests", "unexpected errors", "RSS before MiB", "RSS after MiB"]
    row = [a.clients, f"{wall / 60:.1f}", sent, errors, f"{before:.0f}", f"{after:.0f}", f"{change:+.1f} %", ms(p99)]
    print_table(rec, "soak: the server after it", [*columns, "RSS change", "short p99 ms"], [row])
    for e in tally.errors:
        print("error:", e)
    return {
        "clients": a.clients,
        "minutes": round(wall / 60, 2),
        "requests": sent,
        "outcomes": {k: dict(v) for k, v in tally.outcomes.items()},
        "errors": errors,
        "first_errors": tally.errors,
        "rss_before_mib": round(before, 1),
        "rss_after_mib": round(after, 1),
        "rss_change_percent": round(change, 2),
        "short_p50_ms": None if p50 is None else round(1000 * p50, 1),
        "short_p99_ms": None if p99 is None else round(1000 * p99, 1),
    }


def main(argv: list[str] | None = None) -> dict:
    rec = Recorder()  # the result file: this command line, its start, the tables printed
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--warmup-s", type=float, default=90.0, help="seconds of the same mix before the first reading")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the figures here (a result file)")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        args = ["--responses-db", Path(tmp) / "responses.sqlite", "--log-level", "warning"]
        with ServeProcess(args, log=Path(tmp) / "serve.log") as srv:
            tools = httpx.get(srv.url + "/playground/config", timeout=30).json()["tools"]
            run(srv, a.clients, a.warmup_s, tools, a.seed + 10_000)
            wait_idle(srv.url)
            before = srv.rss_mib()
            tally, wall, by_minute = run(srv, a.clients, 60 * a.minutes, tools, a.seed)
            wait_idle(srv.url)
            after = srv.rss_mib()
            alive = srv.proc.poll() is None
    figures = {**report(rec, a, tally, wall, before, after), "rss_mib_each_minute": by_minute, "server_alive": alive}
    write_json(rec, a.json, figures)
    return figures


if __name__ == "__main__":
    main()
