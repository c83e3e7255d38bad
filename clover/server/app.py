"""The app factory: ``create_app(engine_or_model_dir)`` → a FastAPI app over an engine thread.

The app owns an ``AsyncEngine`` (started and stopped with the app's lifespan), checks the API
key and the body size in a small ASGI guard that also counts requests for ``/metrics``, and
answers every error, expected or not, in OpenAI's shape.
"""

from __future__ import annotations

import hmac
import logging
import time
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from clover.api.errors import APIError, from_validation, server_error, too_large, unauthorized
from clover.api.loading import PREFIX_CACHE_MB, load_engine
from clover.api.prepare import model_limits
from clover.api.store import MAX_ENTRIES, MAX_MB, TTL_S, ResponseStore
from clover.engine import PREFILL_CHUNK, Engine
from clover.server.agent import router as agent_router
from clover.server.agent_demo import router as agent_demo_router
from clover.server.async_engine import REQUEST_TIMES, AsyncEngine
from clover.server.metrics import Metrics
from clover.server.routes import router
from clover.server.state import ServerState

log = logging.getLogger("clover.server")
access_log = logging.getLogger("uvicorn.access")  # uvicorn's access logger, its handlers and format
CLIENT_GONE = 499  # nginx's status for a client that closed the connection before the answer was over
MAX_BODY_BYTES = 4 << 20


