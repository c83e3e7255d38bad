"""The HTTP routes: OpenAI models / chat / completions, joint decisions, health, metrics, playground."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST

import clover
from clover.api import joint_decisions as dec
from clover.api.errors import APIError, as_api_error, bad_request
from clover.api.prepare import Prepared, choice_params, prepare_chat, prepare_completions, tokenize_request
from clover.api.replies import chat_response, completion_response
from clover.api.responses import ResponsesRequest, input_items, responses_error, to_chat
from clover.api.responses_reply import EventStream, output_items, response_body
from clover.api.schemas import ChatRequest, CompletionRequest, DecisionRequest, DetokenizeRequest, TokenizeRequest
from clover.api.streaming import ChatStream, TextStream, error_chunk
from clover.data.chat import CLOVER_TEMPLATE
from clover.engine import Finished
from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD, POLICIES
from clover.server import vendor
from clover.server.async_engine import EngineFailure
from clover.server.state import ClientGone, ServerState

STATIC = Path(__file__).parent / "static"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
router = APIRouter()


def _state(request: Request) -> ServerState:
    return request.app.state.clover


def _sse(obj: dict | str) -> str:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)}\n\n"


# -- models, health, metrics, playground ----------------------------------------------------------
@router.get("/v1/models")
async def list_models(request: Request):
    return {"object": "list", "data": [_model_card(_state(request))]}


@router.get("/v1/models/{name:path}")
async def get_model(name: str, request: Request):
    s = _state(request)
    s.check_model(name)
    return _model_card(s)


def _model_card(s: ServerState) -> dict:
    c = s.config
    return {
        "id": s.model_name,
        "object": "model",
        "created": s.started,
        "owned_by": "clover",
        "max_model_len": s.limits.context,  # vLLM's field: clients size their requests by it
        "clover": {
            "block_size": c.block_size,
            "max_block_size": c.max_block_size,
            "context": s.limits.context,
            "vocab_size": c.vocab_size,
        },
    }


@router.get("/version")
async def version():
    """vLLM's ``/version``: the server's package version."""
    return {"version": clover.__version__}


@router.get("/health")
async def health(request: Request):
    s = _state(request)
    a = s.aengine
    body = {
        "status": "ok" if a.alive else "engine_down",
        "model": s.model_name,
        "active": a.snapshot["active"],
        "waiting": a.snapshot["waiting"],
        "outstanding": a.outstanding,
        "capacity": a.capacity,
    }
    return JSONResponse(body, status_code=200 if a.alive else 503)


@router.get("/metrics")
async def metrics(request: Request):
    return Response(_state(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)


@router.get("/")
async def playground():
    return HTMLResponse((STATIC / "index.html").read_text(encoding="utf-8"))


@router.get("/playground/vendor/{name}")
async def playground_vendor(name: str):
    """The vendored browser library's files (``clover.server.vendor``): those named, nothing else."""
    if name not in vendor.SERVED or not (vendor.VENDOR / name).is_file():
        raise APIError(404, f"no vendored file {name!r}", code="not_found")
    media = "text/plain; charset=utf-8" if name == "LICENSE" else "text/javascript; charset=utf-8"
    return FileResponse(vendor.VENDOR / name, media_type=media, headers={"Cache-Control": "no-cache"})


@router.get("/playground/config")
async def playground_config(request: Request):
    s = _state(request)
    task = {"name": s.task.name, "summary": s.task.summary} if s.task else None
    three = vendor.pin() if vendor.vendored() else None  # the 3-D map's library, when it was fetched
    return {
        "model": s.model_name,
        "block_size": s.config.block_size,
        "max_block_size": s.config.max_block_size,
        "auth": s.api_key is not None,
        "tools": s.task.offered(s.config) if s.task else [],
        "task": task,
        "policies": sorted(POLICIES),
        "policy": DEFAULT_POLICY,
        "threshold": DEFAULT_THRESHOLD,
        "map3d": {"library": three["package"], "version": three["version"]} if three else None,
        "demo": bool(s.task and s.task.agent_demo),
    }


# -- the tokenizer (vLLM's /tokenize, /detokenize, /tokenizer_info: what scoring tools such as
#    lm-evaluation-harness look for before they fall back to a tokenizer of their own) -------------
@router.post("/tokenize")
async def tokenize(request: Request):
    s = _state(request)
    req: TokenizeRequest = await s.read(request, TokenizeRequest)
    s.check_model(req.model)
    ids = await s.prepare(tokenize_request, req, s.tokenizer, s.limits, s.model_name)  # off the event loop
    strs = await s.prepare(_token_strs, s.tokenizer, ids) if req.return_token_strs else None
    return {"count": len(ids), "max_model_len": s.limits.context, "tokens": ids, "token_strs": strs}


