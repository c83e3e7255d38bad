"""The tool lists users pass (``clover eval airspace2 --tool-lists varied``): each tool-call turn
of the evaluation asked again with its tool list changed as agent frameworks send it, one kind of
change at a time and all of them together, drawn per chat from a seed.

The chat's own list (``standard``, the evaluation's ``exact_match``) is the corpus's: all six tools
in their standard order, or a third of the time a subset of them in that order.

* ``six``: all six tools in the standard order.
* ``subset``: a random subset of the six that still holds every tool the gold calls need (often
  with one or more of the others), in the standard order.
* ``order``: the chat's own list in a random order.
* ``reworded``: the chat's own list with every description and argument description replaced
  by one of :data:`PHRASINGS` (as the OpenAI Agents SDK writes them from a docstring, LangChain from a
  pydantic model, or a developer by hand). These phrasings are held out: the corpus never shows
  them (a test holds them apart from the tools' own descriptions); a corpus that rewords its
  tools for training must draw from other phrasings, or this figure no longer measures words the
  model never saw.
* ``schema``: the chat's own list with schema details added: ``title`` on the tool's
  parameters and on each argument, ``strict: true``, ``additionalProperties: false``.
* ``varied``: all four at once (a subset, in random order, reworded, with schema details).
* ``missing``: the six less the tools the gold calls need, in random order: the right
  answer is then a reply in words declining, no call. ``missing`` counts an answer right when it
  has words and calls no tool; ``missing_declined`` when it is the corpus's decline word for word
  (``textscore.reply_words_right``).

Argument names, types, enums, ``required`` and ``x-grounded`` markers are kept as they are: the
tool-call grammar and the scoring read them. The bundled chat template shows the model each tool
as a signature (``recall_drone(drone_id: string)``), without descriptions or schema details, so
``reworded`` and ``schema`` give the prompts of ``standard``: they measure a template (or a model)
that reads descriptions, and check that the grammar is indifferent to them.
"""

from __future__ import annotations

import copy
import random

from clover.airspace.calls import gold_calls
from clover.airspace.evaluate import _generate, _requests, _words_no_call
from clover.airspace.extraction_tools import EXTRACTION_TOOLS
from clover.airspace.replies import declined
from clover.airspace.scoring import reply_right2
from clover.airspace.textscore import reply_words_right
from clover.data.chat import is_answer

KINDS = ("six", "subset", "order", "reworded", "schema", "varied", "missing")

# held-out descriptions per tool: a docstring's first line (Agents SDK), a pydantic model's
# docstring (LangChain), a developer's own words
PHRASINGS: dict[str, tuple[str, ...]] = {
    "create_no_fly_zone": (
        "Creates a new circular restricted airspace area at the given coordinates.",
        "Declare a no-fly area: a circle with a centre point and a radius, optionally time-limited.",
        "Use this tool to block airspace around a location so drones cannot enter it.",
    ),
    "lift_no_fly_zone": (
        "Removes a restricted airspace area that was created earlier.",
        "Cancel an active no-fly zone, given its name.",
        "Use this to reopen airspace by deleting a named no-fly area.",
    ),
    "update_waypoint": (
        "Changes the coordinates of a single waypoint on a drone's flight plan.",
        "Edit a route point of a UAV: which point, and where it should now be.",
        "Use this tool when the operator wants a drone's waypoint moved somewhere else.",
    ),
    "assign_mission": (
        "Gives a drone a new task of the given type at a target location.",
        "Dispatch a UAV on a mission (survey, delivery, inspection, ...) to a target.",
        "Use this to tell a drone what job to do and where.",
    ),
    "recall_drone": (
        "Sends a drone back to its home base.",
        "Return a UAV to base immediately.",
        "Use this tool to bring a drone home.",
    ),
    "get_drone_status": (
        "Returns the current state of a drone (battery, location, altitude, mission).",
        "Look up telemetry for one UAV.",
        "Use this to check how a drone is doing.",
    ),
}

