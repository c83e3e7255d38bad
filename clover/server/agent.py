"""The airspace world over HTTP, for the playground's agent mode (docs/agent.md, Agent mode).

* ``POST /v1/agent/world`` ``{"seed": 0, "area_deg": 0.4}``: a seeded world's state
  (``World.seeded``; ``area_deg`` null: anywhere on Earth, the world of ``clover agent --world``);
* ``POST /v1/agent/execute`` ``{"world": state, "calls": [{"name", "arguments", "id"?}, ...]}``:
  each call run in order against that state; the results, the ``tool`` messages to send the
  model back, what each call changed and the new state.

Stateless: the client keeps the world and sends it with each execution. What a call does is
``clover.agent.world``'s alone; a refused call is an ``{"error": ...}`` result that leaves the
world unchanged, as in the agent loop. Bounded: a small body, a few calls, a world of a few
dozen drones and zones.
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field, model_validator

from clover.agent.world import World, execute
from clover.api.errors import bad_request, too_large

router = APIRouter()
MAX_BODY_BYTES = 256 << 10
MAX_CALLS = 16
MAX_DRONES = MAX_ZONES = MAX_WAYPOINTS = 64
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


def _view(world: World) -> dict:
    """The state and what a map draws from it that only the world's rules know: the zones in force."""
    return {
        "world": world.to_dict(),
        "active_zones": [z.name for z in world.zones.values() if z.active_at(world.clock)],
    }


@router.post("/v1/agent/world")
async def agent_world(request: Request):
    s = request.app.state.clover
    req: WorldRequest = await s.read(request, WorldRequest, max_bytes=MAX_BODY_BYTES)
    return {"object": "clover.agent.world", "seed": req.seed, **_view(World.seeded(req.seed, area_deg=req.area_deg))}


@router.post("/v1/agent/execute")
async def agent_execute(request: Request):
    s = request.app.state.clover
    req: ExecuteRequest = await s.read(request, ExecuteRequest, max_bytes=MAX_BODY_BYTES)
    if len(req.calls) > MAX_CALLS:
        raise too_large(f"{len(req.calls)} calls: at most {MAX_CALLS} are run in one request", param="calls")
    world = _world(req.world)
    results, messages, changes = [], [], []
    for i, call in enumerate(req.calls):
        before = world.copy()
        result = execute(world, call.name, call.arguments)
        results.append(result)
        changes.append(before.diff(world))
        messages.append({"role": "tool", "tool_call_id": call.id or f"call_{i}",
                         "content": json.dumps(result, ensure_ascii=False)})  # fmt: skip  # as run_agent sends it
    return {"object": "clover.agent.execution", "results": results, "messages": messages, "changes": changes,
            **_view(world)}  # fmt: skip


def _world(state: dict) -> World:
    drones, zones = state.get("drones"), state.get("zones")
    for what, items, limit in (("drones", drones, MAX_DRONES), ("zones", zones, MAX_ZONES)):
        if isinstance(items, dict) and len(items) > limit:
            raise too_large(f"the world has {len(items)} {what}: at most {limit}", param=f"world.{what}")
    for did, d in (drones or {}).items() if isinstance(drones, dict) else ():
        wps = d.get("waypoints") if isinstance(d, dict) else None
        if isinstance(wps, list) and len(wps) > MAX_WAYPOINTS:
            raise too_large(f"drone {did} has {len(wps)} waypoints: at most {MAX_WAYPOINTS}", param="world")
    try:
        return World.from_dict(state)
    except ValueError as e:
        raise bad_request(str(e), param="world") from None
