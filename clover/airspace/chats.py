"""Seeded generator of the second airspace corpus (task ``airspace2``), for the extraction tools.

Kinds of chat (:data:`MIX`): one call or several (in the order mentioned), a tool result to
summarise, small talk, requests that no tool serves (answered in words, never with a call), a
tool that is not offered, a missing argument asked for in words, conversations whose last turn
refers back to an earlier one ("bring it home", "that drone", "instead"), chats offering no tools,
and plain text that is not a chat at all (``{"kind": "plain", "text", "prompt"}``: a completion of
``prompt`` continues it). Outside :data:`MIX` (so the fixed splits stay as they were), recipes
also draw conversations whose last turn does *not* refer back (``multi_turn``: thanks after a
tool result, a new request for other drones, a request no tool serves), so that a turn after a
history is read for what it says.

Held out of train, as in the first corpus: drone numbers 800-999, the last template of every
list and a hashed share of (template, form) pairs; and whole name families
(``names.HELDOUT_FAMILIES``). ``example["names"]`` lists the (family, name) pairs a chat uses.
Gold arguments: lengths as a number and its unit (``tools.EXTRACTION_TOOLS``), times ``HH:MM``,
ids ``D-<n>``, coordinates with their digits, names and targets exactly as written (without the
quotes or brackets around them). Greetings and
thanks with operations words in them ("morning, quiet shift so far?") are answered in words
(:func:`greeting`, drawn by the recipe outside MIX).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator

from clover.airspace import names
from clover.airspace.calls import _call
from clover.airspace.extraction_tools import EXTRACTION_TOOLS, LENGTHS, drone_key, written_form
from clover.airspace.phrasing import (
    _MISSION_WORDS,
    CITIES,
    NATO,
    PLACES,
    Ctx,
    Pieces,
    _a,
    _fill,
    _pool,
    coord_pair,
    coord_surface,
    drone_forms,
    drone_number,
    drone_surface,
    system_prompt,
)
from clover.airspace.replies import _GREET, _WELCOME, SMALLTALK, declined, no_tool_message, tool_result
from clover.airspace.templates import (
    ALT_T,
    CREATE_T,
    LIFT_T,
    MISSION_T,
    RECALL_T,
    STATUS_T,
    UNSERVED_T,
    WAYPOINT_T,
    WHEN,
    WHEN_LABEL,
    length_surface,
    quoted,
    style,
    time_surface2,
)
from clover.airspace.tools import MISSION_TYPES

SPLITS = ("train", "validation", "test")
MIX = {
    "tool_call": 0.25,
    "compound": 0.2,
    "tool_result": 0.1,
    "no_tool": 0.05,
    "unserved": 0.07,
    "missing_tool": 0.04,
    "clarify": 0.08,
    "follow_up": 0.12,
    "no_tools": 0.04,
    "plain": 0.05,
}
TEXT_KINDS = ("no_tool", "unserved", "missing_tool", "clarify", "no_tools")  # answered in words
_SPLIT_SEED = {"train": 0, "validation": 1, "test": 2}
UNSERVED = (
    "Sorry, none of my tools can do that. I can create and lift no-fly zones, update waypoints, "
    "assign missions, recall drones and check their status."
)
Action = tuple[Pieces, list[tuple[str, dict]]]


_DRONE_FORMS = {fid for fid, _ in drone_forms(0)}


class Gen(Ctx):
    """One example's generation state: the first corpus's (rng, split, word pieces, novel) and
    the names used, with their families."""

    def __init__(self, rng: random.Random, split: str, pieces: tuple[str, ...] = ()):
        super().__init__(rng, split, pieces)
        self.names: list[tuple[str, str]] = []
        self.surfaces: list[list] = []  # [text as written, gold] of every length, time and drone drawn

    def form(self, tid: str, forms: list[tuple]) -> tuple:
        f = super().form(tid, forms)
        if len(f) > 2 or f[0] in _DRONE_FORMS:  # a length, a time or a drone (not coordinates)
            self.surfaces.append([f[1], f[2] if len(f) > 2 else None])
        return f

    def drone_said(self, text: str) -> str:
        """Record a drone written outside ``form`` ("drones 3, #5 and d7", "same for UAV 9")."""
        self.surfaces.append([text, None])
        return text

    def name(self, target: bool = False) -> str:
        n, fam = names.name(self.rng, self.split, target, self.pieces)
        self.names.append((fam, n))
        return n


# -- actions: gen -> (pieces, [(tool, arguments)]) ----------------------------------------------
def _window(g: Gen, tid: str, label: bool) -> tuple[str, dict]:
    k = g.rng.random()
    mode = "both" if k < 0.3 else "start" if k < 0.4 else "end" if k < 0.52 else None
    if mode is None:
        return "", {}
    s_txt, s = time_surface2(g, tid) if mode != "end" else ("", "")
    e_txt, e = time_surface2(g, tid) if mode != "start" else ("", "")
    phrase = g.rng.choice((WHEN_LABEL if label else WHEN)[mode]).format(s=s_txt, e=e_txt)
    return phrase, {k2: v for k2, v in (("start_time", s), ("end_time", e)) if v}


def act_create(g: Gen) -> Action:
    tid, t = g.template("create2", CREATE_T)
    t, _, label = t.partition("|")
    zone = g.name()
    where, lat, lon = coord_surface(g, tid)
    r_txt, r, unit = length_surface(g, tid)
    when, window = _window(g, tid, bool(label))
    args = {"zone_name": zone, "lat": lat, "lon": lon, "radius": r, "radius_unit": unit, **window}
    if when and not label and g.rng.random() < 0.2:  # the window first: "From 6pm until 23:00, ..."
        t, when = when.lstrip(", ").capitalize() + ", " + t, ""
    return _fill(t, zone=quoted(g.rng, zone), where=where, r=r_txt, when=when), [("create_no_fly_zone", args)]


def act_lift(g: Gen) -> Action:
    _, t = g.template("lift2", LIFT_T)
    zone = g.name()
    return _fill(t, zone=quoted(g.rng, zone)), [("lift_no_fly_zone", {"zone_name": zone})]


def act_waypoint(g: Gen) -> Action:
    tid, t = g.template("waypoint2", WAYPOINT_T)
    d_txt, d = drone_surface(g, tid)
    c_txt, lat, lon = coord_surface(g, tid)
    wp = g.rng.randint(1, 12) if g.rng.random() < 0.9 else g.rng.randint(13, 40)
    args: dict = {"drone_id": d, "waypoint_index": wp, "lat": lat, "lon": lon}
    alt = ""
    if g.rng.random() < 0.4:
        a_txt, a, unit = length_surface(g, tid, altitude=True)
        args |= {"altitude": a, "altitude_unit": unit}
        alt = g.rng.choice(ALT_T).format(a=a_txt)
    return _fill(t, d=d_txt, wp=wp, c=c_txt, alt=alt), [("update_waypoint", args)]


def _mission_words(g: Gen) -> tuple[str, str, str]:
    mt = g.rng.choice(MISSION_TYPES)
    nouns, verbs = _MISSION_WORDS[mt]
    return mt, g.rng.choice(nouns), g.rng.choice(verbs)


def act_mission(g: Gen) -> Action:
    tid, t = g.template("mission2", MISSION_T)
    d_txt, d = drone_surface(g, tid)
    mt, noun, verb = _mission_words(g)
    target = g.name(target=True)
    pieces = _fill(t, d=d_txt, noun=noun, a_noun=_a(noun), verb=verb, t=quoted(g.rng, target))
    return pieces, [("assign_mission", {"drone_id": d, "mission_type": mt, "target": target})]


def _drone_call(g: Gen, action: str, templates: list[str], tool: str) -> Action:
    """A message about one drone whose call takes only its id."""
    tid, t = g.template(action, templates)
    d_txt, d = drone_surface(g, tid)
    return _fill(t, d=d_txt), [(tool, {"drone_id": d})]


def act_recall(g: Gen) -> Action:
    return _drone_call(g, "recall2", RECALL_T, "recall_drone")


def act_status(g: Gen) -> Action:
    return _drone_call(g, "status2", STATUS_T, "get_drone_status")


def act_many(g: Gen, n: int) -> Action:
    """Several drones in one phrase ("recall drones 3, 5 and 7"): one call each, in order."""
    tool = g.rng.choice(["recall_drone", "get_drone_status"])
    nums: list[int] = []
    while len(nums) < n:
        x = drone_number(g.rng, g.split)
        nums += [x] if x not in nums else []
    items = [g.drone_said(g.rng.choice(["D-{}", "d{}", "{}", "#{}"]).format(x)) for x in nums]
    ds = ", ".join(items[:-1]) + g.rng.choice([" and ", " & ", ", ", "/"]) + items[-1]
    ds = ("drones " if not items[0].startswith(("D", "d")) else "") + ds
    t = {
        "recall_drone": ["recall {ds}", "everyone back: {ds}", "RTB {ds}", "bring {ds} home"],
        "get_drone_status": ["status of {ds}?", "quick check on {ds}", "how are {ds} doing?"],
    }[tool]
    return _fill(g.rng.choice(t), ds=ds), [(tool, {"drone_id": f"D-{x}"}) for x in nums]


ACTIONS = [act_create, act_lift, act_waypoint, act_mission, act_recall, act_status]
_JOIN = [
    ", then ",
    "; also ",
    " and ",
    ". Also ",
    ", plus ",
    ". Next, ",
    " & ",
    ". ",
    ", and then ",
    "; ",
    "\n",
    " - ",
    ". After that, ",
]


def actions(g: Gen, n: int) -> tuple[str, list[tuple[str, dict]]]:
    """A message with ``n`` calls (several drones in one phrase sometimes), phrases in order."""
    parts, calls = [], []
    while len(calls) < n:
        room = n - len(calls)
        pieces, cs = (
            act_many(g, g.rng.randint(2, min(room, 3)))
            if room >= 2 and g.rng.random() < 0.15
            else (g.rng.choice(ACTIONS)(g))
        )
        parts.append(pieces)
        calls += cs
    if len(parts) > 1 and g.rng.random() < 0.25:  # a numbered or bulleted list
        fmt = g.rng.choice(["{i}) ", "{i}. ", "- ", "* ", "#{i} "])
        out: Pieces = []
        for i, p in enumerate(parts):
            out += ([("\n", True)] if i else []) + [(fmt.format(i=i + 1), True)] + p
    else:
        out = list(parts[0])
        for p in parts[1:]:
            out += [(g.rng.choice(_JOIN), True)] + p
    return style(g.rng, out), calls


# -- replies in words ---------------------------------------------------------------------------
def unserved_message(g: Gen) -> str:
    _, t = g.template("unserved", UNSERVED_T)
    d_txt, _ = drone_surface(g, "unserved")
    r_txt = length_surface(g, "unserved")[0]
    slots = dict(
        place=g.name(),
        time=time_surface2(g, "unserved")[0],
        d=d_txt,
        t=g.name(target=True),
        city=g.rng.choice(_pool(CITIES, g.split)),
        n=g.rng.randint(1, 30),
        zone=g.name(),
        zone2=g.name(),
        r=r_txt,
    )
    return style(g.rng, _fill(t, **{k: v for k, v in slots.items() if "{" + k + "}" in t}))


def clarify_message(g: Gen) -> tuple[str, str]:
    """A request missing what its call needs, and the question that asks for it."""
    rng = g.rng
    what = rng.choice(["radius", "unit", "centre", "coords", "target", "drone_recall", "drone_status", "zone"])
    d_txt, d = drone_surface(g, "clarify")
    if what in ("radius", "unit", "centre"):
        zone, where = g.name(), coord_surface(g, "clarify")[0]
        r_txt, r, _ = length_surface(g, "clarify")
        text = {
            "radius": f"create a no-fly zone {quoted(rng, zone)} at {where}",
            "unit": f"no-fly zone {quoted(rng, zone)} at {where}, radius {r}",
            "centre": f"set up a {r_txt} no-fly zone called {quoted(rng, zone)}",
        }[what]
        answer = {
            "radius": f"What radius should the no-fly zone {zone} have?",
            "unit": f"A radius of {r} in which unit: metres, kilometres, feet or nautical miles?",
            "centre": f"Where should {zone} be centred? Please give its coordinates.",
        }[what]
    elif what == "coords":
        wp = rng.randint(1, 12)
        text, answer = (
            f"move waypoint {wp} of {d_txt}",
            f"Where should waypoint {wp} of {d} go? Please give coordinates.",
        )
    elif what == "target":
        _, noun, _ = _mission_words(g)
        text, answer = f"send {d_txt} on {_a(noun)} mission", f"What is the target of the {noun} mission for {d}?"
    elif what == "drone_recall":
        text, answer = (
            rng.choice(["recall the drone", "bring it back to base", "RTB now"]),
            "Which drone should I recall?",
        )
    elif what == "drone_status":
        text, answer = rng.choice(["what's the battery?", "status?", "where is it now?"]), "Which drone do you mean?"
    else:
        text, answer = (
            rng.choice(["lift the zone", "remove the no-fly zone", "cancel the restriction"]),
            ("Which no-fly zone should I lift?"),
        )
    return style(rng, [(text, False)]), answer


# -- follow-ups that refer back ----------------------------------------------------------------
_DRONE_BACK = {  # phrase about "it" / "that drone" -> the call on the earlier turn's drone
    "recall_drone": [
        "bring it home",
        "actually, call it back instead",
        "recall that drone",
        "battery is low, bring it home",
        "ok, RTB",
        "abort, send it back to base",
        "recall it",
    ],
    "get_drone_status": [
        "how's it doing now?",
        "check on that drone",
        "and its status?",
        "where is it now?",
        "what's its battery?",
    ],
}


def follow_up(g: Gen) -> tuple[list[dict], list[tuple[str, dict]], Pieces]:
    """An earlier exchange about a drone or a zone, then a turn that refers back to it: (earlier
    messages, the last turn's calls, its text as pieces: what it copies is never restyled)."""
    rng = g.rng
    first, calls = rng.choice([act_mission, act_status, act_waypoint, act_create, act_recall])(g)
    name, args = calls[0]
    history = [{"role": "user", "content": style(rng, first)}, _turn(calls)]
    if rng.random() < 0.7:  # the calls ran: results and a summary
        res, summary = tool_result(rng, name, args)
        history += [
            {"role": "tool", "tool_call_id": "call_0", "content": json.dumps(res, ensure_ascii=False)},
            {"role": "assistant", "content": summary},
        ]
    if name == "create_no_fly_zone":
        z = args["zone_name"]
        text = rng.choice(["lift it again", "remove that zone", "cancel it", "actually, lift it", "lift that one"])
        return history, [("lift_no_fly_zone", {"zone_name": z})], [(text, True)]
    d = args["drone_id"]
    k = rng.random()
    if k < 0.45:
        tool = rng.choice(["recall_drone", "get_drone_status"])
        return history, [(tool, {"drone_id": d})], [(rng.choice(_DRONE_BACK[tool]), True)]
    if k < 0.65:  # the same again, for another drone
        n2 = drone_number(rng, g.split)
        d2 = g.drone_said(rng.choice(drone_forms(n2))[1])
        text = _fill(rng.choice(["same for {d}", "now do {d} too", "and {d} as well"]), d=d2)
        return history, [(name, {**args, "drone_id": f"D-{n2}"})], text
    if k < 0.85:
        mt, noun, verb = _mission_words(g)
        target = g.name(target=True)
        text = _fill(
            rng.choice(
                [
                    f"send it to {verb} {{t}} instead",
                    f"have that drone {verb} {{t}}",
                    f"actually, {_a(noun)} mission at {{t}} for it",
                ]
            ),
            t=target,
        )
        return history, [("assign_mission", {"drone_id": d, "mission_type": mt, "target": target})], text
    wp, (lat, lon) = rng.randint(1, 12), coord_pair(rng)
    text = _fill(
        rng.choice(["move its waypoint {wp} to {lat}, {lon}", "and its wp {wp} to {lat} {lon}"]),
        wp=wp,
        lat=lat,
        lon=lon,
    )
    return (
        history,
        [("update_waypoint", {"drone_id": d, "waypoint_index": wp, "lat": float(lat), "lon": float(lon)})],
        text,
    )


# -- plain text -------------------------------------------------------------------------------
def plain_text(g: Gen) -> dict:
    """Lines of an operations log or a status report, not a chat; ``prompt`` is its first words."""
    rng, lines = g.rng, []
    for _ in range(rng.choice((1, 1, 2, 3))):
        d = f"Drone {drone_number(rng, g.split)}" if rng.random() < 0.5 else f"D-{drone_number(rng, g.split)}"
        lat, lon = coord_pair(rng)
        r_txt = length_surface(g, "plain")[0]
        s, e = time_surface2(g, "plain")[0], time_surface2(g, "plain")[0]
        lines.append(
            rng.choice(
                [
                    f"{d} is {rng.choice(['hovering', 'en route', 'returning to base', 'holding', 'charging'])} "
                    f"at {lat}, {lon}, battery {rng.randint(5, 100)}%.",
                    f"{d} is assigned to {_a(_mission_words(g)[1])} mission at {g.name(target=True)}.",
                    f"No-fly zone {g.name()} is active from {s} to {e}, {r_txt} around {lat}, {lon}.",
                    f"{d} landed at base at {s} with {rng.randint(5, 100)}% battery left.",
                    f"Zone {g.name()} was lifted at {e}.",
                    f"{d} reached waypoint {rng.randint(1, 12)} at {s}.",
                ]
            )
        )
    text = ("\n" if rng.random() < 0.5 else " ").join(lines)
    words = text.split(" ")
    k = rng.randint(1, max(1, min(len(words) - 1, 6)))
    return {"kind": "plain", "text": text, "prompt": " ".join(words[:k]), "tools": None, "messages": []}


# -- greetings and thanks with operations words in them ------------------------------------------
# fmt: off
# A greeting is answered as small talk's "hello" and a thanks as its "thanks", word for word: a
# message both kinds can hold ("hello", "thanks") must have one answer, or a model trained on both
# blends them when it fills a block in parallel ("Hello! Iady create and lift that- zones").
_HELLO = _GREET
_FINE = "Doing well, thanks! Tell me what you need: no-fly zones, waypoints, missions, recalls or drone status."
_THANKS = _WELCOME
# A greeting is an opener, maybe whom it greets, then a remark about the shift and/or a question
# ("morning team, drones look ready today", "hey clover, how are you?"); thanks are a thanks word,
# maybe with a remark on the result ("cheers, the waypoint looks right"). Openers and thanks words
# are shared by the splits (every operator says "hi" and "thanks"); remarks and questions belong to
# one split each, so validation's messages are phrasings training never saw.
OPENERS = ("hi", "hello", "hey", "hiya", "morning", "good morning", "good afternoon", "good evening", "evening",
           "howdy", "hey there", "hello again", "yo", "greetings", "afternoon", "hi hi")
ADDRESSED = ("team", "clover", "all", "there", "everyone", "folks", "ops", "assistant")
SHIFT_REMARKS = ("just came on shift", "I'm taking over the night shift", "quiet shift so far",
                 "drones look ready today", "operator here", "starting the flight ops shift",
                 "new operator on the desk", "back from my break", "coffee's on, let's get going",
                 "long day ahead", "the weather looks good for flying", "the fleet looks good this morning",
                 "ready for today's missions", "hope the drones behaved overnight", "first day on this console",
                 "I'm on the desk until six", "the zones from yesterday are still up", "busy day for recalls",
                 "the radar looks clear", "waypoints all loaded for today")
QUESTIONS = ("how are you?", "how's it going?", "how are you doing?", "all good on your side?", "how's your day?",
             "how have you been?", "you doing ok?", "how are things?", "everything ok?", "how's the shift been?",
             "anything I should know before the shift?", "how are you today?", "all quiet?", "how's everything?",
             "good night so far?", "doing alright?", "how's your morning going?", "are you awake?", "you there?",
             "how was your night?")
THANKS_WORDS = ("thanks", "thank you", "thx", "ty", "cheers", "many thanks", "thanks a lot", "much appreciated",
                "appreciated, thanks", "great, thanks", "perfect, thank you", "nice, thanks", "awesome, thank you",
                "ok thanks", "thank you so much", "brilliant, cheers", "thanks a bunch", "great work, thanks")
RESULT_REMARKS = ("that zone is exactly what I needed", "the waypoint looks right", "mission confirmed on my side",
                  "great work on the recall", "that's all for now", "that's what I wanted",
                  "the status is what I expected", "good job", "that'll do", "looks good on the map",
                  "the drone is heading home", "zone is showing on my screen", "all set here",
                  "that clears it up", "the mission is on my board", "nothing else for now",
                  "that battery level is fine", "the recall went through", "that was quick",
                  "I see it on the map")
# fmt: on


# Composed remarks (training only, ``composed`` of ``greeting``): a statement about the shift or
# the fleet, or about a result, built from parts, so that a model learns the shape (a statement,
# not a request) rather than the fixed remarks above; never one of another split's remarks.
_SHIFT_PARTS = (
    (
        "{I'm|I am} {on|covering|running|watching} {the desk|the console|ops|dispatch|the board|the radio|the map}"
        " {today|tonight|this morning|this afternoon|until noon|for a few hours|this week}"
    ),
    "{just|finally} {got in|logged on|sat down|clocked in|got here|got back}",
    "{first|second|third|last} {day|week|night|shift} {on|at} {the desk|this console|ops|dispatch|the board}",
    (
        "{the|all the|our} {drones|zones|waypoints|missions|batteries|radios|screens|pads|routes|maps}"
        " {look|seem|are} {fine|good|ready|calm|quiet|busy|normal|in order} {today|tonight|so far|this morning|}"
    ),
    "{nothing|not much} {new|happening|to report} {on|at} {my end|the board|the map|the radar} {yet|so far|}",
    (
        "{I'm|I am} {the|a} {relief|backup|day|night|weekend|second} {controller|pilot|dispatcher|supervisor|operator}"
        " {here|on shift|for today|}"
    ),
    "{the|} {handover|briefing|shift change} {went|was} {fine|quick|smooth|long|easy}",
    "{drone {id}|zone {name}|the {name} mission} {was|looked} {fine|quiet|calm} {overnight|last night|earlier|}",
)
_RESULT_PARTS = (
    (
        "{the|that|this} {zone|waypoint|mission|recall|status|reading|altitude|route|update|report|call}"
        " {looks|is|seems} {right|fine|good|correct|perfect|ok|as expected|just right}"
    ),
    (
        "{I|we} {see|have|got} {it|the zone|the update|the new route|the status|the change}"
        " {on the map|on my screen|on the board|now|}"
    ),
    "{that's|that is} {all|everything|enough|it} {for now|for today|from me|}",
    "{the|my|our} {drone|fleet|team|crew} {is on its way|is heading back|is in position|is all set|is where I wanted}",
    "{drone {id}|zone {name}} {looks|is} {fine|good|right|sorted} {now|on my side|}",
)

_CHOICE = re.compile(r"\{([^{}]*)\}")  # {a|b|c}, one with no choice inside it
_REMARK_NAMES = _pool(NATO, "train") + _pool(PLACES, "train")
_HELD_OUT_REMARKS = {
    r.lower() for s in ("validation", "test") for r in _pool(RESULT_REMARKS, s) + _pool(SHIFT_REMARKS, s)
}


def composed_remark(rng: random.Random, result: bool) -> str:
    """A remark built from parts (see above): about a result when ``result``, else about the
    shift. ``{a|b}`` picks one; ``{id}`` and ``{name}`` are a train-split drone id and name."""
    while True:
        text = rng.choice(_RESULT_PARTS if result else _SHIFT_PARTS)
        text = text.replace("{id}", f"D-{drone_number(rng, 'train')}").replace("{name}", rng.choice(_REMARK_NAMES))
        while m := _CHOICE.search(text):  # innermost choice first
            text = text[: m.start()] + rng.choice(m.group(1).split("|")) + text[m.end() :]
        text = " ".join(text.split())
        if text.lower() not in _HELD_OUT_REMARKS:
            return text


def _remark(rng: random.Random, pool: tuple, split: str, composed: float, result: bool) -> str:
    if composed and split == "train" and rng.random() < composed:
        return composed_remark(rng, result)
    return rng.choice(_pool(pool, split))


def _greeting_text(rng: random.Random, split: str, composed: float = 0.0) -> tuple[str, str]:
    """(message, answer): a greeting (``_HELLO``, or ``_FINE`` when it asks how things are) or a
    thanks (``_THANKS``); in train, a share ``composed`` of the remarks is composed."""
    if rng.random() < 0.45:
        text = rng.choice(THANKS_WORDS)
        if rng.random() < 0.6:
            remark = _remark(rng, RESULT_REMARKS, split, composed, True)
            text = f"{text}, {remark}" if rng.random() < 0.7 else f"{remark[0].upper()}{remark[1:]}, {text}"
        return text, _THANKS
    text = rng.choice(OPENERS) + (f" {rng.choice(ADDRESSED)}" if rng.random() < 0.3 else "")
    shape = rng.choice(["remark", "question", "both", "alone"])
    if shape in ("remark", "both"):
        text += rng.choice([", ", "! ", ". ", " - "]) + _remark(rng, SHIFT_REMARKS, split, composed, False)
    if shape in ("question", "both"):
        text += rng.choice([", ", "! ", ". "]) + rng.choice(_pool(QUESTIONS, split))
    text = text[0].upper() + text[1:] if rng.random() < 0.4 else text
    return text, (_FINE if shape in ("question", "both") else _HELLO)


def greeting(rng: random.Random, split: str, no_tools: float = 0.0, composed: float = 0.0) -> dict:
    """A greeting or thanks that names operations without asking for one ("hi there", "morning,
    quiet shift so far, how are you?", "thanks, the waypoint looks right"), answered in words with
    no call; thanks come after a tool exchange half of the time. A share ``no_tools`` of those
    that do not is drawn in a chat that offers no tools (a plain OpenAI chat), answered the same.
    In train, a share ``composed`` of the remarks is composed from parts (``composed_remark``)."""
    text, answer = _greeting_text(rng, split, composed)
    text = text + rng.choice(["", "", "!", "."]) if text[-1].isalnum() else text
    msgs = [{"role": "user", "content": text}, {"role": "assistant", "content": answer}]
    surfaces = []
    if answer == _THANKS and rng.random() < 0.5:
        earlier = example(rng, split, mix={"tool_result": 1.0})
        surfaces = earlier["surfaces"]
        msgs = [
            dict(m, weight=0) if m["role"] == "assistant" else m for m in earlier["messages"] if m["role"] != "system"
        ] + msgs
    plain = no_tools and len(msgs) == 2 and rng.random() < no_tools
    return {
        "kind": "greeting",
        "tools": None if plain else EXTRACTION_TOOLS,
        "messages": msgs,
        "split": split,
        "novel": False,
        "names": [],
        "surfaces": surfaces,
    }


def greeting_set(split: str, n: int = 40) -> list[dict]:
    """A split's fixed greetings and thanks (outside MIX)."""
    rng = random.Random(f"clover-corpus2-greeting-{split}")
    return [greeting(rng, split) for _ in range(n)]


# -- examples -----------------------------------------------------------------------------------
def _turn(calls: list[tuple[str, dict]]) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [_call(i, n, a) for i, (n, a) in enumerate(calls)]}


