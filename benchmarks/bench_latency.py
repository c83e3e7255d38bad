"""The server's own latency: kept-alive and fresh round trips, and the server's share of a request.

python benchmarks/bench_latency.py [--model DIR] [--threads 1] [--n 20] [--rounds 3] [--streams 16]
                                   [--per-stream 4] [--url URL] [--json out.json]

Starts ``clover serve`` on loopback (a subprocess on a port the system picks; ``--url``: measure
a server already running instead) and times, with the standard library's HTTP client, ``/health``,
``/tokenize`` and a one-token completion, each ``--rounds`` x ``--n`` times over one kept-alive
connection and over a fresh connection per request (connect included), in turns: the medians.
Then the server's share of a request, from its /metrics (``clover.bench.latency.SHARE``): streamed
chats of 32 tokens, one at a time (batch 1) and from ``--streams`` clients at once, each
``--per-stream`` requests: the mean time from arrival to submitted to the engine thread, from
submitted to the request's first engine step, and from its last step to its last byte sent.
"""

from __future__ import annotations

import argparse
import json
from urllib.parse import urlparse

from clover.bench import print_table, write_json
from clover.bench.latency import SHARE, measure_latency, server_share
from clover.bench.results import Recorder
from clover.bench.served import served


def _measure(host: str, port: int, args) -> dict:
    server_share(host, port, 1, 2)  # warm-up: the first passes and the first stream
    figures = {"latency": measure_latency(host, port, args.n, args.rounds)}
    figures["share"] = {
        "batch 1": server_share(host, port, 1, args.per_stream * 4),
        f"{args.streams} streams": server_share(host, port, args.streams, args.per_stream),
    }
    return figures


def _tables(rec: Recorder, figures: dict, args) -> None:
    rows = [[name, r["kept_alive_ms"], r["fresh_ms"], r["ratio"]] for name, r in figures["latency"].items()]
    print_table(
        rec,
        f"request latency, kept-alive vs fresh connections (medians of {args.rounds} x {args.n})",
        ["request", "kept-alive ms", "fresh ms", "kept-alive / fresh"],
        rows,
        ["fresh: connect included; kept-alive: every request on one open connection"],
    )
    rows = [
        [load, r["requests"], *[r[name] for name, _ in SHARE], r["round_trip_ms"]]
        for load, r in figures["share"].items()
    ]
    print_table(
        rec,
        "the server's share of a streamed chat request (32 tokens; means, ms)",
        ["load", "requests", *[title + " ms" for _, title in SHARE], "round trip ms"],
        rows,
        [
            "arrival: the request's headers in; submitted: parsed, rendered, tokenized and handed to the "
            "engine thread; first step: the start of the first engine step after the engine took it in",
            "last step to last byte: from the end of the engine step that finished it to its last byte sent",
        ],
    )


def main() -> None:
    rec = Recorder()  # the result file: this command line, its start, the tables printed
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--threads", type=int, default=1, help="the server's torch threads")
    ap.add_argument("--n", type=int, default=20, help="requests per round and kind of connection")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--streams", type=int, default=16, help="clients at once for the share under load")
    ap.add_argument("--per-stream", type=int, default=4, help="requests each of them sends")
    ap.add_argument("--url", help="a running server to measure instead of starting one")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.url:
        u = urlparse(args.url)
        figures = _measure(u.hostname, u.port or 80, args)
    else:
        flags = ["--log-level", "warning", "--max-batch-size", str(max(16, args.streams))]
        with served(flags + (["--model", args.model] if args.model else []), args.threads, "bench_latency") as url:
            u = urlparse(url)
            figures = _measure(u.hostname, u.port, args)
    figures.update(threads=args.threads, model=args.model or "bundled")
    _tables(rec, figures, args)
    write_json(rec, args.json, figures)
    print(json.dumps({k: round(r["ratio"], 2) for k, r in figures["latency"].items()}))


if __name__ == "__main__":
    main()
