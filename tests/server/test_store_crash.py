"""Stored responses survive a crash: ``clover serve --responses-db`` is killed with SIGKILL in
the middle of a burst of 200 stores, three times; after each restart every response a client
was answered for is there, as it was answered, and no row of the database is half-written."""

from __future__ import annotations

import json
import random
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx

from clover.bench.served import ServeProcess

BURST, CLIENTS, ROUNDS = 200, 12, 3


def _burst(srv: ServeProcess, tag: str, kill_after: int) -> dict[str, dict]:
    """Up to ``BURST`` stores from ``CLIENTS`` threads; the server is killed once ``kill_after``
    of them were answered. → the acknowledged responses by id."""
    acked: dict[str, dict] = {}
    lock = threading.Lock()

    def one(i: int) -> None:
        if srv.proc.poll() is not None:
            return
        body = {"model": "clover", "input": f"Status of drone {i} ({tag})?", "max_output_tokens": 6}
        try:
            r = httpx.post(srv.url + "/v1/responses", json=body, timeout=60)
        except httpx.HTTPError:
            return  # the server is gone: never acknowledged
        if r.status_code != 200:
            assert r.status_code == 429, r.text
            return
        with lock:
            acked[r.json()["id"]] = r.json()
            if len(acked) == kill_after:
                srv.kill()

    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(one, range(BURST)))
    return acked


def _check(srv: ServeProcess, acked: dict[str, dict]) -> None:
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        for rid, body in acked.items():
            r = c.get(f"/v1/responses/{rid}")
            assert r.status_code == 200, (rid, r.text)
            assert r.json() == body


def _rows_whole(db) -> int:
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT id, body, input, size FROM responses").fetchall()
    finally:
        con.close()
    for rid, body, items, size in rows:
        b = json.loads(body)
        assert b["id"] == rid and isinstance(json.loads(items), list)
        assert size == len(body.encode()) + len(items.encode())
    return len(rows)


def test_acknowledged_responses_survive_sigkill(tmp_path):
    db, log, rng = tmp_path / "responses.sqlite", tmp_path / "serve.log", random.Random(52)
    acked: dict[str, dict] = {}
    args = ["--responses-db", db, "--max-queue", "256", "--log-level", "warning"]
    for round_ in range(ROUNDS):
        with ServeProcess(args, log=log) as srv:
            _check(srv, acked)
            new = _burst(srv, f"round {round_}", kill_after=rng.randint(40, 120))
            assert srv.proc.poll() is not None, "the server was not killed during the burst"
            assert new, "no store was acknowledged before the kill"
            acked.update(new)
        rows = _rows_whole(db)
        print(f"round {round_}: {len(new)} acknowledged before SIGKILL; {rows} whole rows, {len(acked)} acknowledged")
        assert rows >= len(acked)
    with ServeProcess(args, log=log) as srv:
        _check(srv, acked)


def test_a_store_is_one_transaction_in_a_wal_file(tmp_path, monkeypatch):
    import asyncio

    import pytest

    from clover.api.errors import APIError
    from clover.api.store import ResponseStore

    store = ResponseStore(str(tmp_path / "r.sqlite"))
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    body = {"id": "resp_1", "output": []}
    asyncio.run(store.aput("resp_1", body, [], None))  # from an event loop: in the store's thread
    assert asyncio.run(store.aget("resp_1", None)).body == body

    def fails(keep=None):
        raise RuntimeError("disk full")

    monkeypatch.setattr(store, "_evict", fails)
    with pytest.raises(RuntimeError):
        store.put("resp_2", {"id": "resp_2"}, [], None)  # its insert is rolled back with it
    with pytest.raises(APIError, match="no response with id"):
        store.get("resp_2", None)
    assert len(store) == 1
    store.close()
