"""What the routes share: the engine bridge, tokenizer, limits, metrics, and the waiting helpers."""

from __future__ import annotations

import asyncio
import functools
import json
import time
from concurrent.futures import ThreadPoolExecutor

from fastapi import Request
from pydantic import BaseModel, ValidationError

from clover.api.errors import APIError, as_api_error, bad_request, from_validation, queue_full, too_large
from clover.api.prepare import Limits, chat_stop_ids
from clover.api.store import ResponseStore, owner_of
from clover.data.task import model_task
from clover.engine import RequestOutput, SamplingParams
from clover.server.async_engine import AsyncEngine, QueueFull, RequestHandle
from clover.server.metrics import Metrics

PREPARE_THREADS = 2  # requests rendered, tokenised and given their grammar at once, off the event loop


class ClientGone(Exception):
    """The client disconnected before its answer was ready (its requests were aborted)."""


class ServerState:
    def __init__(
        self,
        aengine: AsyncEngine,
        tokenizer,
        model_name: str,
        limits: Limits,
        metrics: Metrics,
        api_key: str | list[str] | None = None,
        responses: ResponseStore | None = None,
    ):
        self.aengine = aengine
        self.engine = aengine.engine
        self.model = aengine.engine.model
        self.config = self.model.config
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.limits = limits
        self.metrics = metrics
        self.api_key = api_key
        self.responses = ResponseStore() if responses is None else responses  # stored Responses, bounded
        self.started = int(time.time())
        self.chat_stop_ids = chat_stop_ids(tokenizer)
        # the task the model was trained for (the bundled model's when it names none): the
        # playground's tools and its agent mode's world
        self.task = model_task(self.config, default=True)
        self._prepare_pool = ThreadPoolExecutor(PREPARE_THREADS, thread_name_prefix="clover-prepare")

    async def prepare(self, fn, *args):
        """``fn(*args)`` in a worker thread: a request's preparation (its prompt rendered and
        tokenised, its grammar and a grounded source's span index built) never holds up the
        event loop, so other requests stream on meanwhile."""
        return await asyncio.get_running_loop().run_in_executor(self._prepare_pool, functools.partial(fn, *args))

    def close(self) -> None:
        self._prepare_pool.shutdown(wait=False, cancel_futures=True)

    def owner(self, request: Request) -> str | None:
        """Whose a stored response is: the API key's (already checked by the guard), or nobody's."""
        if self.api_key is None:
            return None
        return owner_of(request.headers.get("authorization", "").partition(" ")[2].strip())

    def check_model(self, name: str | None) -> None:
        if name is not None and name != self.model_name:
            raise APIError(
                404,
                f"the model {name!r} does not exist; this server serves {self.model_name!r}",
                param="model",
                code="model_not_found",
            )

    async def read(self, request: Request, schema: type[BaseModel], max_bytes: int | None = None):
        """The body as ``schema``; ``max_bytes``: a route's own limit below the server's (413)."""
        raw = await request.body()  # the server's size limit is enforced by the middleware as it is read
        if max_bytes is not None and len(raw) > max_bytes:
            raise too_large(f"request body of {len(raw)} bytes exceeds this route's limit of {max_bytes}")
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
            raise APIError(400, f"the request body is not valid JSON: {e}", code="invalid_json") from None
        if not isinstance(data, dict):
            raise bad_request("the request body must be a JSON object", code="invalid_json")
        try:
            return schema.model_validate(data)
        except ValidationError as e:
            raise from_validation(e.errors(include_url=False)) from None

    def submit(self, items: list[tuple[list[int], SamplingParams]], prefix: str, steps: bool = False):
        if not self.aengine.alive:
            raise APIError(503, "the engine is not running", type="server_error", code="engine_down")
        try:
            return self.aengine.submit_many(items, prefix=prefix, steps=steps)
        except QueueFull:
            raise queue_full(self.aengine.capacity) from None

    async def wait(self, handles: list[RequestHandle], request: Request) -> list[RequestOutput]:
        """Final outputs of ``handles``; if the client goes away meanwhile, abort them all."""
        tasks = [asyncio.ensure_future(h.result()) for h in handles]
        try:
            while True:
                done, pending = await asyncio.wait(tasks, timeout=0.5, return_when=asyncio.ALL_COMPLETED)
                if not pending:
                    break
                if await request.is_disconnected():
                    raise ClientGone()
            try:
                return [t.result() for t in tasks]
            except Exception as e:
                raise as_api_error(e) from None
        finally:
            for t, h in zip(tasks, handles):
                if not t.done():
                    t.cancel()
                h.abort()
