"""Seeded generator of airspace-operations chats (no downloads).

An operator writes a free-form message; the assistant answers with tool calls (1 to 5 parallel
calls, in the order mentioned), a short text when no tool fits or an argument is missing, or a
one-sentence summary of a tool result. Gold arguments follow the conventions of
``clover.data.tools`` (``D-<n>`` ids, whole metres rounded half up, ``HH:MM``, signed degrees
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

import functools
import json
import random
import string
import zlib
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal

from clover.data.tools import AIRSPACE_TOOLS, MISSION_TYPES

SPLITS = ("train", "validation", "test")
KINDS = ("tool_call", "compound", "tool_result", "no_tool", "missing_tool", "clarify")
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


# -- entity pools: a word belongs to exactly one split ------------------------------------------
def _split_of(i: int) -> str:
    return "test" if i % 10 in (3, 8) else "validation" if i % 10 == 6 else "train"


@functools.cache  # pools are pure functions of constant tuples: computed once
def _pool(items: tuple, split: str) -> tuple:
    return tuple(x for i, x in enumerate(items) if _split_of(i) == split)


# fmt: off
PLACES = ("Harbor", "Stadium", "Airfield", "Bridge", "Park", "Depot", "Ridge", "Valley", "Market", "Quarry", "Pier",
          "Campus", "Forest", "Canal", "Beacon", "Station", "Lake", "Dam", "Mill", "Garden", "Plaza", "Summit",
          "Marsh", "Meadow", "Refinery", "Terminal", "Arena", "Castle", "Citadel", "Orchard", "Crossing",
          "Junction", "Landing", "Basin", "Cliffs", "Dunes", "Embassy", "Palace", "Reservoir", "Seaport",
          "Lighthouse", "Vineyard", "Foundry", "Barracks", "Causeway", "Estuary", "Glacier", "Heliport", "Island",
          "Monastery")
NATO = ("Alpha", "Bravo", "Charlie", "Delta", "Echo", "Foxtrot", "Golf", "Hotel", "India", "Juliet", "Kilo", "Lima",
        "Mike", "November", "Oscar", "Papa", "Quebec", "Romeo", "Sierra", "Tango", "Uniform", "Victor", "Whiskey",
        "Xray", "Yankee", "Zulu")
CITIES = ("Zurich", "Geneva", "Lyon", "Oslo", "Porto", "Kyoto", "Denver", "Austin", "Perth", "Cork", "Bergen", "Malmö",
          "Zürich", "Kraków", "Turin", "Leeds", "Dakar", "Quito", "Hobart", "Tromsø", "Nantes", "Basel", "Graz",
          "Zadar", "Ghent", "Bilbao", "Sevilla", "Genève", "Aarhus", "Tartu")
OBJECTS = ("pipeline", "warehouse", "substation", "wind farm", "rail yard", "solar field", "water tank", "cell mast",
           "hospital", "school", "clinic", "farmhouse", "oil rig", "power plant", "container port", "fuel depot",
           "ferry dock", "dam wall", "border post", "ski lift", "gas well", "sewage plant", "ranger hut", "antenna",
           "silo", "dockyard", "greenhouse", "scrapyard", "airstrip", "fish farm")
PREFIXES = ("North", "South", "East", "West", "Upper", "Lower", "Old", "New", "Central", "Outer")  # shared
# fmt: on


def heldout_words(split: str) -> list[str]:
    """The entity words only ``split`` uses (each zone name / target holds at least one)."""
    return [*_pool(PLACES, split), *_pool(NATO, split), *_pool(CITIES, split), *_pool(OBJECTS, split)]


def zone_name(rng: random.Random, split: str) -> str:
    place, nato, city = (rng.choice(_pool(x, split)) for x in (PLACES, NATO, CITIES))
    name = rng.choice(
        [
            f"{rng.choice(PREFIXES)} {place}",
            f"Zone {nato}",
            nato,
            f"{nato}-{rng.randint(1, 9)}",
            f"{nato} {rng.randint(1, 99)}",
            f"{city} {place}",
            f"{city} {nato}",
            f"{place} {nato}",
        ]
    )
    return name.lower() if rng.random() < 0.08 else name  # copied as written, lowercase included


def target_name(rng: random.Random, split: str) -> str:
    obj, place, city = (rng.choice(_pool(x, split)) for x in (OBJECTS, PLACES, CITIES))
    return rng.choice(
        [
            f"{obj} {rng.randint(1, 99)}",
            f"{place} {obj}",
            f"{city} {obj}",
            f"{obj} {rng.choice('ABCDEFGH')}{rng.randint(1, 9)}",
            f"{rng.choice(PREFIXES)} {obj}",
        ]
    )


def drone_number(rng: random.Random, split: str) -> int:
    """Train drones are 1-799, validation 800-899, test 900-999 (disjoint ranges)."""
    if split == "test":
        return rng.randint(900, 999)
    if split == "validation":
        return rng.randint(800, 899)
    return rng.choice([rng.randint(1, 30), rng.randint(1, 99), rng.randint(100, 799)])


# -- phrasing hold-out --------------------------------------------------------------------------
def heldout_combo(template: str, form: str, forms: list[tuple]) -> bool:
    """Whether the (template id, form id) pair is test/validation-only: a fixed hash picks ~15 %
    of the pairs, never the first (canonical) form of a list, so train always keeps one."""
    return form != forms[0][0] and zlib.crc32(f"{template}|{form}".encode()) % 100 < 15


class Ctx:
    """What one example's generation shares: the rng, the split, and whether a held-out phrasing
    was used (``novel``)."""

    def __init__(self, rng: random.Random, split: str):
        self.rng, self.split, self.novel = rng, split, False

    def template(self, action: str, templates: list[str]) -> tuple[str, str]:
        """(template id, template); the last template of each list is never used in train."""
        i = self.rng.randrange(len(templates) - (self.split == "train"))
        self.novel |= i == len(templates) - 1
        return f"{action}{i}", templates[i]

    def form(self, tid: str, forms: list[tuple]) -> tuple:
        """One of ``forms`` (tuples whose first item is the form id), avoiding held-out pairs in train."""
        ok = [f for f in forms if not (self.split == "train" and heldout_combo(tid, f[0], forms))]
        f = self.rng.choice(ok)
        self.novel |= heldout_combo(tid, f[0], forms)
        return f


# -- surface forms: (form id, text, gold) -------------------------------------------------------
def _half_up(x: Decimal) -> int:
    return int(x.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def to_metres(value: str, unit: str) -> int:
    """'2.5', 'km' -> 2500. Units: m, km, nm (1852 m), ft (0.3048 m); rounded half up."""
    factor = {"m": Decimal(1), "km": Decimal(1000), "nm": Decimal(1852), "ft": Decimal("0.3048")}[unit]
    return _half_up(Decimal(value.replace(",", "")) * factor)


def _dec(rng: random.Random, lo: float, hi: float, places: int) -> str:
    """A decimal string in [lo, hi] with up to ``places`` decimals and no trailing zeros."""
    return format(Decimal(str(round(rng.uniform(lo, hi), places))).normalize(), "f")


def radius_forms(rng: random.Random) -> list[tuple[str, str, int]]:
    unit = rng.choice(["km", "m", "nm", "ft"])
    if unit == "km":
        v = rng.choice([str(rng.randint(1, 15)), _dec(rng, 0.2, 20, 1), _dec(rng, 0.5, 5, 2)])
        one = v == "1"
        forms = [
            ("km", f"{v} km"),
            ("km_tight", f"{v}km"),
            ("km_word", f"{v} kilometre{'' if one else 's'}"),
            ("km_us", f"{v} kilometer{'' if one else 's'}"),
            ("KM", f"{v} KM"),
        ]
    elif unit == "m":
        v = str(rng.choice([rng.randint(50, 5000), rng.randint(1, 50) * 100, rng.randint(2, 30) * 50]))
        forms = [("m", f"{v} m"), ("m_tight", f"{v}m"), ("m_word", f"{v} metres"), ("m_us", f"{v} meters")]
        if int(v) >= 1000:
            forms.append(("m_comma", f"{int(v):,} m"))
    elif unit == "nm":
        v = rng.choice([str(rng.randint(1, 10)), _dec(rng, 0.5, 9.5, 1)])
        forms = [
            ("nm", f"{v} nm"),
            ("nm_tight", f"{v}nm"),
            ("NM", f"{v} NM"),
            ("nmi", f"{v} nmi"),
            ("nm_word", f"{v} nautical mile{'' if v == '1' else 's'}"),
        ]
    else:
        v = str(rng.choice([rng.randint(1, 100) * 100, rng.randint(300, 12000), rng.randint(2, 40) * 250]))
        forms = [("ft", f"{v} ft"), ("ft_tight", f"{v}ft"), ("ft_word", f"{v} feet")]
        if int(v) >= 1000:
            forms.append(("ft_comma", f"{int(v):,} ft"))
    return [(fid, text, to_metres(v, unit)) for fid, text in forms]


_NUM_WORDS = ["twelve", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven"]


def time_forms(h: int, m: int) -> list[tuple[str, str, str]]:
    """All the ways to write h:m that the corpus uses, each with the gold ``HH:MM``."""
    gold = f"{h:02d}:{m:02d}"
    h12, ap = h % 12 or 12, "am" if h < 12 else "pm"
    part = "morning" if h < 12 else "afternoon" if h < 18 else "evening"
    forms = [("hh:mm", gold), ("hhmm", f"{h:02d}{m:02d}"), ("hrs", f"{h:02d}{m:02d} hrs")]
    if h < 10:
        forms.append(("h:mm", f"{h}:{m:02d}"))
    if m == 0:
        forms += [("ampm", f"{h12}{ap}"), ("ampm_sp", f"{h12} {ap}"), ("AMPM", f"{h12} {ap.upper()}")]
        if h not in (0, 12):
            forms.append(("oclock", f"{_NUM_WORDS[h12 % 12]} o'clock in the {part}"))
    else:
        forms += [("ampm_colon", f"{h12}:{m:02d}{ap}"), ("ampm_colon_sp", f"{h12}:{m:02d} {ap}")]
    if m == 30 and h not in (0, 12):
        forms.append(("half_past", f"half past {_NUM_WORDS[h12 % 12]} in the {part}"))
    if m == 15:
        forms.append(("quarter_past", f"quarter past {h12} {ap}"))
    if m == 45:
        nh = (h + 1) % 24
        forms.append(("quarter_to", f"quarter to {nh % 12 or 12} {'am' if nh < 12 else 'pm'}"))
    if (h, m) == (12, 0):
        forms += [("noon", "noon"), ("midday", "midday")]
    if (h, m) == (0, 0):
        forms.append(("midnight", "midnight"))
    return [(fid, text, gold) for fid, text in forms]


def random_time(rng: random.Random) -> tuple[int, int]:
    h = rng.choice([rng.randint(0, 23), rng.randint(6, 22), 12, 0]) if rng.random() < 0.95 else 0
    return h, rng.choice([0, 0, 0, 30, 30, 15, 45, rng.randrange(0, 60, 5), rng.randint(0, 59)])


def coord_pair(rng: random.Random) -> tuple[str, str]:
    """Signed decimal strings with 1-4 decimals and a non-zero last digit, so the JSON number
    (Python repr) has exactly the digits the operator wrote."""

    def one(lim: int) -> str:
        d = rng.randint(1, 4)
        frac = "".join(str(rng.randint(0, 9)) for _ in range(d - 1)) + str(rng.randint(1, 9))
        return f"{'-' if rng.random() < 0.4 else ''}{rng.randint(0, lim - 1)}.{frac}"

    return one(90), one(180)


def coord_forms(lat: str, lon: str) -> list[tuple[str, str]]:
    a, o = lat.lstrip("-"), lon.lstrip("-")
    ns, ew = "S" if lat.startswith("-") else "N", "W" if lon.startswith("-") else "E"
    return [
        ("hemi", f"{a} {ns} {o} {ew}"),
        ("hemi_tight", f"{a}{ns} {o}{ew}"),
        ("hemi_comma", f"{a} {ns}, {o} {ew}"),
        ("deg", f"{a}°{ns}, {o}°{ew}"),
        ("hemi_first", f"{ns}{a} {ew}{o}"),
        ("lat_lon", f"lat {lat} lon {lon}"),
        ("lat_eq", f"lat={lat}, lon={lon}"),
        ("paren", f"({lat}, {lon})"),
        ("pair", f"{lat}, {lon}"),
        ("latitude", f"latitude {lat} longitude {lon}"),
        ("slash", f"{lat}/{lon}"),
    ]


def drone_forms(n: int) -> list[tuple[str, str]]:
    return [
        ("drone", f"drone {n}"),
        ("Drone", f"Drone {n}"),
        ("dn", f"d{n}"),
        ("Dn", f"D{n}"),
        ("D-n", f"D-{n}"),
        ("d-n", f"d-{n}"),
        ("UAV", f"UAV {n}"),
        ("uav-", f"uav-{n}"),
        ("UAV-", f"UAV-{n}"),
        ("unit", f"unit {n}"),
        ("Unit", f"Unit {n}"),
        ("hash", f"drone #{n}"),
        ("drone_D", f"drone D-{n}"),
    ]


def radius_surface(ctx: Ctx, tid: str) -> tuple[str, int]:
    _, text, gold = ctx.form(tid, radius_forms(ctx.rng))
    return text, gold


def time_surface(ctx: Ctx, tid: str) -> tuple[str, str]:
    _, text, gold = ctx.form(tid, time_forms(*random_time(ctx.rng)))
    return text, gold


def coord_surface(ctx: Ctx, tid: str) -> tuple[str, float, float]:
    lat, lon = coord_pair(ctx.rng)
    return ctx.form(tid, coord_forms(lat, lon))[1], float(lat), float(lon)


def drone_surface(ctx: Ctx, tid: str) -> tuple[str, str]:
    n = drone_number(ctx.rng, ctx.split)
    return ctx.form(tid, drone_forms(n))[1], f"D-{n}"


# -- templates (the last of each list is held out of train) -------------------------------------
# fmt: off
CREATE_T = ["create a no-fly zone {zone} at {where} with radius {r}{when}", "set up NFZ {zone}, {r} around {where}{when}",
            "no-fly zone called {zone} centred on {where}, radius {r}{when}", "new nfz {zone} @ {where} r={r}{when}",
            "please block the airspace at {where}: {r} radius, name it {zone}{when}",
            "establish a {r} no fly zone named {zone} at {where}{when}", "NFZ {zone}: center {where}, radius {r}{when}",
            "restrict flights within {r} of {where}, call it {zone}{when}",
            "we need a no-fly area {zone} of {r} around {where}{when}",
            "declare {zone} a no-fly zone, {r} radius around {where}{when}",
            "put up a flight restriction {zone} at {where}, {r}{when}",
            "close the airspace around {where} ({r}) as {zone}{when}"]
LIFT_T = ["lift the no-fly zone {zone}", "remove NFZ {zone}", "{zone} can be reopened, lift it",
          "cancel the restriction on {zone}", "drop no fly zone {zone}", "delete the nfz called {zone}", "lift {zone}",
          "{zone} is no longer needed, remove the no-fly zone", "end the no-fly zone {zone} now",
          "reopen the airspace of {zone}", "lift NFZ {zone} please", "deactivate the no-fly zone {zone}"]
WAYPOINT_T = ["move waypoint {wp} of {d} to {c}{alt}", "{d}: update wp {wp} to {c}{alt}",
              "change {d}'s waypoint {wp} to {c}{alt}", "set waypoint #{wp} for {d} at {c}{alt}",
              "reroute {d}, waypoint {wp} now {c}{alt}", "{d} wp{wp} -> {c}{alt}", "update {d} waypoint {wp}: {c}{alt}",
              "shift wp {wp} on the route of {d} to {c}{alt}", "for {d}, waypoint number {wp} goes to {c}{alt}",
              "{d} new WP{wp} {c}{alt}", "put waypoint {wp} of {d} at {c}{alt}",
              "relocate waypoint {wp} for {d} to {c}{alt}"]
MISSION_T = ["assign {d} {a_noun} mission at {t}", "send {d} to {verb} {t}", "{d}: {noun} mission, target {t}",
             "task {d} with {noun} at {t}", "{d} -> {noun} @ {t}", "have {d} {verb} {t}", "I need {d} to {verb} {t}",
             "mission for {d}: {noun}, target: {t}", "dispatch {d} for {noun} at {t}", "can {d} {verb} {t}?",
             "new {noun} mission for {d} at {t}", "get {d} to {verb} {t}"]
RECALL_T = ["recall {d}", "bring {d} back to base", "{d} return to base", "RTB {d}", "call back {d} now",
            "abort and recall {d}", "{d}, come home", "order {d} back to base", "get {d} back here",
            "{d} rtb immediately", "recall {d} right away", "send {d} home"]
STATUS_T = ["what's the status of {d}?", "status {d}", "check on {d}", "how is {d} doing?",
            "give me a status report for {d}", "where is {d} right now?", "{d} status?", "battery level of {d}?",
            "report on {d}", "sitrep {d}", "is {d} ok?", "any news from {d}?"]
MANY_T = {"recall_drone": ["recall {ds}", "bring {ds} back to base", "RTB {ds}", "{ds}: return to base",
                           "call back {ds}", "send {ds} home"],
          "get_drone_status": ["status of {ds}?", "check on {ds}", "how are {ds} doing?", "report on {ds}",
                               "status {ds}", "battery levels of {ds}?"]}
_WHEN = {"both": [" from {s} to {e}", " between {s} and {e}", ", active {s}-{e}", ", valid {s} until {e}"],
         "start": [" starting {s}", " from {s}", " effective {s}", " as of {s}"],
         "end": [" until {e}", " till {e}", " ending {e}", ", expires {e}"]}
_ALT = [("alt_at", " at {a} m", "m"), ("alt_comma", ", altitude {a}m", "m"), ("alt_word", " at {a} metres", "m"),
        ("alt_short", " alt {a}m", "m"), ("alt_ft", " at {a} ft", "ft"), ("alt_feet", ", altitude {a} feet", "ft")]
_MISSION_WORDS = {  # mission type -> (nouns for "a {noun} mission", verbs for "to {verb} {target}")
    "survey": (["survey", "aerial survey"], ["survey", "do a survey of"]),
    "mapping": (["mapping", "map"], ["map", "do a mapping run over"]),
    "delivery": (["delivery", "parcel delivery"], ["deliver a package to", "drop a parcel at"]),
    "medical_delivery": (["medical delivery", "medical supply"], ["deliver medical supplies to", "fly medicine to"]),
    "inspection": (["inspection", "inspection flight"], ["inspect", "do an inspection of"]),
    "search_and_rescue": (["search and rescue", "SAR"], ["search for survivors at", "look for missing people at"])}
# fmt: on


# -- filling templates: literal text may change case, slots (entities) never do -----------------
Pieces = list[tuple[str, bool]]  # (text, is_literal)


def _fill(template: str, **slots) -> Pieces:
    out: Pieces = []
    for lit, field, _, _ in string.Formatter().parse(template):
        if lit:
            out.append((lit, True))
        if field is not None:
            out.append((str(slots[field]), False))
    return out


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _text(pieces: Pieces) -> str:
    return "".join(t for t, _ in pieces)


def _style(rng: random.Random, pieces: Pieces, decorate: bool = True) -> str:
    """Casing and decoration of one whole message: capitalised, UPPER literals, or as is; with
    ``decorate`` an optional prefix ("ops: ") and suffix ("!", " pls")."""
    pre = (
        rng.choice(["", "", "", "", "", "please ", "ops: ", "hey, ", "urgent: ", "Clover, ", "ok "]) if decorate else ""
    )
    suf = rng.choice(["", "", "", "", "", ".", "!", " please", ", thanks", " asap", " pls", " thx"]) if decorate else ""
    pieces = ([(pre, True)] if pre else []) + pieces + ([(suf, True)] if suf else [])
    k = rng.random()
    if k < 0.06:
        pieces = [(t.upper() if lit else t, lit) for t, lit in pieces]
    elif k < 0.5 and pieces[0][1]:
        pieces[0] = (pieces[0][0][:1].upper() + pieces[0][0][1:], True)
    return _text(pieces)


# -- actions: ctx -> (pieces, [(tool name, arguments)]) ------------------------------------------
Action = tuple[Pieces, list[tuple[str, dict]]]


def act_create(ctx: Ctx) -> Action:
    rng = ctx.rng
    tid, t = ctx.template("create", CREATE_T)
    zone = zone_name(rng, ctx.split)
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
    zone = zone_name(ctx.rng, ctx.split)
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
    target = target_name(rng, ctx.split)
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
        return {"drone_id": d, "status": "returning", "eta_min": eta}, f"{d} is returning to base, ETA {eta} min."
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
_GREET = "Hello! I can create and lift no-fly zones, update waypoints, assign missions, recall drones and check their status."
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
    zone = zone_name(rng, ctx.split)
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


def _chat(kind: str, tools: list[dict] | None, *messages: dict) -> dict:
    return {"kind": kind, "tools": tools, "messages": list(messages)}


def example(
    rng: random.Random, split: str, max_actions: int = 5, stage: int | None = None, mix: dict[str, float] | None = None
) -> dict:
    """One chat example drawn with ``rng`` (format in the module docstring).

    ``max_actions`` caps the calls per message (1: no compound messages). ``stage`` picks a
    curriculum preset from :data:`STAGES` (1: single calls only; 2: every kind, ≤ 2 calls;
    3: everything, ≤ 5 calls) and overrides ``max_actions``; ``mix`` overrides the kind weights.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {SPLITS}")
    if stage is not None:
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; choose from {sorted(STAGES)}")
        stage_mix, max_actions = STAGES[stage]
        mix = mix or stage_mix
    if max_actions < 1:
        raise ValueError(f"max_actions must be >= 1, got {max_actions}")
    mix = mix or MIX
    ctx = Ctx(rng, split)
    kind = rng.choices(list(mix), weights=list(mix.values()))[0]
    user = lambda text: {"role": "user", "content": text}  # noqa: E731
    said = lambda text: {"role": "assistant", "content": text}  # noqa: E731
    if kind in ("tool_call", "compound"):
        text, calls = _actions(ctx, max_actions if kind == "compound" else 1)
        ex = _chat(
            "tool_call" if len(calls) == 1 else "compound",
            _tools_for(rng, {c[0] for c in calls}),
            user(text),
            _calls_turn(calls),
        )
    elif kind == "tool_result":
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
        ex = _chat(
            "tool_result",
            _tools_for(rng, {c[0] for c in calls}),
            user(text),
            _calls_turn(calls),
            *tools_msgs,
            said(" ".join(s for _, s in results)),
        )
    elif kind == "missing_tool":
        pieces, calls = rng.choice(ACTIONS)(ctx)
        name = calls[0][0]
        tools = [t for t in AIRSPACE_TOOLS if t["function"]["name"] != name and rng.random() < 0.6]
        rng.shuffle(tools)
        answer = f"Sorry, I can't {_CAPABILITY[name]}: no tool for that is available."
        ex = _chat("missing_tool", tools or None, user(_style(rng, pieces)), said(answer))
    elif kind == "no_tool":
        text, answer = no_tool_message(ctx)
        ex = _chat("no_tool", AIRSPACE_TOOLS, user(text), said(answer))
    elif kind == "clarify":
        text, answer = clarify_message(ctx)
        ex = _chat("clarify", AIRSPACE_TOOLS, user(text), said(answer))
    else:
        raise ValueError(f"unknown kind {kind!r}; choose from {KINDS}")
    ex["split"], ex["novel"] = split, ctx.novel
    return ex


