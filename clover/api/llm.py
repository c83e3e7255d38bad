"""Clover in your own Python process, the way vLLM's ``LLM`` works: load a model once, then
complete prompts, answer chats (tools, ``tool_choice``, ``response_format``: the server's whole
request handling, without HTTP) and ask joint decisions.

    from clover import LLM
    llm = LLM()                                  # the bundled model; LLM("DIR" or a cached repo id)
    llm = LLM("DIR", device="cuda")              # on a GPU (bfloat16 unless dtype= says otherwise)
    llm.generate("recall drone 17")[0].text      # plain completions: RequestOutput per prompt
    r = llm.chat([{"role": "user", "content": "recall drone 17"}], tools=AIRSPACE_TOOLS)
    r["choices"][0]["message"]["tool_calls"]     # the OpenAI chat.completion object, as the server answers
    for chunk in llm.chat(messages, stream=True): ...   # the chat.completion.chunk objects the server streams
    llm.complete("Recall drone", max_tokens=16)  # /v1/completions' text_completion (stream=True as chat)
    llm.decide(context, [{"question": "...", "options": ["yes", "no"]}, ...])   # /v1/decisions' body

Every request goes through the code the server runs (``clover.api.prepare``, ``clover.api.replies``,
``clover.api.joint_decisions``), so a request the server refuses with a 400 raises ``RequestError``
here with the same message. Calls run in the calling thread, one at a time (an ``LLM`` is not
meant to be shared between threads; the server is the concurrent way in).
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from pydantic import ValidationError

from clover.api import joint_decisions as dec
from clover.api.errors import APIError, as_api_error, from_validation
from clover.api.loading import load_engine
from clover.api.prepare import chat_stop_ids, choice_params, model_limits, prepare_completions
from clover.api.prepare import prepare_chat as _prepare_chat
from clover.api.replies import chat_response, completion_response, new_id
from clover.api.schemas import ChatRequest, CompletionRequest, DecisionRequest
from clover.api.streaming import ChatStream, TextStream
from clover.engine import Engine, Finished, RequestOutput, SamplingParams


class RequestError(ValueError):
    """A request Clover refuses, with the fields of OpenAI's error body (``param``, ``code``)."""

    def __init__(self, error: APIError):
        super().__init__(error.message)
        self.error = error
        self.param, self.code, self.status = error.param, error.code, error.status

    @property
    def body(self) -> dict:
        return self.error.body()


def _checked(schema, body: dict):
    """The body as ``schema`` reads it. Fields it does not know are ignored, as the server ignores
    OpenAI's ``user``, ``metadata``, ``store``; one that is nearly a known name is a typo here, refused."""
    for k in body:
        near = [] if k in schema.model_fields else difflib.get_close_matches(k, list(schema.model_fields), 1, 0.8)
        if near:
            raise TypeError(f"unknown request field {k!r}; did you mean {near[0]!r}?")
    try:
        return schema.model_validate(body)
    except ValidationError as e:
        raise RequestError(from_validation(e.errors(include_url=False))) from None


