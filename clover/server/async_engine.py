"""The engine in its own thread, and the asyncio side that talks to it (docs/architecture.md, Serving).

The event loop only parses, renders, tokenises and formats. Every model call happens in one
background thread that owns the ``Engine``: commands (add, abort, call) reach it through a
thread-safe queue and are applied between engine steps; each request's events come back to
its own ``asyncio.Queue``, a step's events in one ``loop.call_soon_threadsafe``. Requests beyond the running
batch wait in the engine's FIFO, up to ``max_queue`` of them; past that ``submit`` raises
``QueueFull`` at once (the server answers 429).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field

from clover.api.replies import new_id
from clover.engine import Engine, Event, Finished, RequestOutput, SamplingParams, StepEvent

log = logging.getLogger("clover.server")
# the HTTP request's timestamps (perf_counter), when the app's guard set a dict here: "submitted" (to
# the engine thread), "first_step" (the start of the first engine step after the engine took it in)
# and "last_step" (the end of the step that finished it), for /metrics' server share
REQUEST_TIMES: ContextVar[dict | None] = ContextVar("clover_request_times", default=None)


class QueueFull(Exception):
    """Running batch and waiting queue are both full."""


class EngineFailure(RuntimeError):
    """The engine raised while running a request (the request is dropped; the server lives on)."""


@dataclass
class _Sink:
    """Where the engine thread puts one request's events: that request's asyncio queue."""

    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    steps: bool = False  # forward StepEvents (the playground's live view); TextDelta/Finished always
    times: dict | None = None  # the HTTP request's REQUEST_TIMES, shared by its handles

    def put(self, item: Event | BaseException) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the loop is closed (shutdown): nobody is listening any more
            pass


def _deliver(items: list) -> None:
    for q, item in items:
        q.put_nowait(item)


def _hand_over(loop: asyncio.AbstractEventLoop, items: list) -> None:
    """``(queue, event)`` pairs onto their queues in ``loop``, in one call: each call wakes the loop
    with a system call, which lets it take the GIL from the engine thread (that then waits for it
    back), so a step's events go over together, not one wake-up each."""
    try:
        loop.call_soon_threadsafe(_deliver, items)
    except RuntimeError:  # the loop is closed (shutdown): nobody is listening any more
        pass


class RequestHandle:
    """One submitted request, from the event loop's side."""

    def __init__(self, owner: AsyncEngine, request_id: str, sink: _Sink):
        self.owner, self.request_id, self.sink = owner, request_id, sink
        self.done = False

    async def events(self) -> AsyncIterator[Event]:
        """Its events until ``Finished``; an engine error is raised here (ValueError, EngineFailure)."""
        while not self.done:
            item = await self.sink.queue.get()
            if isinstance(item, BaseException):
                self.done = True
                raise item
            if isinstance(item, Finished):
                self.done = True
            yield item

    async def result(self) -> RequestOutput:
        out = None
        async for ev in self.events():
            if isinstance(ev, Finished):
                out = ev.output
        return out

    def abort(self) -> None:
        """Stop it (client gone): the engine frees its caches before its next step."""
        if not self.done:
            self.done = True
            self.owner.abort(self.request_id)