def stream(split: str, seed: int = 0, max_actions: int = 5, stage: int | None = None) -> Iterator[dict]:
    """An endless, seeded stream of examples of one split."""
    rng = random.Random(f"clover-corpus-{split}-{seed}")
    while True:
        yield example(rng, split, max_actions, stage)


def generate(split: str, n: int, seed: int = 0, max_actions: int = 5, stage: int | None = None) -> list[dict]:
    """``n`` examples of ``split``; the same arguments always give the same list."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {SPLITS}")
    it = stream(split, seed, max_actions, stage)
    return [next(it) for _ in range(n)]


def load_split(split: str, n: int = 500) -> list[dict]:
    """The fixed evaluation set of a split (deterministic; no training seed reaches it)."""
    return generate(split, n, seed=1_000_003 + _SPLIT_SEED[split])


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


def gold_calls(ex: dict, turn: int = 0) -> list[dict]:
    """Assistant turn ``turn``'s calls as ``[{"name", "arguments": dict}]`` ([] for a text turn)."""
    turns = [m for m in ex["messages"] if m["role"] == "assistant"]
    return [plain_call(c) for c in turns[turn].get("tool_calls") or []] if turn < len(turns) else []


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
    key = lambda c: repr((c["name"], _norm(c["arguments"])))  # noqa: E731
    return sorted(key(plain_call(c)) for c in pred_calls) == sorted(key(plain_call(c)) for c in gold_calls)
