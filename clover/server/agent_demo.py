"""The task's demo over HTTP, for the playground's "20 messages" button (docs/agent.md, The demo
in the page): ``POST /v1/agent/demo`` ``{"messages": 20}`` runs the served model's task demo
(``Task.agent_demo``: for the bundled model's task, ``clover.airspace.demo``, the run
``clover bench agent --demo`` makes) and streams its events as server-sent events, then
``[DONE]``: each model call's landed tool calls and the zones they left, each message's outcome,
each policy's total seconds.

The demo's model is this server's own chat path: each of its model calls is a
``/v1/chat/completions`` body prepared, run by the engine thread and answered as the route would
answer it. The demo itself runs in a thread of its own (it waits on each call), never on the
event loop. One demo at a time per server: a second is refused (429, ``demo_running``) while one
runs; a client that goes away stops it, its model call in progress aborted.
"""

from __future__ import annotations

import asyncio
import json
import threading

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from clover.api.errors import APIError
from clover.api.prepare import prepare_chat
from clover.api.replies import chat_response
from clover.api.schemas import ChatRequest
from clover.api.streaming import error_chunk
from clover.server.agent import MAX_BODY_BYTES
from clover.server.state import ServerState

router = APIRouter()
MAX_MESSAGES = 50
CALL_TIMEOUT_S = 600  # one model call of the demo, at most (the server stopping mid-call ends the thread)
STOP_POLL_S = 0.25  # how often a model call in progress looks whether its client went away
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class DemoRequest(BaseModel):
    messages: int = Field(20, ge=1, le=MAX_MESSAGES)


class Stopped(Exception):
    """The client went away: the demo stops, its model call in progress aborted."""


def _lock(request: Request) -> threading.Lock:
    app = request.app.state
    if getattr(app, "agent_demo_lock", None) is None:  # no await since the check: one lock per app
        app.agent_demo_lock = threading.Lock()
    return app.agent_demo_lock


@router.post("/v1/agent/demo")
async def agent_demo(request: Request):
    s: ServerState = request.app.state.clover
    req: DemoRequest = await s.read(request, DemoRequest, max_bytes=MAX_BODY_BYTES)
    task = s.task
    if task is None or task.agent_demo is None:
        raise APIError(404, "this model's task has no demo", "invalid_request_error", code="not_found")
    lock = _lock(request)
    if not lock.acquire(blocking=False):
        raise APIError(
            429, "a demo is already running on this server; one runs at a time", "rate_limit_error", code="demo_running"
        )
    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()
    stop = threading.Event()

    def emit(ev: dict | None) -> None:
        try:
            loop.call_soon_threadsafe(events.put_nowait, ev)
        except RuntimeError:  # the server stopped meanwhile: nobody to tell
            pass

    def complete(messages: list[dict], tools: list[dict] | None = None, **fields) -> dict:
        if stop.is_set():
            raise Stopped()
        body = {"model": s.model_name, "messages": messages, "tools": tools, **fields}
        return asyncio.run_coroutine_threadsafe(_chat(s, body, stop), loop).result(CALL_TIMEOUT_S)

    def run() -> None:
        try:
            task.agent_demo(complete, req.messages, config=s.config, on_event=emit, should_stop=stop.is_set)
        except Exception as e:  # stopped by the client (nobody to tell), or failed: OpenAI's error body
            if not stop.is_set():
                emit(error_chunk(e))
        finally:
            lock.release()
            emit(None)

    threading.Thread(target=run, name="clover-agent-demo", daemon=True).start()
    return StreamingResponse(_stream(events, stop), media_type="text/event-stream", headers=SSE_HEADERS)


async def _chat(s: ServerState, body: dict, stop: threading.Event) -> dict:
    """One ``/v1/chat/completions`` body through the server's own path (prepared off the event
    loop, run by the engine thread) → the ``chat.completion`` object the route would answer."""
    req = ChatRequest.model_validate(body)
    prep = await s.prepare(prepare_chat, req, s.tokenizer, s.limits, s.chat_stop_ids)
    (handle,) = s.submit([(prep.prompt_ids, prep.params)], "demo")
    answer = asyncio.ensure_future(handle.result())
    try:
        while not answer.done():
            await asyncio.wait({answer}, timeout=STOP_POLL_S)
            if stop.is_set():
                raise Stopped()
        out = answer.result()
    finally:
        answer.cancel()
        handle.abort()  # a no-op once finished; a demo stopped midway frees the engine's slot here
    return chat_response(handle.request_id, s.model_name, prep, [out], s.tokenizer)


async def _stream(events: asyncio.Queue, stop: threading.Event):
    try:
        while (ev := await events.get()) is not None:
            yield f"data: {json.dumps(ev, ensure_ascii=False)}\n\n"
        yield "data: [DONE]\n\n"
    finally:
        stop.set()  # a client gone mid-stream stops the demo after its current model call
