"""The phrasing side of the airspace corpus: entity pools split by train/validation/test,
surface forms of radii, times, coordinates and drone ids (each a ``(form id, text, gold)``),
the first corpus's message templates, and how a template is filled and styled. The corpora
(``clover.airspace.chats``, ``clover.airspace.tokenizer_corpus``) build whole examples from these
pieces.
"""

from __future__ import annotations

import functools
import random
import re
import string
import zlib
from decimal import ROUND_HALF_UP, Decimal

SPLITS = ("train", "validation", "test")


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


# Coined words: in train, half of the entity words are made-up words, so that the names in
# the answers cannot be recalled from a small vocabulary of names and must be copied from the
# message (the held-out words of validation and test are real words the model never saw).
COINED_SHARE = 0.5
COINED_SHARE_PIECES = 0.7  # with the tokenizer's word pieces to coin from (``coined_word``)
_ONSETS = (
    "b",
    "br",
    "c",
    "d",
    "dr",
    "f",
    "g",
    "gr",
    "h",
    "k",
    "kr",
    "l",
    "m",
    "n",
    "p",
    "pr",
    "r",
    "s",
    "st",
    "t",
    "tr",
    "v",
    "w",
    "z",
)
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "ou", "y")
_CODAS = ("", "", "", "n", "r", "l", "k", "s", "th", "x", "m", "nd", "rt")


@functools.cache
def _pool_words() -> frozenset:
    return frozenset(w.lower() for items in (PLACES, NATO, CITIES, OBJECTS, PREFIXES) for x in items for w in x.split())


def coined_word(rng: random.Random, pieces: tuple[str, ...] = ()) -> str:
    """A made-up word that is no word of any entity pool: pronounceable syllables (lowercase).
    When the training tokenizer's word ``pieces`` are given: 60 % one to three of those (as they
    are cased), 20 % syllables, 20 % pieces of the corpus's own train-side words glued together.
    A byte-pair tokenizer keeps word pieces ("Qu", "dock", "house") that it seldom emits, because
    longer merges win in the words it learnt them from; names made of them put every piece where
    the model must copy it, so a held-out name is made of pieces it has copied before. (Without
    ``pieces`` every word is syllables and no rng draw is spent choosing the kind: the words of
    a recipe without ``name_pieces`` depend on its seed alone.)"""
    while True:
        k, shortest = (rng.random() if pieces else 0.7), 3
        if k < 0.6:  # one piece alone is that very token; two or three may merge anew
            w, shortest = "".join(rng.choice(pieces) for _ in range(rng.choice((1, 1, 2, 3)))), 2
        elif k < 0.8:
            w = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(rng.choice((1, 2, 2, 3))))
            w += rng.choice(_CODAS)
        else:
            w = "".join(_fragment(rng) for _ in range(rng.choice((1, 2, 2, 3))))
        if len(w) >= shortest and w.lower() not in _pool_words():
            return w


def _fragment(rng: random.Random) -> str:
    """A word's beginning, end or middle: where the tokenizer's word pieces come from."""
    word = rng.choice(_fragment_words())
    n = min(len(word), rng.randint(1, 6))
    i = rng.choice((0, len(word) - n, rng.randint(0, len(word) - n)))
    return word[i : i + n]


@functools.cache
def _fragment_words() -> tuple:
    """The words of the train side of the corpus: train pool words, and the templates and
    mission words train uses (the held-out last template of each list is left out)."""
    texts = [*PREFIXES, *(_pool(x, "train") for x in (PLACES, NATO, CITIES, OBJECTS))]
    lists = [CREATE_T, LIFT_T, WAYPOINT_T, MISSION_T, RECALL_T, STATUS_T, *MANY_T.values()]
    texts += [t for ts in lists for t in ts[:-1]] + [t for ws in _MISSION_WORDS.values() for w in ws for t in w]
    flat = " ".join(t if isinstance(t, str) else " ".join(t) for t in texts)
    return tuple(sorted({w.lower() for w in re.findall(r"[^\W\d_]+", re.sub(r"\{\w+\}", " ", flat))}))


def _entity_word(rng: random.Random, items: tuple, split: str, pieces: tuple[str, ...] = ()) -> str:
    """A word of ``split``'s pool, or (train only, ``COINED_SHARE``) a coined one in the pool's style."""
    if split == "train" and rng.random() < (COINED_SHARE_PIECES if pieces else COINED_SHARE):
        w = coined_word(rng, pieces)
        return w if items is OBJECTS else w[0].upper() + w[1:]
    return rng.choice(_pool(items, split))