class AsyncEngine:
    def __init__(self, engine: Engine, max_queue: int = 64, max_batch_size: int | None = None):
        self.engine = engine
        self.max_batch_size = (
            max_batch_size or getattr(engine, "max_batch_size", None) or engine.scheduler.max_batch_size
        )
        self.max_queue = max_queue
        self.on_finished: Callable[[RequestOutput], None] | None = None  # called in the engine thread
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._sinks: dict[str, _Sink] = {}  # engine thread only
        self._starting: list[dict] = []  # engine thread only: REQUEST_TIMES of requests added since the last step
        self._lock = threading.Lock()
        self._outstanding = 0  # submitted and not yet finished
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.snapshot = {"active": 0, "waiting": 0, "steps": 0, "step_s": 0.0}  # written by the engine thread

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="clover-engine", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._commands.put(("wake",))
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def capacity(self) -> int:
        return self.max_batch_size + self.max_queue

    @property
    def outstanding(self) -> int:
        return self._outstanding

    # -- the event loop's side ----------------------------------------------------------------
    def submit_many(
        self, items: list[tuple[list[int], SamplingParams]], prefix: str = "req", steps: bool = False
    ) -> list[RequestHandle]:
        """Queue requests, all or none (QueueFull). Call from the event loop."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._outstanding + len(items) > self.capacity:
                raise QueueFull(self.capacity)
            self._outstanding += len(items)
        times = REQUEST_TIMES.get()
        if times is not None:
            times.setdefault("submitted", time.perf_counter())
        handles = []
        for prompt_ids, params in items:
            rid = new_id(prefix)
            sink = _Sink(loop, steps=steps, times=times)
            self._commands.put(("add", rid, prompt_ids, params, sink))
            handles.append(RequestHandle(self, rid, sink))
        return handles

    def submit(self, prompt_ids: list[int], params: SamplingParams, prefix: str = "req", steps: bool = False):
        return self.submit_many([(prompt_ids, params)], prefix, steps)[0]

    def abort(self, request_id: str) -> None:
        self._commands.put(("abort", request_id))

    async def call(self, fn: Callable[[], object]):
        """Run ``fn()`` in the engine thread between two steps (model code off the event loop)."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._commands.put(("call", fn, fut))
        return await asyncio.wrap_future(fut)

    # -- the engine thread --------------------------------------------------------------------
    def _release(self, n: int = 1) -> None:
        with self._lock:
            self._outstanding -= n

    def _run(self) -> None:
        while not self._stop.is_set():
            self._drain(block=not self.engine.has_unfinished())
            if self.engine.has_unfinished() and not self._stop.is_set():
                self._step()
        for sink in self._sinks.values():  # shutting down: tell whoever still waits
            sink.put(EngineFailure("the server is shutting down"))
        self._sinks.clear()

    def _drain(self, block: bool) -> None:
        try:
            cmd = self._commands.get(timeout=0.5) if block else self._commands.get_nowait()
        except queue.Empty:
            return
        while True:
            self._apply(cmd)
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                return

    def _apply(self, cmd: tuple) -> None:
        kind = cmd[0]
        if kind == "add":
            _, rid, prompt_ids, params, sink = cmd
            try:
                self.engine.add_request(prompt_ids, params, request_id=rid)
            except Exception as e:  # invalid for this model (ValueError) or an engine bug
                self._release()
                sink.put(e if isinstance(e, ValueError) else EngineFailure(f"{type(e).__name__}: {e}"))
                return
            self._sinks[rid] = sink
            if sink.times is not None:
                self._starting.append(sink.times)
        elif kind == "abort":
            try:
                self.engine.abort(cmd[1])
            except Exception:
                log.exception("abort of %s failed", cmd[1])
        elif kind == "call":
            _, fn, fut = cmd
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as e:
                    fut.set_exception(e)

    def _step(self) -> None:
        t0 = time.perf_counter()
        try:
            events = self.engine.step()
        except Exception as e:
            log.exception("engine step failed; dropping the requests it was running")
            self._fail_all(EngineFailure(f"engine error: {type(e).__name__}: {e}"))
            return
        t1 = time.perf_counter()
        snap = self.snapshot
        snap["steps"] += 1
        snap["step_s"] = t1 - t0
        for times in self._starting:
            times.setdefault("first_step", t0)
        self._starting.clear()
        out: dict[asyncio.AbstractEventLoop, list] = {}  # the step's events, one hand-over per loop
        finished = []
        for ev in events:
            sink = self._sinks.get(ev.request_id)
            if isinstance(ev, Finished):
                if sink is not None and sink.times is not None:
                    sink.times["last_step"] = t1
                if self._sinks.pop(ev.request_id, None) is not None:
                    self._release()
                finished.append(ev.output)
            if sink is None or (isinstance(ev, StepEvent) and not sink.steps):
                continue
            out.setdefault(sink.loop, []).append((sink.queue, ev))
        for output in finished:  # before the events go: a client that has its answer finds it counted
            if self.on_finished is not None:
                try:
                    self.on_finished(output)
                except Exception:
                    log.exception("on_finished hook failed")
        for loop, items in out.items():
            _hand_over(loop, items)
        snap["active"], snap["waiting"] = self.engine.num_active, self.engine.num_waiting

    def _fail_all(self, err: EngineFailure) -> None:
        for rid, sink in list(self._sinks.items()):
            try:
                self.engine.abort(rid)
            except Exception:
                pass
            sink.put(err)
            self._release()
        self._sinks.clear()
        try:  # collect the abort events so the engine is idle again
            for _ in range(3):
                if not self.engine.has_unfinished():
                    break
                self.engine.step()
        except Exception:
            log.exception("engine still failing after dropping its requests")
            time.sleep(0.1)
