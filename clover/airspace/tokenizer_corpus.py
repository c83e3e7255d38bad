"""The first airspace corpus, kept for what still reads it: the bundled tokenizer is trained on
its train chats (``clover.airspace.tokenizer``, byte for byte reproducible), and the bundled
model's first stages (``lineage`` in ``clover/assets/default/training.json``, up to the switch to
the extraction tools) were trained on it. It is no task of its own: the airspace task's corpus is
``clover.airspace.chats``, its tools ``clover.airspace.extraction_tools``.

An operator writes a free-form message; the assistant answers with tool calls in the metres form
of ``clover.airspace.tools`` (1 to 5 parallel calls, in the order mentioned; ``D-<n>`` ids, whole
metres rounded half up, ``HH:MM``, signed degrees with the digits as written, names and targets
copied verbatim), a short text when no tool fits or an argument is missing, or a one-sentence
summary of a tool result.

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
from collections.abc import Iterator

from clover.airspace.calls import _call
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
    SPLITS,
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
from clover.airspace.replies import declined, no_tool_message, tool_result
from clover.airspace.tools import AIRSPACE_TOOLS, MISSION_TYPES

KINDS = ("tool_call", "compound", "tool_result", "no_tool", "missing_tool", "clarify")
MIX = {"tool_call": 0.32, "compound": 0.30, "tool_result": 0.14, "no_tool": 0.08, "missing_tool": 0.08, "clarify": 0.08}


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


CLARIFY_T = {  # requests that lack a required argument: ask for it instead of guessing
    "radius": [
        "create a no-fly zone {zone} at {where}",
        "set up NFZ {zone} around {where}",
        "new nfz {zone} @ {where}",
        "block the airspace at {where} and call it {zone}",
    ],
    "centre": [
        "create a no-fly zone {zone} with radius {r}",
        "set up a {r} NFZ called {zone}",
        "new nfz {zone} r={r}",
        "we need a {r} no-fly zone named {zone}",
    ],
    "coords": [
        "move waypoint {wp} of {d}",
        "{d}: update wp {wp}",
        "change waypoint {wp} of {d}",
        "shift waypoint {wp} for {d}",
    ],
    "target": [
        "send {d} on {a_noun} mission",
        "assign {d} {a_noun} mission",
        "{d}: {noun} mission",
        "new {noun} mission for {d}",
    ],
}
# fmt: on


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
    mix: dict[str, float] | None = None,
    pieces: tuple[str, ...] = (),
) -> dict:
    """One chat example drawn with ``rng`` (format in the module docstring).

    ``max_actions`` caps the calls per message (1: no compound messages); ``mix`` overrides the
    kind weights.
    ``pieces``: the training tokenizer's word pieces, for train names (``phrasing.coined_word``).
    """
    _check_split(split)
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


def stream(split: str, seed: int = 0, max_actions: int = 5) -> Iterator[dict]:
    """An endless, seeded stream of examples of one split."""
    rng = random.Random(f"clover-corpus-{split}-{seed}")
    while True:
        yield example(rng, split, max_actions)


def generate(split: str, n: int, seed: int = 0, max_actions: int = 5) -> list[dict]:
    """``n`` examples of ``split``; the same arguments always give the same list."""
    _check_split(split)
    it = stream(split, seed, max_actions)
    return [next(it) for _ in range(n)]