def _token_strs(tokenizer, ids: list[int]) -> list[str]:
    return [tokenizer.decode([t]) for t in ids]


@router.post("/detokenize")
async def detokenize(request: Request):
    s = _state(request)
    req: DetokenizeRequest = await s.read(request, DetokenizeRequest)
    s.check_model(req.model)
    if not all(0 <= t < s.limits.vocab_size for t in req.tokens):
        raise bad_request(f"token ids must lie in [0, {s.limits.vocab_size})", "tokens")
    return {"prompt": await s.prepare(s.tokenizer.decode, req.tokens)}


@router.get("/tokenizer_info")
async def tokenizer_info(request: Request):
    s = _state(request)
    tok = s.tokenizer
    special = {}
    for k in ("eos_token", "bos_token", "pad_token", "mask_token"):
        i = getattr(s.config, f"{k}_id", None)
        i = (i or [None])[0] if isinstance(i, list) else i  # a model may list several EOS ids
        special[k] = None if i is None else tok.decode([i])
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special,
        "model_max_length": s.limits.context,
        "vocab_size": s.limits.vocab_size,
        # the template the chat endpoints render with (Clover's own, as a Hugging Face template, when
        # the checkpoint brings none): a client that renders chats itself renders the same prompt
        "chat_template": getattr(tok, "chat_template", None) or CLOVER_TEMPLATE.read_text(encoding="utf-8"),
    }


# -- chat and text completions --------------------------------------------------------------------
@router.post("/v1/chat/completions")
async def chat_completions(request: Request):
    s = _state(request)
    req: ChatRequest = await s.read(request, ChatRequest)
    s.check_model(req.model)
    prep = await s.prepare(prepare_chat, req, s.tokenizer, s.limits, s.chat_stop_ids)
    opts = req.stream_options
    steps = bool(req.stream and opts and opts.include_steps)
    handles = s.submit([(prep.prompt_ids, p) for p in choice_params(prep.params, req.n or 1)], "chatcmpl", steps=steps)
    if not req.stream:
        try:
            outs = await s.wait(handles, request)
        except ClientGone:
            return Response(status_code=499)
        return chat_response(handles[0].request_id, s.model_name, prep, outs, s.tokenizer)
    gen = _chat_stream(s, handles, prep, bool(opts and opts.include_usage), steps)
    return StreamingResponse(gen, media_type="text/event-stream", headers=SSE_HEADERS)


async def _merged(handles):
    """``(choice index, event)`` from every handle as they come; ends when all have finished."""
    if len(handles) == 1:  # one choice: its events as they are, no task and queue between
        async for ev in handles[0].events():
            yield 0, ev
        return
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(i, h):
        try:
            async for ev in h.events():
                await queue.put((i, ev))
        except Exception as e:
            await queue.put((i, e))
        finally:
            await queue.put((i, None))

    tasks = [asyncio.ensure_future(pump(i, h)) for i, h in enumerate(handles)]
    try:
        left = len(handles)
        while left:
            i, ev = await queue.get()
            if ev is None:
                left -= 1
            elif isinstance(ev, Exception):
                raise ev
            else:
                yield i, ev
    finally:
        for t in tasks:
            t.cancel()


async def _chat_stream(s: ServerState, handles, prep: Prepared, include_usage: bool, steps: bool):
    cs = ChatStream(handles[0].request_id, s.model_name, prep, len(handles), s.tokenizer, include_usage, steps)
    async for line in _framed(cs, handles):
        yield line


async def _framed(stream: ChatStream | TextStream, handles):
    """The stream's chunks as SSE lines, then ``[DONE]`` (or the error body where it failed); the
    chunks of one engine event go out in one write (each write on the event loop lets the engine
    thread take the GIL, and the loop then waits to get it back)."""
    try:
        head = "".join(_sse(c) for c in stream.start())
        if head:
            yield head
        async for i, ev in _merged(handles):
            text = "".join(_sse(c) for c in stream.event(i, ev))
            if text:
                yield text
        yield "".join(_sse(c) for c in stream.end()) + _sse("[DONE]")
    except (ValueError, EngineFailure) as e:
        yield _sse(error_chunk(e))
    finally:
        for h in handles:
            h.abort()  # a no-op once finished; a client that went away frees its slot here


