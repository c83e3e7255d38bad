"""Seeded generator of airspace-operations chats (no downloads).

An operator writes a free-form message; the assistant answers with tool calls (1 to 5 parallel
calls, in the order mentioned), a short text when no tool fits or an argument is missing, or a
one-sentence summary of a tool result. Gold arguments follow the conventions of
``clover.airspace.tools`` (``D-<n>`` ids, whole metres rounded half up, ``HH:MM``, signed degrees
with the digits as written, names and targets copied verbatim).

Generalisation is measured, not memorised:

* entity values are split: every zone name and mission target contains a word of one split
  only, drone numbers are 1-799 / 800-899 / 900-999 (train / validation / test), chit-chat
  lines are split by index;
* phrasing is split: the last template of every action, and a fixed hashed ~15 % of the
  (template × unit / time / coordinate / drone-id form) pairs, never occur in train.
  Validation and test use every phrasing; ``example["novel"]`` says whether one was used.

An example is ``{"messages": [...], "tools": [...] | None, "kind", "split", "novel"}`` with
``kind`` in :data:`KINDS`. Surface forms live in small pure functions (``radius_surface``,
``time_surface``, ``coord_surface``, ``drone_surface``) that return (text, gold) pairs.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator

from clover.airspace.phrasing import (  # noqa: F401 - also re-exported: the corpus API names them
    _ALT,
    _MISSION_WORDS,
    _WHEN,
    CITIES,
    CREATE_T,
    LIFT_T,
    MANY_T,
    MISSION_T,
    RECALL_T,
    STATUS_T,
    WAYPOINT_T,
    Ctx,
    Pieces,
    _a,
    _fill,
    _pool,
    _style,
    coord_forms,
    coord_pair,
    coord_surface,
    drone_forms,
    drone_number,
    drone_surface,
    heldout_combo,
    heldout_words,
    radius_forms,
    radius_surface,
    system_prompt,
    target_name,
    time_forms,
    time_surface,
    to_metres,
    zone_name,
)
from clover.airspace.tools import AIRSPACE_TOOLS, MISSION_TYPES
from clover.data.chat import is_answer

SPLITS = ("train", "validation", "test")
KINDS = ("tool_call", "compound", "tool_result", "no_tool", "missing_tool", "clarify", "no_tools", "multi_turn")
# "no_tools" (a chat that offers no tools at all, as a plain OpenAI request does) is drawn only
# when a recipe asks for it (``AirspaceRecipe.toolless_frac``): MIX, and so the splits, leave it out
MIX = {"tool_call": 0.32, "compound": 0.30, "tool_result": 0.14, "no_tool": 0.08, "missing_tool": 0.08, "clarify": 0.08}
# curriculum presets: stage -> (kind weights, max calls per message)
STAGES = {
    1: ({"tool_call": 1.0}, 1),
    2: (
        {"tool_call": 0.45, "compound": 0.2, "tool_result": 0.1, "no_tool": 0.1, "missing_tool": 0.1, "clarify": 0.05},
        2,
    ),
    3: (MIX, 5),
}
_SPLIT_SEED = {"train": 0, "validation": 1, "test": 2}


# -- actions: ctx -> (pieces, [(tool name, arguments)]) ------------------------------------------
Action = tuple[Pieces, list[tuple[str, dict]]]


def act_create(ctx: Ctx) -> Action:
    rng = ctx.rng
    tid, t = ctx.template("create", CREATE_T)
    zone = zone_name(rng, ctx.split, ctx.pieces)
    where, lat, lon = coord_surface(ctx, tid)
    r_txt, r = radius_surface(ctx, tid)
    args: dict = {"zone_name": zone, "lat": lat, "lon": lon, "radius_m": r}
    k, when = rng.random(), ""
    mode = "both" if k < 0.3 else "start" if k < 0.42 else "end" if k < 0.52 else None
    if mode:
        s_txt, s = time_surface(ctx, tid) if mode != "end" else ("", "")
        e_txt, e = time_surface(ctx, tid) if mode != "start" else ("", "")
        phrases = [p for p in _WHEN[mode] if "-{e}" not in p or " " not in s_txt + e_txt]
        when = rng.choice(phrases).format(s=s_txt, e=e_txt)
        args.update({k2: v for k2, v in (("start_time", s), ("end_time", e)) if v})
    return _fill(t, zone=zone, where=where, r=r_txt, when=when), [("create_no_fly_zone", args)]


def act_lift(ctx: Ctx) -> Action:
    _, t = ctx.template("lift", LIFT_T)
    zone = zone_name(ctx.rng, ctx.split, ctx.pieces)
    return _fill(t, zone=zone), [("lift_no_fly_zone", {"zone_name": zone})]


def act_waypoint(ctx: Ctx) -> Action:
    rng = ctx.rng
    tid, t = ctx.template("waypoint", WAYPOINT_T)
    d_txt, d = drone_surface(ctx, tid)
    c_txt, lat, lon = coord_surface(ctx, tid)
    wp = rng.randint(1, 12) if rng.random() < 0.9 else rng.randint(13, 40)
    args: dict = {"drone_id": d, "waypoint_index": wp, "lat": lat, "lon": lon}
    alt = ""
    if rng.random() < 0.4:
        fid, phrase, unit = ctx.form(tid, _ALT)
        a = (
            str(rng.randint(2, 40) * 10)
            if unit == "m"
            else str(rng.choice([rng.randint(1, 40) * 50, rng.randint(60, 1300)]))
        )
        args["altitude_m"] = to_metres(a, unit)
        alt = phrase.format(a=a)
    return _fill(t, d=d_txt, wp=wp, c=c_txt, alt=alt), [("update_waypoint", args)]


def act_mission(ctx: Ctx) -> Action:
    rng = ctx.rng
    tid, t = ctx.template("mission", MISSION_T)
    d_txt, d = drone_surface(ctx, tid)
    mt = rng.choice(MISSION_TYPES)
    nouns, verbs = _MISSION_WORDS[mt]
    target = target_name(rng, ctx.split, ctx.pieces)
    noun = rng.choice(nouns)
    pieces = _fill(t, d=d_txt, noun=noun, a_noun=_a(noun), verb=rng.choice(verbs), t=target)
    return pieces, [("assign_mission", {"drone_id": d, "mission_type": mt, "target": target})]


def act_recall(ctx: Ctx) -> Action:
    tid, t = ctx.template("recall", RECALL_T)
    d_txt, d = drone_surface(ctx, tid)
    return _fill(t, d=d_txt), [("recall_drone", {"drone_id": d})]


def act_status(ctx: Ctx) -> Action:
    tid, t = ctx.template("status", STATUS_T)
    d_txt, d = drone_surface(ctx, tid)
    return _fill(t, d=d_txt), [("get_drone_status", {"drone_id": d})]


def act_many(ctx: Ctx, n: int) -> Action:
    """One phrase naming several drones ("recall drones 3, 5 and 7"): one call per drone, in order."""
    rng = ctx.rng
    name = rng.choice(list(MANY_T))
    tid, t = ctx.template(f"many_{name}", MANY_T[name])
    nums: list[int] = []
    while len(nums) < n:
        x = drone_number(rng, ctx.split)
        nums += [x] if x not in nums else []
    fid, fmt = ctx.form(tid, [("D-n", "D-{}"), ("dn", "d{}"), ("drones", "{}"), ("units", "{}"), ("uav-", "uav-{}")])
    items = [fmt.format(x) for x in nums]
    sep = rng.choice([(", ", " and "), (", ", " & "), ("/", "/"), (", ", ", ")])
    ds = sep[0].join(items[:-1]) + sep[1] + items[-1]
    ds = {"drones": "drones ", "units": "units "}.get(fid, "") + ds
    return _fill(t, ds=ds), [(name, {"drone_id": f"D-{x}"}) for x in nums]


ACTIONS = [act_create, act_lift, act_waypoint, act_mission, act_recall, act_status]
_JOIN = [", then ", "; also ", " and ", ". Also ", ", plus ", ". Next, ", " & ", ". ", ", and then ", "; ", "\n"]


def _join(rng: random.Random, parts: list[Pieces]) -> Pieces:
    """Phrases in the order they are mentioned: joined by connectors, or as a numbered/bulleted list."""
    if len(parts) > 1 and rng.random() < 0.25:
        fmt = rng.choice(["{i}) ", "{i}. ", "- ", "* "])
        out: Pieces = []
        for i, p in enumerate(parts):
            out += ([("\n", True)] if i else []) + [(fmt.format(i=i + 1), True)] + p
        return out
    out = list(parts[0])
    for p in parts[1:]:
        out += [(rng.choice(_JOIN), True)] + p
    return out


# -- the kinds ----------------------------------------------------------------------------------
def _actions(ctx: Ctx, max_calls: int) -> tuple[str, list[tuple[str, dict]]]:
    """A message with exactly 1 call (max_calls == 1) or 2..max_calls calls, phrases in order."""
    n_target = 1 if max_calls <= 1 else ctx.rng.randint(2, max_calls)
    parts, calls = [], []
    while len(calls) < n_target:
        room = n_target - len(calls)
        if room >= 2 and ctx.rng.random() < 0.15:
            pieces, cs = act_many(ctx, ctx.rng.randint(2, min(room, 3)))
        else:
            pieces, cs = ctx.rng.choice(ACTIONS)(ctx)
        parts.append(pieces)
        calls += cs
    return _style(ctx.rng, _join(ctx.rng, parts)), calls


def _call(i: int, name: str, args: dict) -> dict:
    return {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
    }


def _calls_turn(calls: list[tuple[str, dict]]) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [_call(i, n, a) for i, (n, a) in enumerate(calls)]}


def _tools_for(rng: random.Random, need: set[str]) -> list[dict]:
    """The full tool list, or (30 %) a shuffled random superset of the needed tools: the model
    has to read the list, not assume it."""
    if rng.random() >= 0.3:
        return AIRSPACE_TOOLS
    tools = [t for t in AIRSPACE_TOOLS if t["function"]["name"] in need or rng.random() < 0.5]
    rng.shuffle(tools)
    return tools


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
CLARIFY_T = {  # requests that lack a required argument: ask for it instead of guessing
    "radius": ["create a no-fly zone {zone} at {where}", "set up NFZ {zone} around {where}", "new nfz {zone} @ {where}",
               "block the airspace at {where} and call it {zone}"],
    "centre": ["create a no-fly zone {zone} with radius {r}", "set up a {r} NFZ called {zone}", "new nfz {zone} r={r}",
               "we need a {r} no-fly zone named {zone}"],
    "coords": ["move waypoint {wp} of {d}", "{d}: update wp {wp}", "change waypoint {wp} of {d}",
               "shift waypoint {wp} for {d}"],
    "target": ["send {d} on {a_noun} mission", "assign {d} {a_noun} mission", "{d}: {noun} mission",
               "new {noun} mission for {d}"]}
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


def clarify_message(ctx: Ctx) -> tuple[str, str]:
    rng = ctx.rng
    what = rng.choice(list(CLARIFY_T))
    tid, t = ctx.template(f"clarify_{what}", CLARIFY_T[what])
    zone = zone_name(rng, ctx.split, ctx.pieces)
    d_txt, d = drone_surface(ctx, tid)
    wp, noun = rng.randint(1, 12), rng.choice(_MISSION_WORDS[rng.choice(MISSION_TYPES)][0])
    pieces = _fill(
        t,
        zone=zone,
        where=coord_surface(ctx, tid)[0],
        r=radius_surface(ctx, tid)[0],
        d=d_txt,
        wp=wp,
        noun=noun,
        a_noun=_a(noun),
    )
    answer = {
        "radius": f"What radius should the no-fly zone {zone} have?",
        "centre": f"Where should {zone} be centred? Please give its coordinates.",
        "coords": f"Where should waypoint {wp} of {d} go? Please give coordinates.",
        "target": f"What is the target of the {noun} mission for {d}?",
    }[what]
    return _style(rng, pieces), answer


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


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {SPLITS}")


def _chat(kind: str, tools: list[dict] | None, *messages: dict) -> dict:
    return {"kind": kind, "tools": tools, "messages": list(messages)}


def _tool_result_chat(ctx: Ctx, max_actions: int) -> dict:
    """A "tool_result" chat: a request (half of them one drone's status), its calls, their results
    and the assistant's one-sentence summary of them."""
    rng = ctx.rng
    if rng.random() < 0.5:  # the common case: one drone's status
        pieces, calls = act_status(ctx)
        text = _style(rng, pieces)
    else:
        text, calls = _actions(ctx, min(max_actions, rng.choice([1, 1, 2])))
    results = [tool_result(rng, n, a) for n, a in calls]
    tools_msgs = [
        {"role": "tool", "tool_call_id": f"call_{i}", "content": json.dumps(r, ensure_ascii=False)}
        for i, (r, _) in enumerate(results)
    ]
    return _chat(
        "tool_result",
        _tools_for(rng, {c[0] for c in calls}),
        {"role": "user", "content": text},
        _calls_turn(calls),
        *tools_msgs,
        {"role": "assistant", "content": " ".join(s for _, s in results)},
    )


def example(
    rng: random.Random,
    split: str,
    max_actions: int = 5,
    stage: int | None = None,
    mix: dict[str, float] | None = None,
    pieces: tuple[str, ...] = (),
) -> dict:
    """One chat example drawn with ``rng`` (format in the module docstring).

    ``max_actions`` caps the calls per message (1: no compound messages). ``stage`` picks a
    curriculum preset from :data:`STAGES` (1: single calls only; 2: every kind, ≤ 2 calls;
    3: everything, ≤ 5 calls) and overrides ``max_actions``; ``mix`` overrides the kind weights.
    ``pieces``: the training tokenizer's word pieces, for train names (``phrasing.coined_word``).
    """
    _check_split(split)
    if stage is not None:
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; choose from {sorted(STAGES)}")
        stage_mix, max_actions = STAGES[stage]
        mix = mix or stage_mix
    if max_actions < 1:
        raise ValueError(f"max_actions must be >= 1, got {max_actions}")
    mix = mix or MIX
    ctx = Ctx(rng, split, pieces)
    kind = rng.choices(list(mix), weights=list(mix.values()))[0]
    user = lambda text: {"role": "user", "content": text}
    said = lambda text: {"role": "assistant", "content": text}
    if kind in ("tool_call", "compound"):
        text, calls = _actions(ctx, max_actions if kind == "compound" else 1)
        ex = _chat(
            "tool_call" if len(calls) == 1 else "compound",
            _tools_for(rng, {c[0] for c in calls}),
            user(text),
            _calls_turn(calls),
        )
    elif kind == "tool_result":
        ex = _tool_result_chat(ctx, max_actions)
    elif kind == "missing_tool":
        pieces, calls = rng.choice(ACTIONS)(ctx)
        name = calls[0][0]
        tools = [t for t in AIRSPACE_TOOLS if t["function"]["name"] != name and rng.random() < 0.6]
        rng.shuffle(tools)
        answer = declined(name)
        ex = _chat("missing_tool", tools or None, user(_style(rng, pieces)), said(answer))
    elif kind == "no_tools":  # nothing offered: chit-chat as usual, an action is declined
        if rng.random() < 0.5:
            text, answer = no_tool_message(ctx)
        else:
            pieces, calls = rng.choice(ACTIONS)(ctx)
            text, answer = _style(rng, pieces), declined(calls[0][0])
        ex = _chat("no_tools", None, user(text), said(answer))
    elif kind == "no_tool":
        text, answer = no_tool_message(ctx)
        ex = _chat("no_tool", AIRSPACE_TOOLS, user(text), said(answer))
    elif kind == "clarify":
        text, answer = clarify_message(ctx)
        ex = _chat("clarify", AIRSPACE_TOOLS, user(text), said(answer))
    else:
        raise ValueError(f"unknown kind {kind!r}; choose from {KINDS}")
    system = system_prompt(ex["messages"][0]["content"], split)
    if system is not None:
        ex["messages"].insert(0, {"role": "system", "content": system})
    ex["split"], ex["novel"] = split, ctx.novel
    return ex


# the earlier exchanges of a "multi_turn" conversation: a request with its calls, their results
# and the summary (an agent loop), calls left without results (a chat UI that runs no tools),
# or small talk (a chat without tools: its own kind of exchange)
_HISTORY_MIX = {"tool_result": 0.5, "tool_call": 0.2, "no_tool": 0.3}
_FINAL_MIX = MIX | {"no_tools": 0.1}


def multi_turn(
    rng: random.Random,
    split: str,
    max_actions: int = 5,
    mix: dict[str, float] | None = None,
    pieces: tuple[str, ...] = (),
) -> dict:
    """A conversation of 2-4 user turns: 1-3 earlier exchanges, then the turn to answer (an
    ``example`` of ``mix``, default :data:`MIX` and a tenth of chats without tools), as an agent
    loop or a chat client sends it. The earlier assistant turns carry OpenAI's ``weight: 0``
    (context, never a training target);
    the conversation offers the last turn's tools, and an earlier exchange that called a tool
    not offered is left out. ``kind`` is "multi_turn", ``final_kind`` the last turn's kind."""
    final = example(rng, split, max_actions, mix=mix or _FINAL_MIX, pieces=pieces)
    offered = {t["function"]["name"] for t in final["tools"] or []}
    history: list[dict] = []
    for _ in range(rng.choice((1, 1, 2, 3))):
        h = example(rng, split, 2, mix=_HISTORY_MIX if offered else {"no_tools": 1.0}, pieces=pieces)
        if any(c["function"]["name"] not in offered for m in h["messages"] for c in m.get("tool_calls") or []):
            continue
        history += [
            dict(m, weight=0) if m["role"] == "assistant" else m for m in h["messages"] if m["role"] != "system"
        ]
    msgs = final["messages"]
    head = msgs[:1] if msgs[0]["role"] == "system" else []
    return dict(final, kind="multi_turn", final_kind=final["kind"], messages=head + history + msgs[len(head) :])


def stream(split: str, seed: int = 0, max_actions: int = 5, stage: int | None = None) -> Iterator[dict]:
    """An endless, seeded stream of examples of one split."""
    rng = random.Random(f"clover-corpus-{split}-{seed}")
    while True:
        yield example(rng, split, max_actions, stage)


def generate(split: str, n: int, seed: int = 0, max_actions: int = 5, stage: int | None = None) -> list[dict]:
    """``n`` examples of ``split``; the same arguments always give the same list."""
    _check_split(split)
    it = stream(split, seed, max_actions, stage)
    return [next(it) for _ in range(n)]


def load_split(split: str, n: int = 500) -> list[dict]:
    """The fixed evaluation set of a split (deterministic; no training seed reaches it)."""
    return generate(split, n, seed=1_000_003 + _SPLIT_SEED[split])


def toolless_set(split: str, n: int = 100) -> list[dict]:
    """A split's fixed chats that offer no tools at all (kind "no_tools", outside MIX: drawn here
    and by recipes that ask for them, so ``load_split`` stays as it was)."""
    _check_split(split)
    rng = random.Random(f"clover-toolless-{split}")
    return [example(rng, split, mix={"no_tools": 1.0}) for _ in range(n)]


TEXT_KINDS = ("no_tool", "missing_tool", "clarify", "no_tools")  # answered in words, no call
# the last turns of the fixed multi-turn sets: a call or a reply in words, not a summary
MULTITURN_MIX = {k: v for k, v in _FINAL_MIX.items() if k != "tool_result"}


def multiturn_set(split: str, n: int = 100) -> list[dict]:
    """A split's fixed conversations with earlier turns (``multi_turn``), the last turn a call
    or a reply in words (outside MIX, like ``toolless_set``: ``load_split`` stays as it was)."""
    _check_split(split)
    rng = random.Random(f"clover-multiturn-{split}")
    return [multi_turn(rng, split, mix=MULTITURN_MIX) for _ in range(n)]


def test_set(n: int = 500) -> list[dict]:
    """The fixed test set: held-out entities, and held-out phrasings where ``ex["novel"]``."""
    return load_split("test", n)


test_set.__test__ = False  # a data function, not a pytest test


# -- gold answers and scoring -------------------------------------------------------------------
def plain_call(call: dict) -> dict:
    """``{"name", "arguments": dict}`` from that form or the OpenAI form (arguments as JSON text)."""
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            args = {"_unparsed": args}
    return {"name": fn.get("name"), "arguments": args if args is not None else {}}


def answers(ex: dict) -> list[dict]:
    """The assistant turns to answer (not the ``weight: 0`` ones: a conversation's history)."""
    return [m for m in ex["messages"] if is_answer(m)]


def gold_calls(ex: dict, turn: int = 0) -> list[dict]:
    """Answer ``turn``'s calls as ``[{"name", "arguments": dict}]`` ([] for a text turn)."""
    turns = answers(ex)
    return [plain_call(c) for c in turns[turn].get("tool_calls") or []] if turn < len(turns) else []


_UNIT_ARITHMETIC = re.compile(r"\d\s?(?:nm|nmi|nautical miles?|ft|feet)\b", re.IGNORECASE)


def needs_unit_arithmetic(message: str) -> bool:
    """Whether a message gives a length in feet or nautical miles: its call's metres are then a
    multiplication (x 0.3048, x 1852, rounded), not a copy or a shift of the decimal point."""
    return bool(_UNIT_ARITHMETIC.search(message))


def field_scores(pred_calls: list[dict], gold_calls: list[dict]) -> dict[str, list[int]]:
    """Where a miss comes from, as ``{field: [right, total]}``: ``tool`` (each gold call has a
    predicted call of its name; each predicted call serves once, the best-agreeing first), every
    gold argument by its key (the matched call has the same value), ``no_extra_args`` (the
    matched call adds no argument the gold lacks) and ``call_count``."""
    pred = [plain_call(c) for c in pred_calls]
    out: dict[str, list[int]] = {}

    def add(field: str, right: bool) -> None:
        r = out.setdefault(field, [0, 0])
        r[0] += int(right)
        r[1] += 1

    free = list(range(len(pred)))
    for g in map(plain_call, gold_calls):
        args = g["arguments"] if isinstance(g["arguments"], dict) else {}
        same = [i for i in free if pred[i]["name"] == g["name"]]
        agree = lambda i: sum(_norm(_args(pred[i]).get(k)) == _norm(v) for k, v in args.items())
        m = max(same, key=agree) if same else None
        add("tool", m is not None)
        got = _args(pred[m]) if m is not None else {}
        for k, v in args.items():
            add(k, k in got and _norm(got[k]) == _norm(v))
        if m is not None:
            free.remove(m)
            add("no_extra_args", set(got) <= set(args))
    add("call_count", len(pred) == len(gold_calls))
    return out


def _args(call: dict) -> dict:
    a = call.get("arguments")
    return a if isinstance(a, dict) else {}


def _norm(v):
    """Hashable canonical form: numbers as floats (1 == 1.0); bools, strings, None kept apart."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return (type(v).__name__, v)
    if isinstance(v, int | float):
        return ("num", float(v))
    if isinstance(v, dict):
        return ("obj", tuple(sorted((str(k), _norm(x)) for k, x in v.items())))
    if isinstance(v, list | tuple):
        return ("arr", tuple(_norm(x) for x in v))
    return ("other", repr(v))


def score_tool_calls(pred_calls: list[dict], gold_calls: list[dict]) -> bool:
    """Exact match: the same multiset of (name, arguments), the order of parallel calls ignored,
    numbers compared as numbers. Calls may be ``{"name", "arguments"}`` or OpenAI-format."""
    key = lambda c: repr((c["name"], _norm(c["arguments"])))
    return sorted(key(plain_call(c)) for c in pred_calls) == sorted(key(plain_call(c)) for c in gold_calls)