def tools_for(rng: random.Random, need: set[str]) -> list[dict]:
    """All six tools, or (30 %) a shuffled subset that holds the needed ones."""
    if rng.random() >= 0.3:
        return EXTRACTION_TOOLS
    tools = [t for t in EXTRACTION_TOOLS if t["function"]["name"] in need or rng.random() < 0.5]
    rng.shuffle(tools)
    return tools


def example(rng: random.Random, split: str, mix: dict[str, float] | None = None, pieces: tuple[str, ...] = ()) -> dict:
    """One example drawn with ``rng`` (the module docstring says what it holds)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {SPLITS}")
    mix = mix or MIX
    g = Gen(rng, split, pieces)
    kind = rng.choices(list(mix), weights=list(mix.values()))[0]
    user = lambda text: {"role": "user", "content": text}
    said = lambda text: {"role": "assistant", "content": text}
    if kind == "plain":
        return {**plain_text(g), "split": split, "novel": g.novel, "names": g.names}
    if kind in ("tool_call", "compound"):
        text, calls = actions(g, 1 if kind == "tool_call" else rng.randint(2, 5))
        msgs, tools = [user(text), _turn(calls)], tools_for(rng, {c[0] for c in calls})
    elif kind == "tool_result":
        text, calls = actions(g, rng.choice([1, 1, 2]))
        results = [tool_result(rng, n, a) for n, a in calls]
        msgs = [user(text), _turn(calls)]
        msgs += [
            {"role": "tool", "tool_call_id": f"call_{i}", "content": json.dumps(r, ensure_ascii=False)}
            for i, (r, _) in enumerate(results)
        ]
        msgs.append(said(" ".join(s for _, s in results)))
        tools = tools_for(rng, {c[0] for c in calls})
    elif kind == "follow_up":
        history, calls, text = follow_up(g)
        history = [dict(m, weight=0) if m["role"] == "assistant" else m for m in history]
        msgs, tools = [*history, user(style(rng, text)), _turn(calls)], EXTRACTION_TOOLS
    elif kind == "unserved":
        msgs, tools = [user(unserved_message(g)), said(UNSERVED)], EXTRACTION_TOOLS
    elif kind == "missing_tool":
        pieces_, calls = rng.choice(ACTIONS)(g)
        tools = [t for t in EXTRACTION_TOOLS if t["function"]["name"] != calls[0][0] and rng.random() < 0.6] or None
        msgs = [user(style(rng, pieces_)), said(declined(calls[0][0]))]
    elif kind == "no_tools":
        if rng.random() < 0.5:
            text, answer = no_tool_message(g)
        else:
            pieces_, calls = rng.choice(ACTIONS)(g)
            text, answer = style(rng, pieces_), declined(calls[0][0])
        msgs, tools = [user(text), said(answer)], None
    elif kind == "no_tool":
        text, answer = no_tool_message(g)
        msgs, tools = [user(text), said(answer)], EXTRACTION_TOOLS
    elif kind == "clarify":
        text, answer = clarify_message(g)
        msgs, tools = [user(text), said(answer)], EXTRACTION_TOOLS
    else:
        raise ValueError(f"unknown kind {kind!r}; choose from {sorted(MIX)}")
    first = next(m["content"] for m in msgs if m["role"] == "user")
    system = system_prompt(first, split)
    msgs = ([{"role": "system", "content": system}] if system is not None else []) + msgs
    return {
        "kind": kind,
        "tools": tools,
        "messages": msgs,
        "split": split,
        "novel": g.novel,
        "names": g.names,
        "surfaces": g.surfaces,
    }


# -- values as written ----------------------------------------------------------------------------
def _written_value(surfaces: list[list], key: str, gold, found) -> str | None:
    """The text a value was drawn from, as the chat's source writes it (``found(key, text)``):
    a drone ``D-<n>``, a time ``HH:MM`` or a length ``(number, unit)``; the first one drawn that
    the source holds wins (None if the chat never wrote it)."""
    for text, g in surfaces:
        if key == "drone_id" and (g is not None or drone_key(text) != gold):
            continue
        if key != "drone_id" and (g is None or (tuple(g) if isinstance(g, (list, tuple)) else g) != gold):
            continue
        if (out := found(key, text)) is not None:
            return out
    return None


def written_arguments(name: str, args: dict, surfaces: list[list], found) -> dict:
    """A gold call's arguments with lengths, times and drone ids as the message wrote them
    (``{"radius": 2.5, "radius_unit": "km"}`` → ``{"radius": "2.5 km"}``, ``"18:00"`` → ``"6pm"``,
    ``"D-17"`` → ``"drone 17"``), read back by ``values.as_written``; ``found(key, text)`` gives
    ``text`` as the source of ``key`` writes it, or None. A value the source does not hold as
    drawn stays as it was."""
    out = dict(args)
    for key in ("drone_id", "start_time", "end_time"):
        if key in out and (text := _written_value(surfaces, key, out[key], found)) is not None:
            out[key] = text
    if name in LENGTHS:
        value, unit, _ = LENGTHS[name]
        if value in out and unit in out:
            text = _written_value(surfaces, value, (out[value], out[unit]), found)
            if text is not None:
                out = {k: (text if k == value else v) for k, v in out.items() if k != unit}
    return out


_WRITTEN_KEYS = {"drone_id", "start_time", "end_time", "radius", "altitude"}


def _as_in(text: str, source: str) -> str | None:
    """``text`` as ``source`` writes it: itself, or the same letters in the source's casing (a
    window moved to the front of a message is lowercased with it: "12 AM" → "12 am")."""
    if text in source:
        return text
    at = source.lower().find(text.lower())
    return source[at : at + len(text)] if at >= 0 else None


def written_chat(ex: dict) -> dict:
    """``ex`` with its tools and its gold calls in the values-as-written form
    (``extraction_tools.WRITTEN_TOOLS``): what a model of that form is trained on and scored against.
    ``written_spans`` says whether every value written so is a span of the chat's user turns
    (drone ids: of the conversation before the call); a value whose words a typo changed is not,
    and stays in its earlier form."""
    surfaces = ex.get("surfaces") or []
    msgs, spans = [], True
    for m in ex["messages"]:
        if m.get("tool_calls"):
            user = "\n".join(x["content"] or "" for x in msgs if x["role"] == "user")
            said = "\n".join(str(x.get("content") or "") for x in msgs)
            calls = []
            for c in m["tool_calls"]:
                fn = c["function"]
                args = json.loads(fn["arguments"]) if isinstance(fn["arguments"], str) else fn["arguments"]
                found = lambda k, text: _as_in(text, said if k == "drone_id" else user)
                new = written_arguments(fn["name"], args, surfaces, found)
                if any(not isinstance(new[k], str) or found(k, new[k]) is None for k in _WRITTEN_KEYS & new.keys()):
                    new, spans = args, False
                new = json.dumps(new, ensure_ascii=False) if isinstance(fn["arguments"], str) else new
                calls.append({**c, "function": {**fn, "arguments": new}})
            m = {**m, "tool_calls": calls}
        msgs.append(m)
    return {**ex, "messages": msgs, "tools": written_form(ex.get("tools")), "written_spans": spans}


# the earlier exchanges of a ``multi_turn`` conversation (a request with its calls, results and
# summary; calls left without results; small talk) and the kinds of its last turn
_HISTORY_MIX = {"tool_result": 0.5, "tool_call": 0.2, "no_tool": 0.3}
_FINAL_KINDS = ("tool_call", "compound", "no_tool", "unserved", "missing_tool", "clarify", "no_tools")
_FINAL_MIX = {k: MIX[k] for k in _FINAL_KINDS} | {"no_tool": 0.2}  # small talk ("thanks") a fifth


def multi_turn(rng: random.Random, split: str, pieces: tuple[str, ...] = ()) -> dict:
    """A conversation of 2-4 user turns whose last turn stands on its own: 1-3 earlier exchanges,
    then an ``example`` of :data:`_FINAL_MIX` (a new request, small talk such as thanks, a request
    no tool serves, ...), as an agent loop or a chat client sends it. The earlier assistant turns
    carry ``weight: 0``; an earlier exchange that would call a tool the last turn does not offer
    is small talk instead. ``kind`` is "multi_turn", ``final_kind`` the last turn's kind."""
    final = example(rng, split, mix=_FINAL_MIX, pieces=pieces)
    offered = {t["function"]["name"] for t in final["tools"] or []}
    history: list[dict] = []
    surfaces = list(final.get("surfaces", []))
    for _ in range(rng.choice((1, 1, 2, 3))):
        h = example(rng, split, mix=_HISTORY_MIX if offered else {"no_tools": 1.0}, pieces=pieces)
        if any(c["function"]["name"] not in offered for m in h["messages"] for c in m.get("tool_calls") or []):
            h = example(rng, split, mix={"no_tool": 1.0}, pieces=pieces)  # small talk instead
        surfaces += h.get("surfaces", [])
        history += [
            dict(m, weight=0) if m["role"] == "assistant" else m for m in h["messages"] if m["role"] != "system"
        ]
    msgs = final["messages"]
    head = msgs[:1] if msgs[0]["role"] == "system" else []
    messages = head + history + msgs[len(head) :]
    return dict(final, kind="multi_turn", final_kind=final["kind"], messages=messages, surfaces=surfaces)