def create_app(
    engine_or_model_dir: Engine | str | Path | None = None,
    *,
    model_name: str = "clover",
    api_key: str | list[str] | None = None,
    max_queue: int = 64,
    max_prompt_tokens: int | None = None,
    max_batch_size: int = 16,
    max_tools: int = 128,
    max_body_bytes: int = MAX_BODY_BYTES,
    default_max_tokens: int = 256,
    threads: int | None = None,
    prefix_cache_mb: float = PREFIX_CACHE_MB,
    prefill_chunk: int = PREFILL_CHUNK,
    device: str = "auto",
    dtype: str = "auto",
    compile: bool = False,
    backend: str = "auto",
    cuda_graphs: bool = False,
    responses_db: str | Path | None = None,
    responses_max: int = MAX_ENTRIES,
    responses_max_mb: float = MAX_MB,
    responses_ttl_s: float = TTL_S,
) -> FastAPI:
    """The app over an engine, or over a checkpoint it loads onto ``device`` in ``dtype``
    (``clover.api.loading.resolve_device`` / ``resolve_dtype``), or a GGUF file on ``backend``
    llama.cpp (``clover.api.loading.load_engine``). ``api_key``: one key or several (a stored
    response is visible to the key that created it only). ``responses_*``: the stored Responses'
    bounds, and an SQLite file that keeps them across restarts (``clover.api.store``)."""
    if isinstance(engine_or_model_dir, Engine):
        engine = engine_or_model_dir
    else:
        engine = load_engine(
            engine_or_model_dir,
            max_batch_size,
            threads,
            prefix_cache_mb,
            device,
            dtype,
            compile,
            backend,
            prefill_chunk,
            cuda_graphs,
        )
    if engine.tokenizer is None:
        raise ValueError("the server needs an engine with a tokenizer (chat template, text in and out)")
    limits = model_limits(engine.model.config, max_prompt_tokens, max_tools, default_max_tokens, engine.tokenizer)
    aengine = AsyncEngine(engine, max_queue=max_queue)
    metrics = Metrics(aengine)
    aengine.on_finished = metrics.observe_output
    store = ResponseStore(
        None if responses_db is None else str(responses_db), responses_max, responses_max_mb, responses_ttl_s
    )
    state = ServerState(aengine, engine.tokenizer, model_name, limits, metrics, api_key, store)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        aengine.start()
        access_log.addFilter(_ours)  # uvicorn's own lines go: they are written as a response starts
        try:
            yield
        finally:
            access_log.removeFilter(_ours)
            aengine.stop()
            state.close()
            store.close()

    app = FastAPI(title="Clover", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.clover = state
    app.include_router(router)
    app.include_router(agent_router)
    app.include_router(agent_demo_router)
    app.add_middleware(Guard, api_key=api_key, max_body_bytes=max_body_bytes, metrics=metrics)
    _error_handlers(app)
    return app


def error_response(e: APIError) -> JSONResponse:
    """An ``APIError`` as the HTTP response: its status, headers and OpenAI's error body."""
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


def _error_handlers(app: FastAPI) -> None:
    async def api_error(request: Request, e: APIError):
        return error_response(e)

    async def http_error(request: Request, e: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code)
        return error_response(APIError(e.status_code, str(e.detail), code=code, headers=getattr(e, "headers", None)))

    async def validation_error(request: Request, e: RequestValidationError):
        return error_response(from_validation(list(e.errors())))

    async def anything(request: Request, e: Exception):
        log.exception("unhandled error on %s", request.url.path)
        return error_response(server_error(f"internal server error ({type(e).__name__})"))

    app.add_exception_handler(APIError, api_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(Exception, anything)


class Guard:
    """ASGI middleware: Bearer API key on ``/v1/*``, request body size limit, request metrics and
    the access log, both written once the response is over: a client that went away before the
    end of its answer (a stream cut mid-way, a request left waiting) is a 499 there, whatever
    status the response had begun with."""

    def __init__(self, app, api_key: str | list[str] | None, max_body_bytes: int, metrics: Metrics):
        self.app, self.max_body, self.metrics = app, max_body_bytes, metrics
        keys = [api_key] if isinstance(api_key, str) else api_key
        self.keys = None if keys is None else [k.encode() for k in keys]

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = [500]
        done, gone, last_byte = [False], [False], [0.0]
        times: dict = {}  # filled by the engine bridge for a request that runs on the engine
        token = REQUEST_TIMES.set(times)

        async def send_status(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                done[0] = True
                await send(message)
                last_byte[0] = time.perf_counter()
                return
            await send(message)

        async def watched():
            message = await receive()
            if message["type"] == "http.disconnect" and not done[0]:
                gone[0] = True
            return message

        try:
            err = self._refuse(scope)
            if err is not None:
                await error_response(err)(scope, receive, send_status)
                return
            await self.app(scope, self._limited(watched), send_status)
        finally:
            REQUEST_TIMES.reset(token)
            code = CLIENT_GONE if gone[0] else status[0]
            self.metrics.observe_http(scope["path"], code, time.perf_counter() - t0)
            if code == 200 and last_byte[0]:
                self.metrics.observe_share(t0, times, last_byte[0])
            _log_access(scope, code)

    def _refuse(self, scope) -> APIError | None:
        headers = dict(scope.get("headers") or [])
        if self.keys is not None and scope["path"].startswith("/v1/"):
            auth = headers.get(b"authorization", b"").decode("latin-1")
            if not auth:
                return unauthorized("missing API key: send 'Authorization: Bearer <key>'")
            scheme, _, token = auth.partition(" ")
            given = token.strip().encode("latin-1")
            if scheme.lower() != "bearer" or not any([hmac.compare_digest(given, k) for k in self.keys]):
                return unauthorized("incorrect API key")
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            return too_large(f"request body of {int(length)} bytes exceeds the limit of {self.max_body}")
        return None

    def _limited(self, receive):
        seen = [0]

        async def wrapped():
            message = await receive()
            if message["type"] == "http.request":
                seen[0] += len(message.get("body", b""))
                if seen[0] > self.max_body:
                    raise too_large(f"request body exceeds the limit of {self.max_body} bytes")
            return message

        return wrapped


def _ours(record: logging.LogRecord) -> bool:
    return getattr(record, "clover", False)


def _log_access(scope, status: int) -> None:
    """One line per request, in uvicorn's access format, with the status as it ended."""
    if not access_log.isEnabledFor(logging.INFO):
        return
    client = scope.get("client")
    where = f"{client[0]}:{client[1]}" if client else "-"
    path = scope.get("path", "") + (f"?{scope['query_string'].decode('latin-1')}" if scope.get("query_string") else "")
    access_log.info(
        '%s - "%s %s HTTP/%s" %d',
        where,
        scope.get("method"),
        path,
        scope.get("http_version"),
        status,
        extra={"clover": True},
    )
