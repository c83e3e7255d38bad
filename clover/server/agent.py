"""A task's world over HTTP, for the playground's agent mode (docs/agent.md, Agent mode). The
task is the served model's (``clover.data.task.model_task``, the bundled model's by default).

* ``POST /v1/agent/world`` ``{"seed": 0, "area_deg": 0.4}``: a seeded world's state
  (``area_deg`` null: anywhere on Earth, the world of ``clover agent --world``);
* ``POST /v1/agent/execute`` ``{"world": state, "calls": [{"name", "arguments", "id"?}, ...]}``:
  each call run in order against that state; the results, the ``tool`` messages to send the
  model back, what each call changed and the new state.

Stateless: the client keeps the world and sends it with each execution. What a call does is the
task's alone; a refused call is an ``{"error": ...}`` result that leaves the world unchanged, as
in the agent loop. Bounded: a small body, a few calls, a world within the task's bounds.
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field, model_validator

from clover.api.errors import APIError, bad_request, too_large
from clover.data.task import StateTooLarge, Task, World

router = APIRouter()
MAX_BODY_BYTES = 256 << 10
MAX_CALLS = 16
DEFAULT_AREA_DEG = 0.4  # a map of one airspace: about 45 km across


class WorldRequest(BaseModel):
    seed: int = Field(0, ge=0, le=2**31 - 1)
    area_deg: float | None = Field(DEFAULT_AREA_DEG, gt=0, le=20)


class AgentCall(BaseModel):
    """A call as the agent loop runs it: ``{"name", "arguments"}`` (arguments an object or the
    JSON text OpenAI's ``tool_calls`` carry), or such a ``tool_calls`` entry itself."""

    id: str | None = Field(None, max_length=128)
    name: str = Field(max_length=128)
    arguments: dict | str = "{}"

    @model_validator(mode="before")
    @classmethod
    def _openai_form(cls, data):
        if isinstance(data, dict) and isinstance(data.get("function"), dict):
            return {"id": data.get("id"), **data["function"]}
        return data


class ExecuteRequest(BaseModel):
    world: dict
    calls: list[AgentCall]


def _task(request: Request) -> Task:
    task = request.app.state.clover.task
    if task is None or task.world is None:
        raise APIError(404, "this model's task has no world to act on", "invalid_request_error", code="not_found")
    return task


@router.post("/v1/agent/world")
async def agent_world(request: Request):
    s = request.app.state.clover
    req: WorldRequest = await s.read(request, WorldRequest, max_bytes=MAX_BODY_BYTES)
    return {
        "object": "clover.agent.world",
        "seed": req.seed,
        **_task(request).world(req.seed, area_deg=req.area_deg).view(),
    }


@router.post("/v1/agent/execute")
async def agent_execute(request: Request):
    s = request.app.state.clover
    req: ExecuteRequest = await s.read(request, ExecuteRequest, max_bytes=MAX_BODY_BYTES)
    if len(req.calls) > MAX_CALLS:
        raise too_large(f"{len(req.calls)} calls: at most {MAX_CALLS} are run in one request", param="calls")
    task = _task(request)
    world = _world(task, req.world)
    results, messages, changes = [], [], []
    for i, call in enumerate(req.calls):
        before = world.copy()
        result = task.execute(world, call.name, call.arguments)
        results.append(result)
        changes.append(before.diff(world))
        messages.append(
            {"role": "tool", "tool_call_id": call.id or f"call_{i}", "content": json.dumps(result, ensure_ascii=False)}
        )  # as run_agent sends it
    return {
        "object": "clover.agent.execution",
        "results": results,
        "messages": messages,
        "changes": changes,
        **world.view(),
    }


def _world(task: Task, state: dict) -> World:
    try:
        return task.world_from_dict(state)
    except StateTooLarge as e:
        raise too_large(str(e), param=e.param) from None
    except ValueError as e:
        raise bad_request(str(e), param="world") from None