# held-out argument descriptions, by argument name (the same argument reads alike in every tool)
ARG_PHRASINGS: dict[str, tuple[str, ...]] = {
    "zone_name": ("The name of the zone.", "Name of the restricted area, as written by the user.", "zone name"),
    "lat": ("Latitude of the point.", "The latitude in degrees (negative for south).", "latitude"),
    "lon": ("Longitude of the point.", "The longitude in degrees (negative for west).", "longitude"),
    "radius": ("Size of the zone's radius.", "The radius value, without its unit.", "radius"),
    "radius_unit": ("Unit of the radius.", "Which unit the radius is measured in.", "radius unit"),
    "altitude": ("New altitude for the waypoint.", "The altitude value, without its unit.", "altitude"),
    "altitude_unit": ("Unit of the altitude.", "Which unit the altitude is measured in.", "altitude unit"),
    "start_time": ("When the zone becomes active.", "Start of the active window (HH:MM).", "start time"),
    "end_time": ("When the zone stops being active.", "End of the active window (HH:MM).", "end time"),
    "drone_id": ("The identifier of the drone.", "Which UAV, e.g. D-7.", "drone id"),
    "waypoint_index": ("Index of the waypoint to change.", "The waypoint's number on the route.", "waypoint"),
    "mission_type": ("Kind of mission.", "The type of job to carry out.", "mission type"),
    "target": ("Where the mission takes place.", "The mission's target, as the user named it.", "target"),
}


def _rng(seed: int, i: int, kind: str) -> random.Random:
    return random.Random(f"tool-lists:{seed}:{i}:{kind}")


def needed(ex: dict) -> set[str]:
    """The tools a chat's gold calls use."""
    return {c["name"] for c in gold_calls(ex)}


def subset(tools: list[dict], keep: set[str], rng: random.Random) -> list[dict]:
    """The tools named in ``keep`` and a random share of the others, in their order."""
    share = rng.random()
    return [t for t in tools if t["function"]["name"] in keep or rng.random() < share]


def shuffled(tools: list[dict], rng: random.Random) -> list[dict]:
    out = list(tools)
    rng.shuffle(out)
    return out


def reworded(tools: list[dict], rng: random.Random) -> list[dict]:
    """Each description and argument description replaced by a held-out phrasing; names, types,
    enums, ``required`` and ``x-grounded`` as they were."""
    out = copy.deepcopy(tools)
    for t in out:
        fn = t["function"]
        fn["description"] = rng.choice(PHRASINGS[fn["name"]])
        for name, prop in fn["parameters"]["properties"].items():
            prop["description"] = rng.choice(ARG_PHRASINGS[name])
    return out


def with_schema_details(tools: list[dict]) -> list[dict]:
    """``title`` on the parameters and each argument, ``strict: true``, ``additionalProperties:
    false`` (as pydantic and the Agents SDK's strict mode write them)."""
    out = copy.deepcopy(tools)
    for t in out:
        fn = t["function"]
        fn["strict"] = True
        params = fn["parameters"]
        params["title"] = "".join(w.title() for w in fn["name"].split("_")) + "Args"
        params["additionalProperties"] = False
        for name, prop in params["properties"].items():
            prop["title"] = name.replace("_", " ").title()
    return out


def varied_tools(ex: dict, kind: str, rng: random.Random) -> list[dict]:
    """``ex``'s tool list changed by ``kind`` (one of :data:`KINDS`): ``order``, ``reworded`` and
    ``schema`` change the chat's own list (the corpus's: all six tools, or a third of the time a
    subset in the standard order); ``six``, ``subset``, ``varied`` and ``missing`` start from all six."""
    own, keep = ex.get("tools") or EXTRACTION_TOOLS, needed(ex)
    if kind == "six":
        return list(EXTRACTION_TOOLS)
    if kind == "subset":
        return subset(EXTRACTION_TOOLS, keep, rng)
    if kind == "order":
        return shuffled(own, rng)
    if kind == "reworded":
        return reworded(own, rng)
    if kind == "schema":
        return with_schema_details(own)
    if kind == "varied":
        return with_schema_details(reworded(shuffled(subset(EXTRACTION_TOOLS, keep, rng), rng), rng))
    if kind == "missing":
        return shuffled([t for t in EXTRACTION_TOOLS if t["function"]["name"] not in keep], rng)
    raise ValueError(f"unknown tool-list variation {kind!r}; choose from {KINDS}")


