"""The agent loop: messages -> model -> tool calls -> ``execute`` -> tool messages -> model, until
the model replies in words or the step limit is reached.

The model side is anything with ``chat(messages, tools) -> ModelReply``; two are provided:

* ``LocalModel``: Clover in this process (``clover.api.llm.LLM``), any policy;
* ``CompletionModel``: any function that answers a ``/v1/chat/completions`` body in this process
  with the ``chat.completion`` object (``LLM.chat``, or the server's own path for its demo);
* ``OpenAIModel``: any OpenAI-compatible endpoint through the ``openai`` client (``clover serve``
  or another server), given its ``base_url`` and ``api_key``.

Both send the request the same way (the tools, ``temperature`` 0, ``max_tokens``), so the same
loop gives the same transcript in process and over HTTP for a deterministic policy, once both ask
for the same ``grounded_reply`` (``LocalModel`` asks for it by default, ``OpenAIModel`` only when
given it: another server would not know the field).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from clover.airspace.extraction_tools import tools_in_form, values_form
from clover.airspace.world import World, execute
from clover.data.task import model_task

MAX_STEPS = 4
MAX_TOKENS = 320  # a compound message's five calls fit (clover eval's budget)
# each request asks for grounded replies (docs/grounding.md, Grounded replies): chosen on the
# validation split with ``clover bench replies`` (docs/agent.md, Grounded replies)
GROUNDED_REPLY = True


@dataclass
class ModelReply:
    """One model answer: its text, its calls (OpenAI ``tool_calls``) and, when the model side
    reports it, the forward passes it took (Clover's ``clover.forward_passes``)."""

    content: str | None
    tool_calls: list[dict]
    forward_passes: int | None = None


class AgentModel(Protocol):
    def chat(self, messages: list[dict], tools: list[dict]) -> ModelReply: ...


@dataclass
class CallRecord:
    """One executed call: what the model asked, what the world answered, and what changed."""

    step: int
    name: str
    arguments: dict | str
    result: dict
    changes: list[str]

    @property
    def ok(self) -> bool:
        return "error" not in self.result


@dataclass
class AgentResult:
    messages: list[dict]  # the whole transcript, the input messages first
    world: World  # the world after the task
    steps: int  # model calls made
    wall_s: float  # message in to final reply out, tools included
    forward_passes: int | None  # model forward passes over all steps (None: the endpoint does not say)
    reply: str | None  # the final reply in words (None: stopped at the step limit)
    stopped: str  # "reply" or "step_limit"
    calls: list[CallRecord] = field(default_factory=list)


def default_tools() -> list[dict]:
    """The tools of the bundled model's task (a remote model's are not known)."""
    return model_task(None, default=True).offered()


def run_agent(
    model: AgentModel,
    messages: list[dict],
    world: World,
    tools: list[dict] | None = None,
    max_steps: int = MAX_STEPS,
    on_step: Callable[[int, ModelReply, list[CallRecord], World], None] | None = None,
) -> AgentResult:
    """Run one task: ``messages`` (OpenAI format, ending with the operator's message) against a
    copy of ``world`` with ``tools`` (default: the model's own, ``model.tools``, else the six
    tools of the bundled model's task), offered in the form of values the model was trained on
    (``model.values``: "written" offers the airspace tools as ``WRITTEN_TOOLS``; the world reads
    either form). Each step is one model
    call; its tool calls are executed in order and their results sent back as ``tool`` messages.
    Stops when a reply has no calls, or after ``max_steps`` model calls (the last step's calls
    are executed, no further reply is asked for). ``on_step(step, reply, records, world)`` is
    called after each step's calls ran, with the world as they left it (a UI prints or draws them;
    the world is the loop's own: read it, do not change it)."""
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    tools = tools if tools is not None else getattr(model, "tools", None) or default_tools()
    tools = tools_in_form(tools, getattr(model, "values", None) or values_form(None))
    offered = {t["function"]["name"] for t in tools}
    world = world.copy()
    transcript = list(messages)
    records: list[CallRecord] = []
    passes: int | None = 0
    t0 = time.perf_counter()
    for step in range(1, max_steps + 1):
        reply = model.chat(transcript, tools)
        passes = None if passes is None or reply.forward_passes is None else passes + reply.forward_passes
        calls = reply.tool_calls or []
        msg: dict = {"role": "assistant", "content": reply.content or ""}
        if calls:
            msg["tool_calls"] = calls
        transcript.append(msg)
        done: list[CallRecord] = []
        for i, call in enumerate(calls):
            fn = call.get("function", call)
            name, args = fn.get("name", ""), fn.get("arguments", {})
            before = world.copy()
            result = execute(world, name, args) if name in offered else {"error": f"tool {name!r} is not offered"}
            done.append(CallRecord(step, name, args, result, before.diff(world)))
            transcript.append(
                {
                    "role": "tool",
                    "tool_call_id": call.get("id") or f"call_{i}",
                    "content": json.dumps(result, ensure_ascii=False),
                }
            )
        records += done
        if on_step is not None:
            on_step(step, reply, done, world)
        if not calls:
            return AgentResult(
                transcript, world, step, time.perf_counter() - t0, passes, reply.content or "", "reply", records
            )
    return AgentResult(transcript, world, max_steps, time.perf_counter() - t0, passes, None, "step_limit", records)


# -- the model side -------------------------------------------------------------------------------
class CompletionModel:
    """A model side over ``complete(messages, tools=..., **request) -> chat.completion``: a
    function that answers a ``/v1/chat/completions`` body in this process (``LLM.chat``; the
    server's demo route passes its own). Each call sends the tools, ``temperature`` 0,
    ``max_tokens`` and, when given, ``policy`` / ``threshold`` and any other ``request`` field."""

    def __init__(
        self,
        complete: Callable[..., dict],
        *,
        policy: str | None = None,
        threshold: float | None = None,
        max_tokens: int = MAX_TOKENS,
        values: str | None = None,
        **request,
    ):
        self.complete = complete
        self.values = values or values_form(None)  # the form of values the model takes (None: the bundled model's)
        self.request = {"max_tokens": max_tokens, "temperature": 0, **request}
        for k, v in (("policy", policy), ("threshold", threshold)):  # unset: the engine's defaults
            if v is not None:
                self.request[k] = v

    def chat(self, messages: list[dict], tools: list[dict]) -> ModelReply:
        r = self.complete(messages, tools=tools, **self.request)
        m = r["choices"][0]["message"]
        return ModelReply(m.get("content"), m.get("tool_calls") or [], (r.get("clover") or {}).get("forward_passes"))


class LocalModel(CompletionModel):
    """Clover in this process: ``llm`` is a ``clover.api.llm.LLM``, or what ``LLM(...)`` takes (a
    checkpoint directory, a cached repo id, an ``Engine``; None: the bundled model)."""

    def __init__(
        self,
        llm=None,
        *,
        policy: str | None = None,
        threshold: float | None = None,
        max_tokens: int = MAX_TOKENS,
        threads: int | None = None,
        grounded_reply: bool = GROUNDED_REPLY,
        **request,
    ):
        from clover.api.llm import LLM  # deferred: the model and torch, which the world and tasks do not need

        self.llm = llm if isinstance(llm, LLM) else LLM(llm, threads=threads)
        self.tools = model_task(self.llm.config, default=True).offered(self.llm.config)  # the model's own task's
        super().__init__(
            self.llm.chat,
            policy=policy,
            threshold=threshold,
            max_tokens=max_tokens,
            grounded_reply=grounded_reply,
            values=values_form(self.llm.config),
            **request,
        )


class OpenAIModel:
    """Any OpenAI-compatible chat endpoint (``base_url`` such as ``http://127.0.0.1:8000/v1``).
    ``model``: the id to send (default: the first the server lists). ``policy`` / ``threshold`` /
    ``grounded_reply`` are Clover's own body fields, sent only when given (another server would
    not know them)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        model: str | None = None,
        *,
        policy: str | None = None,
        threshold: float | None = None,
        max_tokens: int = MAX_TOKENS,
        timeout: float = 300,
        client=None,
        grounded_reply: bool | None = None,
        values: str | None = None,
    ):
        self.values = values or values_form(None)  # the served model's form of values (None: the bundled one's)
        if client is None:
            try:
                import openai  # optional: openai (a test dependency)
            except ImportError:
                raise ImportError("OpenAIModel needs the openai package: pip install openai") from None
            client = openai.OpenAI(base_url=base_url, api_key=api_key or "none", timeout=timeout, max_retries=0)
        self.client = client
        self.model = model or client.models.list().data[0].id
        self.max_tokens = max_tokens
        given = (("policy", policy), ("threshold", threshold), ("grounded_reply", grounded_reply))
        self.extra = {k: v for k, v in given if v is not None}

    def chat(self, messages: list[dict], tools: list[dict]) -> ModelReply:
        r = self.client.chat.completions.create(
            model=self.model,
            messages=messages,
            tools=tools,
            temperature=0,
            max_tokens=self.max_tokens,
            extra_body=self.extra or None,
        )
        m = r.choices[0].message
        calls = [c.model_dump(exclude_none=True) for c in m.tool_calls or []]
        stats = (r.model_extra or {}).get("clover") or {}
        return ModelReply(m.content, calls, stats.get("forward_passes"))