class LLM:
    """A loaded Clover model with its tokenizer, answering in the calling thread. ``model``: a
    checkpoint directory, a repo id in the local Hugging Face cache, an ``Engine``, or None for
    the bundled model. ``device``: ``"cpu"``, ``"cuda"`` or None/``"auto"`` (a GPU when torch
    sees one); ``dtype``: ``"float32"``, ``"bfloat16"``, ``"float16"`` (or a ``torch.dtype``) or
    None/``"auto"`` (bfloat16 on a GPU, the checkpoint's own on the CPU)."""

    def __init__(
        self,
        model: str | Path | Engine | None = None,
        *,
        threads: int | None = None,
        max_batch_size: int = 16,
        model_name: str = "clover",
        device: str | torch.device | None = None,
        dtype: str | torch.dtype | None = None,
        compile: bool = False,
    ):
        if isinstance(model, Engine):
            if device is not None or dtype is not None or compile:
                raise TypeError(
                    "device, dtype and compile apply when LLM loads a checkpoint; this Engine's model is loaded"
                )
            self.engine = model
        else:
            self.engine = load_engine(
                model, max_batch_size, threads, device=device or "auto", dtype=dtype or "auto", compile=compile
            )
        if self.engine.tokenizer is None:
            raise ValueError("LLM needs an engine with a tokenizer (text in and out, the chat template)")
        self.tokenizer = self.engine.tokenizer
        self.config = self.engine.model.config
        self.model_name = model_name
        self.limits = model_limits(self.config, tokenizer=self.tokenizer)
        self._stop_ids = chat_stop_ids(self.tokenizer)

    # -- plain completions ----------------------------------------------------------------------
    def generate(
        self,
        prompts: str | list[str] | list[int] | list[list[int]],
        params: SamplingParams | list[SamplingParams] | None = None,
        **knobs,
    ) -> list[RequestOutput]:
        """Complete one prompt or several (text or token ids), batched; one ``RequestOutput`` per
        prompt, in order, as vLLM's ``LLM.generate``. Settings: ``params`` or keyword arguments
        of ``SamplingParams`` (``max_tokens=64, policy="ar"``), not both."""
        if params is not None and knobs:
            raise TypeError("give SamplingParams or keyword settings, not both")
        if params is None:
            params = SamplingParams(**knobs)  # a bad value is a ValueError that names it
        single = isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int))
        batch = [prompts] if single else list(prompts)
        if not batch:
            return []
        ids = [self.tokenizer.encode(p) if isinstance(p, str) else list(p) for p in batch]
        if any(not p for p in ids):
            raise ValueError("a prompt is empty")
        return self.engine.generate_batch(ids, params)

    # -- chat, as /v1/chat/completions ----------------------------------------------------------
    def chat(self, messages: list[dict] | list[list[dict]], tools: list[dict] | None = None, **request):
        """A chat turn: ``messages`` (OpenAI format), optional ``tools`` (OpenAI format) and any
        other field of a ``/v1/chat/completions`` body (``tool_choice``, ``max_tokens``,
        ``response_format``, ``temperature``, ``n``, ``block_size``, ``policy``, ...). Returns the
        ``chat.completion`` object the server would send (tool calls parsed into ``tool_calls``).
        A list of conversations is answered as a batch: one object each, in order. With
        ``stream=True`` (one conversation): an iterator of the ``chat.completion.chunk`` objects
        the server streams (``stream_options`` as there), whose content deltas join to the reply."""
        batched = bool(messages) and all(isinstance(m, list) for m in messages)
        if request.get("stream"):
            if batched:
                raise TypeError("stream=True answers one conversation; pass its messages, not a list of them")
            return self._chat_stream(messages, tools, request)
        convs = messages if batched else [messages]
        try:
            preps = [self._prepare(conv, tools, request) for conv in convs]
            n = [len(p[1]) for p in preps]
            outs = self.engine.generate_batch(
                [p.prompt_ids for p, ps in preps for _ in ps], [sp for _, ps in preps for sp in ps]
            )
        except APIError as e:
            raise RequestError(e) from None
        except RequestError:
            raise
        except ValueError as e:  # the engine's own checks (a block size the model cannot take, ...)
            raise RequestError(as_api_error(e)) from None
        at = [sum(n[:i]) for i in range(len(n) + 1)]
        answers = [
            chat_response(new_id("chatcmpl"), self.model_name, p, outs[at[i] : at[i + 1]], self.tokenizer)
            for i, (p, _) in enumerate(preps)
        ]
        return answers if batched else answers[0]

    def _chat_stream(self, messages, tools, request: dict) -> Iterator[dict]:
        try:
            prep, params = self._prepare(messages, tools, request)
        except APIError as e:
            raise RequestError(e) from None
        opts = request.get("stream_options") or {}
        chunks = ChatStream(
            new_id("chatcmpl"),
            self.model_name,
            prep,
            len(params),
            self.tokenizer,
            bool(opts.get("include_usage")),
            bool(opts.get("include_steps")),
        )
        return self._stream(chunks, [(prep.prompt_ids, p) for p in params])

    def _stream(self, chunks: ChatStream | TextStream, items: list[tuple[list[int], SamplingParams]]) -> Iterator[dict]:
        """Add the requests now (a setting the engine refuses raises here, not at the first chunk),
        then the chunks as the engine steps; closing the iterator early aborts what is left."""
        ids: list[str] = []
        try:
            ids += [self.engine.add_request(p, sp) for p, sp in items]
        except ValueError as e:
            for rid in ids:
                self.engine.abort(rid)
            raise RequestError(as_api_error(e)) from None
        index = {rid: i for i, rid in enumerate(ids)}

        def run() -> Iterator[dict]:
            left = set(ids)
            try:
                yield from chunks.start()
                while left:
                    for ev in self.engine.step():
                        if ev.request_id not in index:
                            continue
                        if isinstance(ev, Finished):
                            left.discard(ev.request_id)
                        yield from chunks.event(index[ev.request_id], ev)
                yield from chunks.end()
            finally:
                for rid in left:
                    self.engine.abort(rid)

        return run()

    # -- text completions, as /v1/completions ---------------------------------------------------
    def complete(self, prompt: str | list[str] | list[int] | list[list[int]], **request) -> dict | Iterator[dict]:
        """A text completion: ``prompt`` (text, token ids, or a list of either) and any other field
        of a ``/v1/completions`` body (``max_tokens``, ``n``, ``echo``, ``logprobs``, ``stop``,
        ``policy``, ...). Returns the ``text_completion`` object the server would send, or with
        ``stream=True`` an iterator of the chunks it streams."""
        req = _checked(CompletionRequest, {**request, "prompt": prompt, "model": self.model_name})
        n = req.n or 1
        try:
            preps = prepare_completions(req, self.tokenizer, self.limits)
        except APIError as e:
            raise RequestError(e) from None
        items = [(prep.prompt_ids, p) for prep in preps for p in choice_params(prep.params, n)]
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            heads = [self.tokenizer.decode(p.prompt_ids) for p in preps for _ in range(n)] if req.echo else None
            chunks = TextStream(
                new_id("cmpl"), self.model_name, preps[0], n, self.tokenizer, len(items), include_usage, heads
            )
            return self._stream(chunks, items)
        try:
            outs = self.engine.generate_batch([i[0] for i in items], [i[1] for i in items])
        except ValueError as e:
            raise RequestError(as_api_error(e)) from None
        return completion_response(new_id("cmpl"), self.model_name, preps, outs, self.tokenizer, n, bool(req.echo))

    def _prepare(self, messages, tools, request: dict):
        """One conversation → (its Prepared, the sampling parameters of its ``n`` choices)."""
        body = {**request, "messages": messages, "model": self.model_name}  # one model is loaded: "model" ignored
        if tools is not None:
            body["tools"] = tools
        req = _checked(ChatRequest, body)
        prep = _prepare_chat(req, self.tokenizer, self.limits, self._stop_ids)
        return prep, choice_params(prep.params, req.n or 1)

    # -- joint decisions, as /v1/decisions ------------------------------------------------------
    def decide(self, context: str, questions: list[dict], mode: str = "joint", **request) -> dict:
        """Answer 1-8 related questions about ``context`` (``[{"question": str, "options": [str, ...]}]``),
        jointly (one block of constrained answer slots) or ``mode="independent"``; ``block_size``,
        ``policy``, ``threshold`` as in the endpoint. Returns the endpoint's JSON object."""
        req = _checked(DecisionRequest, {**request, "context": context, "questions": questions, "mode": mode})
        t0 = time.perf_counter()
        try:
            group, plans, items = dec.plan_request(req, self.tokenizer, self.config, self.limits)
            outs = self.engine.generate_batch([i[0] for i in items], [i[1] for i in items])
        except (APIError, ValueError) as e:
            raise RequestError(as_api_error(e)) from None
        body = dec.result(group, req.mode, plans, outs, t0, time.perf_counter(), self.tokenizer)
        return {"id": new_id("dec"), "object": "clover.decisions", "model": self.model_name, **body}