def called(ex: dict) -> set[str]:
    """Every tool a chat's calls use, in any turn (history too)."""
    return {c["function"]["name"] for m in ex["messages"] for c in m.get("tool_calls") or []}


def drawn_tools(ex: dict, rng: random.Random, missing: float = 0.0) -> dict:
    """A training chat with its tool list drawn as users pass theirs: a random subset of the
    chat's list that holds every tool its calls use, in random order, a third of the time with
    schema details. With probability ``missing``, a one-call turn is asked without the tool it
    needs, and its gold answer is the corpus's decline in words."""
    own = ex["tools"]
    if missing and ex["kind"] == "tool_call" and rng.random() < missing:
        first = gold_calls(ex)[0]["name"]
        tools = shuffled([t for t in own if t["function"]["name"] != first and rng.random() < 0.7], rng)
        at = next(j for j, m in enumerate(ex["messages"]) if is_answer(m))
        msgs = ex["messages"][:at] + [{"role": "assistant", "content": declined(first)}]
        return {**ex, "tools": tools or None, "messages": msgs, "kind": "missing_tool"}
    tools = shuffled(subset(own, called(ex), rng), rng)
    return {**ex, "tools": with_schema_details(tools) if rng.random() < 1 / 3 else tools}


def varied_chat(ex: dict, i: int, kind: str, seed: int = 0) -> dict:
    """Tool-call turn ``ex`` (the ``i``-th) with its tool list varied by ``kind``, drawn from
    ``seed``; for ``missing`` the gold answer is the corpus's decline of the first needed tool."""
    out = {**ex, "tools": varied_tools(ex, kind, _rng(seed, i, kind)), "variation": kind}
    if kind == "missing":
        first = gold_calls(ex)[0]["name"]
        at = next(j for j, m in enumerate(ex["messages"]) if is_answer(m))
        out["messages"] = ex["messages"][:at] + [{"role": "assistant", "content": declined(first)}]
        out["kind"] = "missing_tool"
    return out


def varied_set(exs: list[dict], seed: int = 0, kinds: tuple[str, ...] = KINDS) -> list[dict]:
    """Every tool-call turn of ``exs`` once per variation kind, the kinds one after another."""
    return [varied_chat(e, i, k, seed) for k in kinds for i, e in enumerate(exs)]


def tool_list_figures(outs, chats: list[dict]) -> dict[str, float]:
    """Exact match per variation kind (``reply_right2``: the calls with lengths in metres); for
    ``missing`` the share of answers with words and no call, and ``missing_declined`` the share
    that is the corpus's decline word for word."""
    right: dict[str, list[bool]] = {}
    for o, e in zip(outs, chats):
        kind = e["variation"]
        ok = _words_no_call(o) if kind == "missing" else reply_right2(o.text, e)
        right.setdefault(kind, []).append(ok)
        if kind == "missing":
            right.setdefault("missing_declined", []).append(reply_words_right(o.text, e))
    return {k: sum(v) / len(v) for k, v in right.items()}


def evaluate_tool_lists(model, tok, exs: list[dict], settings: dict, seed: int = 0, progress: bool = True) -> dict:
    """The tool-call turns ``exs`` asked once per variation kind (:func:`varied_set`) and decoded
    as ``clover.airspace.evaluate`` decodes them (``settings``: ``policy``, ``threshold``,
    ``block_size``, ``grammar``): ``tool_lists``, exact match per kind beside the standard list's
    (``standard``, from ``settings["exact_match"]``), the turns per kind and the seed."""
    from clover.engine import Engine, SamplingParams  # deferred: torch

    params = SamplingParams(
        max_tokens=320, policy=settings["policy"], threshold=settings["threshold"], block_size=settings["block_size"]
    )
    chats = varied_set(exs, seed)
    prompts, plist = _requests(tok, chats, [], params, settings["grammar"])
    label = f"tool lists {settings['policy']}"
    outs = _generate(Engine(model, tok, max_batch_size=16), prompts, plist, 16, label, progress)
    figures = {"standard": settings["exact_match"], **tool_list_figures(outs, chats)}
    return {"tool_lists": figures, "tool_lists_n": len(exs), "tool_lists_seed": seed}