def multiturn_set(split: str, n: int = 100) -> list[dict]:
    """A split's fixed ``multi_turn`` conversations (outside MIX: ``load_split`` stays as it was)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {SPLITS}")
    rng = random.Random(f"clover-corpus2-multiturn-{split}")
    return [multi_turn(rng, split) for _ in range(n)]


def stream(split: str, seed: int = 0, mix: dict[str, float] | None = None) -> Iterator[dict]:
    """An endless, seeded stream of examples of one split."""
    rng = random.Random(f"clover-corpus2-{split}-{seed}")
    while True:
        yield example(rng, split, mix)


def generate(split: str, n: int, seed: int = 0, mix: dict[str, float] | None = None) -> list[dict]:
    """``n`` examples of ``split``; the same arguments always give the same list."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {SPLITS}")
    it = stream(split, seed, mix)
    return [next(it) for _ in range(n)]


def load_split(split: str, n: int = 500) -> list[dict]:
    """The fixed evaluation set of a split (no training seed reaches it)."""
    return generate(split, n, seed=1_000_003 + _SPLIT_SEED[split])


__all__ = [
    "MIX",
    "SMALLTALK",
    "SPLITS",
    "TEXT_KINDS",
    "UNSERVED",
    "example",
    "generate",
    "load_split",
    "multi_turn",
    "multiturn_set",
    "stream",
]