# -- the Responses API: a translation over the chat path (clover.api.responses) ------------------
@router.post("/v1/responses")
async def responses(request: Request):
    s = _state(request)
    req: ResponsesRequest = await s.read(request, ResponsesRequest)
    s.check_model(req.model)
    owner = s.owner(request)
    items = input_items(req)
    if req.previous_response_id is not None:  # its input and output come first (its instructions do not)
        prev = await s.responses.aget(req.previous_response_id, owner)
        items = [*prev.input, *prev.body.get("output", []), *items]
    try:
        prep = await s.prepare(prepare_chat, to_chat(req, s.model_name, items), s.tokenizer, s.limits, s.chat_stop_ids)
    except APIError as e:
        raise responses_error(e) from None
    (handle,) = s.submit([(prep.prompt_ids, prep.params)], "resp")
    rid = handle.request_id.replace("-", "_", 1)

    async def keep(body: dict) -> None:  # stored (committed) before the client hears of it
        if req.store is not False:
            await s.responses.aput(rid, body, items, owner)

    if not req.stream:
        try:
            (out,) = await s.wait([handle], request)
        except ClientGone:
            return Response(status_code=499)
        except APIError as e:  # refused by the engine (a max_output_tokens too small for the schema)
            raise responses_error(e) from None
        body = response_body(rid, s.model_name, req, prep, int(time.time()), output_items(prep, out, s.tokenizer), out)
        await keep(body)
        return body
    gen = _responses_stream(handle, EventStream(rid, s.model_name, req, prep, s.tokenizer), keep)
    return StreamingResponse(gen, media_type="text/event-stream", headers=SSE_HEADERS)


async def _responses_stream(handle, es: EventStream, keep):
    def sse(ev: dict) -> str:
        return f"event: {ev['type']}\n{_sse(ev)}"

    try:
        for ev in es.start():
            yield sse(ev)
        async for ev in handle.events():
            events = es.on(ev)
            if es.body is not None and isinstance(ev, Finished):
                await keep(es.body)  # stored before the client reads that it finished
            for e in events:
                yield sse(e)
    except (ValueError, EngineFailure) as e:
        yield sse(es.error(as_api_error(e)))
    finally:
        handle.abort()


@router.get("/v1/responses/{rid}")
async def get_response(rid: str, request: Request):
    s = _state(request)
    return (await s.responses.aget(rid, s.owner(request))).body


@router.delete("/v1/responses/{rid}")
async def delete_response(rid: str, request: Request):
    s = _state(request)
    await s.responses.adelete(rid, s.owner(request))
    return {"id": rid, "object": "response", "deleted": True}


@router.get("/v1/responses/{rid}/input_items")
async def response_input_items(
    rid: str, request: Request, limit: int = 20, order: str = "desc", after: str | None = None
):
    """The items the response's model read (earlier turns' included), OpenAI's cursor page."""
    s = _state(request)
    if not 1 <= limit <= 100:
        raise bad_request("limit must be between 1 and 100", "limit")
    if order not in ("asc", "desc"):
        raise bad_request("order must be asc or desc", "order")
    items = (await s.responses.aget(rid, s.owner(request))).input
    items = items[::-1] if order == "desc" else items
    if after is not None:
        at = next((i for i, it in enumerate(items) if it.get("id") == after), None)
        if at is None:
            raise bad_request(f"after: no input item {after!r} in response {rid!r}", "after")
        items = items[at + 1 :]
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }


@router.post("/v1/completions")
async def completions(request: Request):
    s = _state(request)
    req: CompletionRequest = await s.read(request, CompletionRequest)
    s.check_model(req.model)
    n = req.n or 1
    preps = await s.prepare(prepare_completions, req, s.tokenizer, s.limits)
    items = [(prep.prompt_ids, p) for prep in preps for p in choice_params(prep.params, n)]
    handles = s.submit(items, "cmpl")
    if not req.stream:
        try:
            outs = await s.wait(handles, request)
        except ClientGone:
            return Response(status_code=499)
        return completion_response(handles[0].request_id, s.model_name, preps, outs, s.tokenizer, n, bool(req.echo))
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    heads = [s.tokenizer.decode(p.prompt_ids) for p in preps for _ in range(n)] if req.echo else None
    ts = TextStream(handles[0].request_id, s.model_name, preps[0], n, s.tokenizer, len(handles), include_usage, heads)
    return StreamingResponse(_framed(ts, handles), media_type="text/event-stream", headers=SSE_HEADERS)


# -- joint decisions ------------------------------------------------------------------------------
@router.post("/v1/decisions")
async def decisions(request: Request):
    s = _state(request)
    req: DecisionRequest = await s.read(request, DecisionRequest)
    s.check_model(req.model)
    t0 = time.perf_counter()
    group, plans, items = await s.prepare(dec.plan_request, req, s.tokenizer, s.config, s.limits)
    handles = s.submit(items, "dec")
    try:
        outs = await s.wait(handles, request)
    except ClientGone:
        return Response(status_code=499)
    body = dec.result(group, req.mode, plans, outs, t0, time.perf_counter(), s.tokenizer)
    s.metrics.decisions.labels(req.mode).inc()
    return {"id": handles[0].request_id, "object": "clover.decisions", "model": s.model_name, **body}
