"""Resident memory of the server before and after requests that press on it: clients that read
their stream slowly, clients that disconnect while their prompt is prefilled, and requests sent
while the queue is full (429). A real uvicorn server over the bundled model runs in this process
(``clover.server.live.LiveServer``); its resident set (VmRSS) is read after a warm-up of the same
mix and again after N more requests, each time after ``gc.collect()`` and glibc's
``malloc_trim(0)`` (so that memory the allocator merely keeps for reuse does not count as held).

    python benchmarks/bench_server_pressure.py [--requests 500] [--clients 8] [--json FILE]

Prints the figures and the change in percent; the target is within 5 %.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import random
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

MSG = [{"role": "user", "content": "Status of drones 3, 4 and 5, and every zone near the lake?"}]


def _rss_mib() -> float:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def _send(port: int, body: dict) -> socket.socket:
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
        + data
    )
    return s


def one(port: int, i: int, max_tokens: int) -> list[str]:
    """Request ``i`` of the mix: a slow streaming reader, a disconnect soon after sending (while
    the prompt is prefilled or queued), or a plain request. A full queue answers 429; the slow and
    plain clients then retry, as a client honouring Retry-After would (sooner, to keep the queue
    full). Returns the outcome of each attempt."""
    rng = random.Random(i)
    kind = ("slow", "disconnect", "plain")[i % 3]
    body = {
        "model": "clover",
        "messages": MSG,
        "max_tokens": max_tokens,
        "stream": kind != "plain",
        "ignore_eos": True,
        "temperature": 0,
    }
    outcomes = []
    while True:
        s = _send(port, body)
        try:
            if kind == "disconnect":
                time.sleep(rng.uniform(0.0, 0.05))
                return [*outcomes, "disconnect"]
            data = b""
            while chunk := s.recv(64 if kind == "slow" else 1 << 16):
                data += chunk
                if kind == "slow":
                    time.sleep(0.001)
        finally:
            s.close()
        status = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/1.1 ") else "?"
        if status != "429":
            return [*outcomes, kind if status == "200" else f"status {status}"]
        outcomes.append("429")
        time.sleep(0.02)


def run_mix(port: int, start: int, n: int, clients: int, max_tokens: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    with ThreadPoolExecutor(clients) as pool:
        for attempts in pool.map(lambda i: one(port, i, max_tokens), range(start, start + n)):
            for r in attempts:
                counts[r] = counts.get(r, 0) + 1
    return counts


def wait_idle(url: str) -> None:
    import httpx

    while (h := httpx.get(url + "/health").json())["outstanding"] or h["active"]:
        time.sleep(0.05)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=500, help="requests measured (after the warm-up)")
    p.add_argument("--warmup", type=int, default=60, help="requests of the same mix before the first reading")
    p.add_argument("--clients", type=int, default=6, help="clients sending at once (above the capacity: 429s)")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--json", help="write the figures here")
    a = p.parse_args()

    import torch

    from clover.api.loading import load_engine
    from clover.server import create_app
    from clover.server.live import LiveServer

    torch.set_num_threads(1)
    engine = load_engine(None, max_batch_size=2, threads=1)
    with LiveServer(create_app(engine, max_queue=2)) as srv:
        warm = run_mix(srv.port, 0, a.warmup, a.clients, a.max_tokens)
        wait_idle(srv.url)
        before = _rss_mib()
        t0 = time.perf_counter()
        counts = run_mix(srv.port, a.warmup, a.requests, a.clients, a.max_tokens)
        wait_idle(srv.url)
        wall = time.perf_counter() - t0
        after = _rss_mib()
    change = 100 * (after - before) / before
    print(f"warm-up {a.warmup} requests: {warm}")
    print(f"{a.requests} requests in {wall:.0f} s: {counts}")
    print(f"VmRSS before {before:.1f} MiB, after {after:.1f} MiB: {change:+.2f} % (target within 5 %)")
    if a.json:
        Path(a.json).write_text(
            json.dumps(
                {
                    "requests": a.requests,
                    "warmup": a.warmup,
                    "clients": a.clients,
                    "max_tokens": a.max_tokens,
                    "outcomes": counts,
                    "rss_before_mib": before,
                    "rss_after_mib": after,
                    "change_percent": round(change, 2),
                    "wall_s": round(wall, 1),
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
