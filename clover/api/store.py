"""Stored responses (the Responses API's ``store``): bounded, in memory or in SQLite.

A stored response is its ``response`` object and the input items the model read (the earlier
turns' and its own), so ``previous_response_id`` continues a conversation without the client
resending it, and ``GET /v1/responses/{id}`` / ``/input_items`` read it back. The store is
bounded three ways: entries, bytes (of the JSON kept) and a time to live counted from creation;
past a bound the least recently used response goes first. An id that went (evicted, expired or
deleted) is remembered, so asking for it again says why instead of a bare "not found". With an
owner (a hash of the API key that created it) a response is visible to that key only: to any
other it does not exist.

``path``: an SQLite file (``clover serve --responses-db``), so responses survive a restart
and a crash: the file is in WAL mode with full synchronisation, and each store or delete
(with the evictions it causes) is one transaction, committed before the client is answered, so
a response that was acknowledged is there after a crash, and one that was not is either whole
or absent. Otherwise a database in memory. Both run the same code, on the standard library's
``sqlite3``. The server calls the ``a…`` methods: each runs in the store's own thread, never
on the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from clover.api.errors import APIError

MAX_ENTRIES = 4096
MAX_MB = 256.0
TTL_S = 7 * 24 * 3600.0
GONE_KEPT = 65536  # ids remembered as gone (evicted, expired, deleted), newest first

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY, owner TEXT, created REAL NOT NULL, used REAL NOT NULL, size INTEGER NOT NULL,
    body TEXT NOT NULL, input TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS responses_used ON responses (used);
CREATE TABLE IF NOT EXISTS gone (id TEXT PRIMARY KEY, owner TEXT, reason TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS gone_at ON gone (at);
"""


def owner_of(api_key: str | None) -> str | None:
    """Who a response belongs to: a hash of the key that created it (the key itself is not kept)."""
    return None if api_key is None else hashlib.sha256(api_key.encode()).hexdigest()[:32]


@dataclass
class Stored:
    id: str
    body: dict  # the ``response`` object
    input: list[dict]  # the items the model read, each with an id
    created: float


class ResponseStore:
    def __init__(
        self,
        path: str | None = None,
        max_entries: int = MAX_ENTRIES,
        max_mb: float = MAX_MB,
        ttl_s: float = TTL_S,
        clock=time.time,
    ):
        if max_entries < 1 or max_mb <= 0 or ttl_s <= 0:
            raise ValueError("the response store needs max_entries >= 1, max_mb > 0 and ttl_s > 0")
        self.path, self.max_entries, self.max_bytes, self.ttl_s = path, max_entries, int(max_mb * 2**20), ttl_s
        self.clock = clock
        # autocommit: ``_transaction`` opens and commits each one itself; one lock, one user at a time
        self.db = sqlite3.connect(path or ":memory:", check_same_thread=False, isolation_level=None)
        self._lock = threading.RLock()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="clover-store")
        if path:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(_SCHEMA)

    def close(self) -> None:
        self._thread.shutdown(wait=True)
        with self._lock:
            self.db.close()

    @contextmanager
    def _transaction(self):
        """One transaction (nested uses join the outer one): all of it is written, or none."""
        with self._lock:
            if self.db.in_transaction:
                yield
                return
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except APIError:  # an answer (a 404 saying why), not a failure: what was done stays
                self.db.execute("COMMIT")
                raise
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    # -- from the event loop: the same, in the store's thread -------------------------------------
    async def _off_loop(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._thread, functools.partial(fn, *args))

    async def aput(self, rid: str, body: dict, input_items: list[dict], owner: str | None) -> None:
        await self._off_loop(self.put, rid, body, input_items, owner)

    async def aget(self, rid: str, owner: str | None) -> Stored:
        return await self._off_loop(self.get, rid, owner)

    async def adelete(self, rid: str, owner: str | None) -> None:
        await self._off_loop(self.delete, rid, owner)

    # -- writing --------------------------------------------------------------------------------
    def put(self, rid: str, body: dict, input_items: list[dict], owner: str | None) -> None:
        """Keep a response (replacing one of the same id), then evict down to the bounds."""
        b, i = json.dumps(body, ensure_ascii=False), json.dumps(input_items, ensure_ascii=False)
        size, now = len(b.encode()) + len(i.encode()), self.clock()
        with self._transaction():
            if size > self.max_bytes:
                self._forget(rid, owner, f"it was {size} bytes, more than the store's {self.max_bytes}")
                return
            self.db.execute("DELETE FROM gone WHERE id = ?", (rid,))
            self.db.execute(
                "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?)", (rid, owner, now, now, size, b, i)
            )
            self._evict(keep=rid)

    def delete(self, rid: str, owner: str | None) -> None:
        """Remove a response (404 where it is not there for this owner)."""
        with self._transaction():
            self.get(rid, owner)
            self._forget(rid, owner, "it was deleted")

    def _forget(self, rid: str, owner: str | None, reason: str) -> None:
        with self._transaction():
            self.db.execute("DELETE FROM responses WHERE id = ?", (rid,))
            self.db.execute("INSERT OR REPLACE INTO gone VALUES (?, ?, ?, ?)", (rid, owner, reason, self.clock()))
            self.db.execute(
                "DELETE FROM gone WHERE id IN (SELECT id FROM gone ORDER BY at DESC LIMIT -1 OFFSET ?)", (GONE_KEPT,)
            )

    def _evict(self, keep: str | None = None) -> None:
        """Expired responses out; then the least recently used while over a bound (in the caller's transaction)."""
        cutoff = self.clock() - self.ttl_s
        for rid, owner in self.db.execute("SELECT id, owner FROM responses WHERE created < ?", (cutoff,)).fetchall():
            self._forget(rid, owner, f"it expired ({self.ttl_s:g} s after it was created)")
        while True:
            n, total = self.db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM responses").fetchone()
            if n <= self.max_entries and total <= self.max_bytes:
                return
            row = self.db.execute(
                "SELECT id, owner FROM responses WHERE id != ? ORDER BY used LIMIT 1", (keep or "",)
            ).fetchone()
            if row is None:
                return
            bound = f"{self.max_entries} responses" if n > self.max_entries else f"{self.max_bytes} bytes"
            self._forget(row[0], row[1], f"it was evicted (least recently used, the store holds at most {bound})")

    # -- reading --------------------------------------------------------------------------------
    def get(self, rid: str, owner: str | None) -> Stored:
        """The stored response, marked as used; a 404 saying why where there is none."""
        with self._transaction():
            return self._get(rid, owner)

    def _get(self, rid: str, owner: str | None) -> Stored:
        row = self.db.execute("SELECT owner, created, body, input FROM responses WHERE id = ?", (rid,)).fetchone()
        if row is not None and row[0] == owner:
            if row[1] < self.clock() - self.ttl_s:
                self._evict()
            else:
                self.db.execute("UPDATE responses SET used = ? WHERE id = ?", (self.clock(), rid))
                return Stored(rid, json.loads(row[2]), json.loads(row[3]), row[1])
        gone = self.db.execute("SELECT owner, reason FROM gone WHERE id = ?", (rid,)).fetchone()
        if gone is not None and gone[0] == owner:
            raise not_found(rid, f"response {rid!r} is no longer stored: {gone[1]}")
        raise not_found(
            rid,
            f"no response with id {rid!r} is stored (responses are kept only when the request "
            "had store set, which is the default)",
        )

    def __len__(self) -> int:
        with self._lock:
            return self.db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]


def not_found(rid: str, message: str) -> APIError:
    return APIError(404, message, param="response_id", code="response_not_found")
