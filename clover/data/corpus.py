"""Seeded generator of airspace-operations chats (no downloads).

An operator writes free-form messages; the assistant answers with tool calls (1 to 5 parallel
calls, in the order mentioned), a short text when no tool fits, or a summary of a tool result.
Splits hold out entity values (zone names, targets, drone numbers) *and* phrasing templates,
so the test split measures generalisation rather than memory.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

from clover.data.tools import AIRSPACE_TOOLS, MISSION_TYPES

SPLITS = ("train", "validation", "test")
_SPLIT_SEED = {"train": 0, "validation": 1, "test": 2}

# -- entities: each pool is split by index so values never cross splits ---------------------
_PLACES = [
    "Harbor",
    "Stadium",
    "Airfield",
    "Bridge",
    "Park",
    "Depot",
    "Ridge",
    "Valley",
    "Market",
    "Quarry",
    "Pier",
    "Campus",
    "Forest",
    "Canal",
    "Tower",
    "Station",
    "Lake",
    "Dam",
    "Mill",
    "Beacon",
    "Garden",
    "Plaza",
    "Summit",
    "Marsh",
    "Delta",
    "Meadow",
    "Harbour",
    "Factory",
    "Refinery",
    "Terminal",
    "Arena",
    "Castle",
    "Citadel",
    "Orchard",
    "Crossing",
    "Junction",
    "Landing",
    "Basin",
    "Cliffs",
    "Dunes",
]
_PREFIX = ["North", "South", "East", "West", "Upper", "Lower", "Old", "New", "Central", "Outer"]
_GREEK = [
    "Alpha",
    "Bravo",
    "Charlie",
    "Delta",
    "Echo",
    "Foxtrot",
    "Golf",
    "Hotel",
    "India",
    "Juliet",
    "Kilo",
    "Lima",
    "Mike",
    "November",
    "Oscar",
    "Papa",
    "Quebec",
    "Romeo",
    "Sierra",
    "Tango",
    "Uniform",
    "Victor",
    "Whiskey",
    "Xray",
    "Yankee",
    "Zulu",
]
_OBJECTS = [
    "pipeline",
    "warehouse",
    "power line",
    "wind farm",
    "rail yard",
    "solar field",
    "bridge deck",
    "water tower",
    "cell tower",
    "hospital",
    "school",
    "clinic",
    "farm",
    "oil rig",
    "quarry",
    "port",
]


def _split_pool(items: list[str], split: str) -> list[str]:
    # every 5th item is test-only, every 7th (not 5th) validation-only
    out = []
    for i, x in enumerate(items):
        s = "test" if i % 5 == 4 else "validation" if i % 7 == 6 else "train"
        if s == split:
            out.append(x)
    return out


def zone_names(split: str) -> list[str]:
    places = _split_pool(_PLACES, split)
    greek = _split_pool(_GREEK, split)
    return (
        [f"{p} {q}" for p in _PREFIX for q in places]
        + [f"Zone {g}" for g in greek]
        + greek
        + [f"{g} {n}" for g in greek for n in ("1", "2", "3", "7")]
    )


def targets(split: str) -> list[str]:
    objs, places = _split_pool(_OBJECTS, split), _split_pool(_PLACES, split)
    return [f"{o} {n}" for o in objs for n in range(1, 30)] + [f"{p} {o}" for p in places for o in objs]


def drone_number(rng: random.Random, split: str) -> int:
    """Test drones are 900-999 (a held-out digit pattern), validation 800-899, train the rest."""
    if split == "test":
        return rng.randint(900, 999)
    if split == "validation":
        return rng.randint(800, 899)
    return rng.choice([rng.randint(1, 99), rng.randint(100, 799), rng.randint(1, 20)])


# -- surface forms ------------------------------------------------------------------------------
def drone_surface(rng: random.Random, n: int) -> str:
    return rng.choice(
        [f"drone {n}", f"d{n}", f"D-{n}", f"UAV {n}", f"uav-{n}", f"unit {n}", f"Drone #{n}", f"drone D-{n}", f"D{n}"]
    )


def coord_pair(rng: random.Random) -> tuple[float, float]:
    lat = round(rng.uniform(-70, 70), rng.choice([2, 3, 4]))
    lon = round(rng.uniform(-179, 179), rng.choice([2, 3, 4]))
    return lat, lon


def _num(x: float) -> str:
    return repr(abs(x)) if abs(x) >= 1e-4 else "0.0"


def coord_surface(rng: random.Random, lat: float, lon: float) -> str:
    ns, ew = ("N" if lat >= 0 else "S"), ("E" if lon >= 0 else "W")
    a, o = _num(lat), _num(lon)
    sa, so = repr(lat), repr(lon)
    return rng.choice(
        [
            f"{a} {ns} {o} {ew}",
            f"{a}{ns} {o}{ew}",
            f"lat {sa} lon {so}",
            f"({sa}, {so})",
            f"{a} {ns}, {o} {ew}",
            f"{sa}, {so}",
            f"coordinates {sa} {so}",
            f"position {a}{ns}/{o}{ew}",
        ]
    )


def radius(rng: random.Random, split: str) -> tuple[str, int]:
    unit = rng.choice(["km", "m", "nm", "ft", "metres", "meters", "kilometres", "nautical miles", "feet"])
    if unit in ("km", "kilometres"):
        v = rng.choice([round(rng.uniform(0.2, 20), 1), rng.randint(1, 15)])
        return f"{v} {unit}" if rng.random() < 0.6 or unit != "km" else f"{v}km", round(v * 1000)
    if unit in ("m", "metres", "meters"):
        v = rng.choice([rng.randint(50, 5000), rng.randint(1, 50) * 100])
        return (f"{v}m" if unit == "m" and rng.random() < 0.5 else f"{v} {unit}"), v
    if unit in ("nm", "nautical miles"):
        v = rng.choice([rng.randint(1, 10), round(rng.uniform(0.5, 8), 1)])
        return f"{v} {unit}", round(v * 1852)
    v = rng.choice([rng.randint(1, 60) * 100, rng.randint(300, 9000)])
    return f"{v} {unit}", round(v * 0.3048)


_WORDS = ["twelve", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven"]


def time_surface(rng: random.Random, split: str) -> tuple[str, str]:
    h, m = rng.randint(0, 23), rng.choice([0, 0, 15, 30, 45, rng.randint(0, 59)])
    gold = f"{h:02d}:{m:02d}"
    h12, ampm = (h % 12 or 12), ("am" if h < 12 else "pm")
    forms = [gold, f"{h:02d}{m:02d}", f"{h}:{m:02d}"]
    if m == 0:
        forms += [f"{h12}{ampm}", f"{h12} {ampm}", f"{h12} o'clock in the {'morning' if h < 12 else 'evening'}"]
        if h == 12:
            forms.append("noon")
    else:
        forms += [f"{h12}:{m:02d} {ampm}", f"{h12}:{m:02d}{ampm}"]
    if m == 30:
        forms.append(
            f"half past {_WORDS[h12 % 12]} in the {'morning' if h < 12 else 'afternoon' if h < 18 else 'evening'}"
        )
    if m == 45:
        nh = (h + 1) % 24
        forms.append(f"quarter to {(nh % 12) or 12} {'am' if nh < 12 else 'pm'}")
    if m == 15:
        forms.append(f"quarter past {h12} {ampm}")
    # held-out phrasing: spoken forms with "in the" only in test/validation for the evening
    if split == "train":
        forms = [f for f in forms if "in the evening" not in f] or forms
    return rng.choice(forms), gold


def _T(split: str, templates: list[str]) -> list[str]:
    """The last template of each list is held out of training (new phrasings in test)."""
    return templates[:-1] if split == "train" else templates


# -- actions: (phrase, tool call) ----------------------------------------------------------------
def act_create(rng, split):
    name = rng.choice(zone_names(split))
    lat, lon = coord_pair(rng)
    rtxt, r = radius(rng, split)
    where = coord_surface(rng, lat, lon)
    args = {"zone_name": name, "lat": lat, "lon": lon, "radius_m": r}
    when = ""
    k = rng.random()
    if k < 0.35:
        (s_txt, s), (e_txt, e) = time_surface(rng, split), time_surface(rng, split)
        args.update(start_time=s, end_time=e)
        when = rng.choice([f" from {s_txt} to {e_txt}", f" between {s_txt} and {e_txt}", f", active {s_txt}-{e_txt}"])
    elif k < 0.5:
        s_txt, s = time_surface(rng, split)
        args["start_time"] = s
        when = rng.choice([f" starting {s_txt}", f" from {s_txt}", f" effective {s_txt}"])
    elif k < 0.6:
        e_txt, e = time_surface(rng, split)
        args["end_time"] = e
        when = rng.choice([f" until {e_txt}", f" till {e_txt}"])
    t = rng.choice(
        _T(
            split,
            [
                "create a no-fly zone {name} at {where} with radius {r}{when}",
                "set up NFZ {name}, {r} around {where}{when}",
                "no-fly zone called {name} centred on {where}, radius {r}{when}",
                "please block the airspace {name}: {r} radius at {where}{when}",
                "new nfz {name} @ {where} r={r}{when}",
                "establish a {r} no fly zone named {name} at {where}{when}",
                "restrict flights within {r} of {where}, call it {name}{when}",
            ],
        )
    )
    return t.format(name=name, where=where, r=rtxt, when=when), ("create_no_fly_zone", args)


def act_lift(rng, split):
    name = rng.choice(zone_names(split))
    t = rng.choice(
        _T(
            split,
            [
                "lift the no-fly zone {n}",
                "remove NFZ {n}",
                "{n} can be reopened, lift it",
                "cancel the restriction on {n}",
                "drop no fly zone {n}",
                "clear zone {n} for traffic",
            ],
        )
    )
    return t.format(n=name), ("lift_no_fly_zone", {"zone_name": name})


def act_waypoint(rng, split):
    n = drone_number(rng, split)
    lat, lon = coord_pair(rng)
    wp = rng.randint(1, 12)
    args = {"drone_id": f"D-{n}", "waypoint_index": wp, "lat": lat, "lon": lon}
    alt = ""
    if rng.random() < 0.4:
        a = rng.randint(2, 40) * 10
        args["altitude_m"] = a
        alt = rng.choice([f" at {a} m", f", altitude {a}m", f" at {a} metres"])
    t = rng.choice(
        _T(
            split,
            [
                "move waypoint {wp} of {d} to {c}{alt}",
                "{d}: update wp {wp} to {c}{alt}",
                "change {d}'s waypoint {wp} to {c}{alt}",
                "set waypoint #{wp} for {d} at {c}{alt}",
                "reroute {d}, waypoint {wp} now {c}{alt}",
                "{d} wp{wp} -> {c}{alt}",
            ],
        )
    )
    return t.format(wp=wp, d=drone_surface(rng, n), c=coord_surface(rng, lat, lon), alt=alt), ("update_waypoint", args)


_MISSION_WORDS = {
    "survey": ["survey", "a survey of"],
    "mapping": ["mapping", "map", "a mapping run over"],
    "delivery": ["delivery", "a delivery to", "deliver to"],
    "medical_delivery": ["medical delivery", "a medical delivery to", "deliver medical supplies to"],
    "inspection": ["inspection", "an inspection of", "inspect"],
    "search_and_rescue": ["search and rescue", "SAR", "a search-and-rescue at"],
}


def act_mission(rng, split):
    n = drone_number(rng, split)
    mt = rng.choice(MISSION_TYPES)
    word = rng.choice(_MISSION_WORDS[mt])
    tgt = rng.choice(targets(split))
    t = rng.choice(
        _T(
            split,
            [
                "assign {d} to {w} {t}",
                "send {d} on {w} {t}",
                "{d}: mission {w}, target {t}",
                "task {d} with {w} {t}",
                "give {d} a {mt2} mission at {t}",
                "have {d} do {w} {t}",
            ],
        )
    )
    return t.format(d=drone_surface(rng, n), w=word, t=tgt, mt2=mt.replace("_", " ")), (
        "assign_mission",
        {"drone_id": f"D-{n}", "mission_type": mt, "target": tgt},
    )


def act_recall(rng, split):
    n = drone_number(rng, split)
    t = rng.choice(
        _T(
            split,
            [
                "recall {d}",
                "bring {d} back to base",
                "{d} return to base",
                "RTB {d}",
                "call back {d} now",
                "abort and recall {d}",
            ],
        )
    )
    return t.format(d=drone_surface(rng, n)), ("recall_drone", {"drone_id": f"D-{n}"})


def act_status(rng, split):
    n = drone_number(rng, split)
    t = rng.choice(
        _T(
            split,
            [
                "what's the status of {d}?",
                "status {d}",
                "check on {d}",
                "how is {d} doing?",
                "give me a status report for {d}",
                "where is {d} right now?",
            ],
        )
    )
    return t.format(d=drone_surface(rng, n)), ("get_drone_status", {"drone_id": f"D-{n}"})


ACTIONS = [act_create, act_lift, act_waypoint, act_mission, act_recall, act_status]
_JOIN = [", then ", "; also ", " and ", ". Also ", ", plus ", ". Next, ", " & "]
_CHAT = [
    ("hello", "Hello! I can manage no-fly zones, waypoints, missions and drone status."),
    ("thanks", "You're welcome."),
    (
        "what can you do?",
        "I can create or lift no-fly zones, update waypoints, assign missions, recall drones and report drone status.",
    ),
    ("what's the weather like?", "I have no weather tool; I can only act on airspace and drones."),
    ("tell me a joke", "I can only help with airspace operations."),
    ("who are you?", "I am Clover, an airspace-operations assistant."),
]


def _call(i: int, name: str, args: dict) -> dict:
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _cap(s: str, rng: random.Random) -> str:
    k = rng.random()
    return s[:1].upper() + s[1:] if k < 0.5 else (s.upper() if k < 0.55 else s)


def example(rng: random.Random, split: str, max_actions: int = 5) -> dict:
    """One chat example: {"messages", "tools", "kind"}."""
    k = rng.random()
    tools = AIRSPACE_TOOLS
    if k < 0.06:
        u, a = rng.choice(_CHAT)
        return {
            "kind": "text",
            "tools": tools,
            "messages": [{"role": "user", "content": _cap(u, rng)}, {"role": "assistant", "content": a}],
        }
    if k < 0.12:  # status + tool result + summary
        phrase, (name, args) = act_status(rng, split)
        st = {
            "drone_id": args["drone_id"],
            "battery": rng.randint(5, 100),
            "state": rng.choice(["en route", "hovering", "landed", "returning", "charging"]),
        }
        msgs = [
            {"role": "user", "content": _cap(phrase, rng)},
            {"role": "assistant", "content": "", "tool_calls": [_call(0, name, args)]},
            {"role": "tool", "tool_call_id": "call_0", "content": json.dumps(st)},
            {"role": "assistant", "content": f"{st['drone_id']} is {st['state']} with {st['battery']}% battery."},
        ]
        return {"kind": "tool_result", "tools": tools, "messages": msgs}
    if k < 0.16:  # a request whose tool is missing from the offered list
        i = rng.randrange(len(ACTIONS))
        phrase, (name, _) = ACTIONS[i](rng, split)
        tools = [t for t in AIRSPACE_TOOLS if t["function"]["name"] != name]
        return {
            "kind": "missing_tool",
            "tools": tools,
            "messages": [
                {"role": "user", "content": _cap(phrase, rng)},
                {"role": "assistant", "content": f"I can't do that: the {name} tool is not available."},
            ],
        }
    n = 1 if rng.random() < 0.5 else rng.randint(1, max(1, max_actions))
    phrases, calls = [], []
    for _ in range(n):
        p, c = rng.choice(ACTIONS)(rng, split)
        phrases.append(p)
        calls.append(c)
    text = phrases[0]
    for p in phrases[1:]:
        text += rng.choice(_JOIN) + p
    if rng.random() < 0.3:  # offer a random superset of the needed tools, in shuffled order
        need = {c[0] for c in calls}
        tools = [t for t in AIRSPACE_TOOLS if t["function"]["name"] in need or rng.random() < 0.5]
        rng.shuffle(tools)
    msgs = [
        {"role": "user", "content": _cap(text, rng)},
        {"role": "assistant", "content": "", "tool_calls": [_call(i, *c) for i, c in enumerate(calls)]},
    ]
    return {"kind": "tool_call" if n == 1 else "compound", "tools": tools, "messages": msgs}


def stream(split: str, seed: int = 0, max_actions: int = 5) -> Iterator[dict]:
    rng = random.Random(f"{split}-{seed}")
    while True:
        yield example(rng, split, max_actions)


def generate(split: str, n: int, seed: int = 0, max_actions: int = 5) -> list[dict]:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {SPLITS}")
    it = stream(split, seed, max_actions)
    return [next(it) for _ in range(n)]


def load_split(split: str, n: int = 300) -> list[dict]:
    """The fixed evaluation set of a split (deterministic)."""
    return generate(split, n, seed=12345 + _SPLIT_SEED[split])


def gold_calls(ex: dict) -> list[dict]:
    """The first assistant turn's calls as [{"name", "arguments": dict}]."""
    for m in ex["messages"]:
        if m["role"] == "assistant":
            return [
                {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
                for c in m.get("tool_calls") or []
            ]
    return []


def _norm(v):
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, dict):
        return tuple(sorted((k, _norm(x)) for k, x in v.items()))
    if isinstance(v, list):
        return tuple(_norm(x) for x in v)
    return v


def score_tool_calls(pred: list[dict], gold: list[dict]) -> bool:
    """Exact match: the same multiset of (name, arguments); numbers compared as numbers."""
    key = lambda c: (c.get("name"), _norm(c.get("arguments", {})))  # noqa: E731
    return sorted(map(repr, map(key, pred))) == sorted(map(repr, map(key, gold)))
