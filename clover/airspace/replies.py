"""What the airspace assistant says in words, shared by the corpora: a plausible result of each
tool call and its one-sentence summary, small talk and out-of-scope answers, the decline of a
request whose tool is not offered, and the task's reply vocabulary (the words of its corpus)."""

from __future__ import annotations

import random
from functools import lru_cache

from clover.airspace.phrasing import CITIES, Ctx, _fill, _pool, _style, coord_pair

VOCABULARY_CHATS = 20000  # training chats whose words make the reply vocabulary
VOCABULARY_EXTRAS = 2000  # and as many greetings and multi-turn conversations (the recipe trains on both)

_STATES = ["en route", "hovering", "on the ground", "returning to base", "charging", "holding"]


def tool_result(rng: random.Random, name: str, args: dict) -> tuple[dict, str]:
    """A plausible JSON result for a call, and the one-sentence summary the assistant gives."""
    d, z = args.get("drone_id"), args.get("zone_name")
    if rng.random() < 0.1:  # errors happen; the summary must say so
        if d:
            return {"error": f"unknown drone {d}"}, f"I could not find {d}."
        if name == "lift_no_fly_zone":
            return {"error": "no such zone"}, f"There is no no-fly zone named {z}."
        return {"error": "zone already exists"}, f"Could not create {z}: a zone with that name already exists."
    if name == "get_drone_status":
        lat, lon = coord_pair(rng)
        state = rng.choice(_STATES)
        alt = 0 if state in ("on the ground", "charging") else rng.randint(2, 40) * 10
        b = rng.randint(5, 100)
        return (
            {"drone_id": d, "battery_pct": b, "lat": float(lat), "lon": float(lon), "altitude_m": alt, "state": state},
            f"{d} is {state} at {lat}, {lon}, altitude {alt} m, battery {b}%.",
        )
    if name == "recall_drone":
        eta = rng.randint(1, 45)
        minutes = f"{eta} minute{'' if eta == 1 else 's'}"
        return {"drone_id": d, "status": "returning", "eta_min": eta}, f"{d} is returning to base, ETA {minutes}."
    if name == "create_no_fly_zone":
        return {"zone_name": z, "status": "active"}, f"No-fly zone {z} is now active."
    if name == "lift_no_fly_zone":
        return {"zone_name": z, "status": "lifted"}, f"No-fly zone {z} has been lifted."
    if name == "update_waypoint":
        wp = args["waypoint_index"]
        return {"drone_id": d, "waypoint_index": wp, "status": "updated"}, f"Waypoint {wp} of {d} is updated."
    mid = f"M-{rng.randint(1000, 9999)}"
    return {"drone_id": d, "mission_id": mid, "status": "assigned"}, f"{d} is assigned mission {mid}."


# fmt: off
_GREET = ("Hello! I can create and lift no-fly zones, update waypoints, assign missions, recall drones and check "
          "their status.")
_CAN = "I can create and lift no-fly zones, update waypoints, assign missions, recall drones and check drone status."
_OUT = "Sorry, I can't help with that: I only handle airspace operations."
_WHO = "I am Clover, an airspace-operations assistant."
_WELCOME = "You're welcome."
SMALLTALK = (("hello", _GREET), ("thanks", _WELCOME), ("what can you do?", _CAN), ("hi", _GREET),
             ("thank you", _WELCOME), ("help", _CAN), ("who are you?", _WHO), ("good morning", _GREET),
             ("cheers", _WELCOME), ("what tools do you have?", _CAN), ("hey there", _GREET),
             ("great, thanks", _WELCOME), ("what are your capabilities?", _CAN), ("good evening", _GREET),
             ("much appreciated", _WELCOME), ("are you a bot?", _WHO), ("hello clover", _GREET),
             ("ok thanks", _WELCOME), ("how do I use you?", _CAN), ("tell me a joke", _OUT),
             ("play some music", _OUT), ("what is 17 times 23?", _OUT), ("write me a poem", _OUT),
             ("order a pizza", _OUT), ("what's the news today?", _OUT), ("what is your name?", _WHO),
             ("sing a song", _OUT), ("thanks a lot", _WELCOME), ("good afternoon", _GREET), ("list your tools", _CAN))
OUT_OF_SCOPE_T = ["what's the weather in {city}?", "book me a room in {city}", "how far is {city} from {city2}?",
                  "what time is it in {city}?", "find a good restaurant in {city}", "who is the mayor of {city}?",
                  "is it going to rain in {city} tomorrow?", "how many people live in {city}?",
                  "recommend a museum in {city}"]
# fmt: on


def no_tool_message(ctx: Ctx) -> tuple[str, str]:
    """Chit-chat (split by index) or an out-of-scope question naming split-specific cities."""
    rng = ctx.rng
    if rng.random() < 0.5:
        text, answer = rng.choice(_pool(SMALLTALK, ctx.split))
        return _style(rng, [(text + rng.choice(["", "", "!", "."]), True)], decorate=False), answer
    _, t = ctx.template("out", OUT_OF_SCOPE_T)
    a, b = rng.sample(_pool(CITIES, ctx.split), 2)
    return _style(rng, _fill(t, city=a, city2=b)), _OUT


_CAPABILITY = {
    "create_no_fly_zone": "create no-fly zones",
    "lift_no_fly_zone": "lift no-fly zones",
    "update_waypoint": "update waypoints",
    "assign_mission": "assign missions",
    "recall_drone": "recall drones",
    "get_drone_status": "check drone status",
}


def declined(tool: str) -> str:
    """The answer to a request whose tool is not offered."""
    return f"Sorry, I can't {_CAPABILITY[tool]}: no tool for that is available."


@lru_cache(maxsize=4)
def reply_vocabulary(n: int = VOCABULARY_CHATS, extras: int = VOCABULARY_EXTRAS) -> frozenset[str]:
    """The task's reply vocabulary (``clover.data.task.Task.reply_vocabulary``): the words, lower
    case, of what the task's recipe trains on, every role's (the templates, the replies, the tool
    results and the names' pools as the generator draws them): the first ``n`` chats of the train
    split, and ``extras`` greetings and ``extras`` multi-turn conversations of it."""
    from clover.airspace.chats import generate, greeting, multi_turn  # deferred: the corpus is large to import
    from clover.engine.reply_grounding import words  # deferred: the engine package loads torch

    rng = random.Random("clover-reply-vocabulary")
    chats = generate("train", n, seed=0)
    chats += [greeting(rng, "train", 0.5, 0.5) for _ in range(extras)]
    chats += [multi_turn(rng, "train") for _ in range(extras)]
    out: set[str] = set()
    for ex in chats:
        for m in ex["messages"]:
            out.update(w.lower() for w in words(m.get("content") or ""))
    return frozenset(out)