def heldout_words(split: str) -> list[str]:
    """The entity words only ``split`` uses (each zone name / target holds at least one)."""
    return [*_pool(PLACES, split), *_pool(NATO, split), *_pool(CITIES, split), *_pool(OBJECTS, split)]


def zone_name(rng: random.Random, split: str, pieces: tuple[str, ...] = ()) -> str:
    place, nato, city = (_entity_word(rng, x, split, pieces) for x in (PLACES, NATO, CITIES))
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


def target_name(rng: random.Random, split: str, pieces: tuple[str, ...] = ()) -> str:
    obj, place, city = (_entity_word(rng, x, split, pieces) for x in (OBJECTS, PLACES, CITIES))
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
    """What one example's generation shares: the rng, the split, the word pieces train names may
    be coined from (``coined_word``), and whether a held-out phrasing was used (``novel``)."""

    def __init__(self, rng: random.Random, split: str, pieces: tuple[str, ...] = ()):
        self.rng, self.split, self.pieces, self.novel = rng, split, tuple(pieces), False

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
CREATE_T = ["create a no-fly zone {zone} at {where} with radius {r}{when}",
            "set up NFZ {zone}, {r} around {where}{when}",
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
            "report on {d}", "sitrep {d}", "is {d} ok?", "what's the battery and position of {d}?",
            "how much battery does {d} have left?", "where's {d} and how is its battery?", "any news from {d}?"]
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


# System prompts a client may send before the conversation (agent frameworks nearly always do).
# A share of examples carries one, so that the model reads past text it was not trained to
# act on; split like the entity pools (validation and test prompts are never trained on).
# fmt: off
SYSTEM_PROMPTS = (
    "You are a helpful assistant.",
    "You are a helpful assistant that can call functions.",
    "You are an airspace operations assistant. Use the tools when an action is needed.",
    "You are Clover, a drone fleet controller.",
    "Answer concisely.",
    "You are a helpful AI assistant. Call tools when needed and keep answers short.",
    "You manage a fleet of drones for a city operations centre.",
    "Always use the provided tools to act; never make up results.",
    "You are an assistant for air traffic operators. Be precise with numbers and names.",
    "You are a function-calling AI model. You may call one or more functions to assist with the user query.",
    "Keep responses brief and professional.",
    "You are a drone dispatch assistant.",
    "You help operators control drones and no-fly zones.",
    "You are a helpful, harmless and honest assistant.",
    "Respond in English.",
    "You are an operations copilot. Prefer tool calls over explanations.",
    "You are ChatGPT, a large language model. Follow the user's instructions carefully.",
    "You are a helpful assistant with access to tools.",
    "Use the tools to fulfil the operator's request.",
    "You are an AI agent in an airspace control room.",
    "Be concise. Do not explain your reasoning.",
    "You are a reliable assistant for UAV fleet management.",
    "Today is a busy day at the operations centre; act quickly and accurately.",
    "You are an assistant. If a request needs an action, call the matching tool.",
    "You are a helpful assistant. Think carefully, then answer.",
    "You are the dispatch desk assistant for a drone delivery company.",
    "Assist the user with drone operations.",
    "You are a careful assistant: copy names, numbers and times exactly as given.",
    "You are a smart assistant for a municipal drone program.",
    "Follow the operator's commands using the available functions.",
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
    "You are an expert in composing functions.",
    "You are a command assistant for an unmanned aircraft fleet.",
    "Reply briefly.",
    "You are an assistant that turns operator requests into tool calls.",
    "You work for the airport's drone safety team.",
    "You are a helpful assistant. The user is a drone operator.",
    "You are an AI that executes drone fleet commands.",
    "Help the user manage airspace restrictions and drone missions.",
    "You are a concise, accurate assistant.",
)
# fmt: on
SYSTEM_SHARE = 0.3


def system_prompt(key: str, split: str) -> str | None:
    """A client-style system prompt for the example keyed ``key`` (its first user text), or None
    (``1 - SYSTEM_SHARE`` of the time). Drawn from its own generator, keyed by the text, so the
    rest of the example stream is what it would be without system prompts."""
    rng = random.Random(zlib.crc32(f"system|{split}|{key}".encode()))
    if rng.random() >= SYSTEM_SHARE:
        return None
    return rng.choice(_pool(SYSTEM_PROMPTS, split))
