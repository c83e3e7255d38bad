"""The clock that grammar budgets count: this thread's CPU seconds, less the garbage collector's.

A budget guards the engine against a pattern that backtracks or a search that grows: it should
run out only when the grammar work itself took the time. The wall clock also counts what other
programs on a busy machine spend, so budgets count this thread's CPU time; and that in turn
counts a full garbage collection that happened to start inside the search (a large process
spends a few tenths of a second in one), which has nothing to do with the pattern. ``work_time``
leaves both out.
"""

from __future__ import annotations

import gc
import threading
import time

_gc = threading.local()  # per thread: .start (thread time a collection began), .spent (seconds)


def _on_gc(phase: str, info: dict) -> None:
    now = time.thread_time()
    if phase == "start":
        _gc.start = now
    elif getattr(_gc, "start", None) is not None:
        _gc.spent = getattr(_gc, "spent", 0.0) + now - _gc.start
        _gc.start = None


_install = threading.Lock()
_watching = False


def _watch_gc() -> None:
    """Count collections from the first budget on (importing the engine changes nothing)."""
    global _watching
    with _install:
        if _on_gc not in gc.callbacks:
            gc.callbacks.append(_on_gc)
        _watching = True


def work_time() -> float:
    """This thread's CPU seconds, the garbage collections that ran in it left out."""
    if not _watching:
        _watch_gc()
    return time.thread_time() - getattr(_gc, "spent", 0.0)
