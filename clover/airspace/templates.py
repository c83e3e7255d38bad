"""How operators write, second corpus: lengths as a number and a unit (gold: the number as written
and the unit, for the extraction tools), times and time ranges written many ways, names in quotes
or brackets, message templates in many word orders (the name before or after the position, the
radius first, labelled forms, bulletin styles), and typos and casing. Coordinates and drone ids
are the first corpus's forms (``clover.airspace.phrasing``).

A surface form is ``(form id, text, gold)``; ``Ctx.form`` keeps a hashed share of the (template,
form) pairs out of train, as in the first corpus.
"""

from __future__ import annotations

import random
from decimal import Decimal

from clover.airspace.phrasing import Ctx, Pieces, _dec, random_time, time_forms

# unit -> the ways to write it after a number (tight: no space)
_UNIT_TEXT = {
    "m": [("m", " m"), ("m_tight", "m"), ("metres", " metres"), ("meters", " meters"), ("mtrs", " mtrs")],
    "km": [
        ("km", " km"),
        ("km_tight", "km"),
        ("kilometres", " kilometres"),
        ("kilometers", " kilometers"),
        ("KM", " KM"),
        ("kms", " kms"),
    ],
    "ft": [("ft", " ft"), ("ft_tight", "ft"), ("feet", " feet"), ("foot", "-foot"), ("FT", " FT")],
    "nm": [
        ("nm", " nm"),
        ("nm_tight", "nm"),
        ("NM", " NM"),
        ("nmi", " nmi"),
        ("nautical", " nautical miles"),
        ("nautical_1", " nautical mile"),
    ],
}


def number(text: str) -> int | float:
    """The JSON number of a length as written: '2,500' -> 2500, '1.5' -> 1.5, '.5' -> 0.5."""
    d = Decimal(text.replace(",", ""))
    return int(d) if d == d.to_integral_value() and "." not in text else float(d)


def length_value(rng: random.Random, unit: str, altitude: bool = False) -> str:
    """A length's digits in a unit, as an operator would give it."""
    if unit == "km":
        return rng.choice([str(rng.randint(1, 15)), _dec(rng, 0.2, 20, 1), _dec(rng, 0.5, 5, 2), "0.5"])
    if unit == "nm":
        return rng.choice([str(rng.randint(1, 10)), _dec(rng, 0.5, 9.5, 1), ".5" if rng.random() < 0.1 else "0.5"])
    if unit == "ft":
        v = rng.choice([rng.randint(1, 100) * 100, rng.randint(300, 12000), rng.randint(2, 40) * 250])
        v = min(v, 3000) if altitude else v
    else:
        v = rng.choice([rng.randint(50, 5000), rng.randint(1, 50) * 100, rng.randint(2, 30) * 50])
        v = rng.randint(2, 40) * 10 if altitude else v
    return f"{v:,}" if v >= 1000 and rng.random() < 0.3 else str(v)


def length_forms(rng: random.Random, altitude: bool = False) -> list[tuple[str, str, tuple]]:
    """(form id, text, (number, unit)) for one drawn length."""
    unit = rng.choice(["m", "m", "ft"] if altitude else ["km", "m", "nm", "ft"])
    v = length_value(rng, unit, altitude)
    forms = [(fid, v + t, (number(v), unit)) for fid, t in _UNIT_TEXT[unit]]
    if v == "1":  # "1 nautical mile", not "miles"
        forms = [f for f in forms if f[0] not in ("nautical", "kilometres", "kilometers", "metres", "meters", "feet")]
    return [f for f in forms if f[0] != "nautical_1" or v == "1"]


def length_surface(ctx: Ctx, tid: str, altitude: bool = False) -> tuple[str, int | float, str]:
    _, text, (value, unit) = ctx.form(tid, length_forms(ctx.rng, altitude))
    return text, value, unit


def time_forms2(h: int, m: int) -> list[tuple[str, str, str]]:
    """The first corpus's ways to write h:m, and more: 18h, 18h30, 6 p.m., a bare hour ("until 11")."""
    forms = time_forms(h, m)
    gold = f"{h:02d}:{m:02d}"
    h12, ap = h % 12 or 12, "a.m." if h < 12 else "p.m."
    forms.append(("h_fr", f"{h}h{m:02d}" if m else f"{h}h", gold))
    forms.append(("dots", f"{h12}{':' + format(m, '02d') if m else ''} {ap}", gold))
    if m == 0:
        forms.append(("bare", str(h), gold))  # a bare hour is read as written: "until 11" is 11:00
    return forms


def time_surface2(ctx: Ctx, tid: str) -> tuple[str, str]:
    _, text, gold = ctx.form(tid, time_forms2(*random_time(ctx.rng)))
    return text, gold


# how a window is written; {s} start, {e} end
WHEN = {
    "both": [
        " from {s} to {e}",
        " {s}-{e}",
        " {s}–{e}",
        " from {s} until {e}",
        " between {s} and {e}",
        ", active {s}-{e}",
        " ({s}-{e})",
        ", window {s} to {e}",
        " {s} till {e}",
        ", valid {s} until {e}",
        " from {s} till {e}",
        ", {s} to {e}",
    ],
    "start": [" from {s}", " starting {s}", " as of {s}", " effective {s}", " beginning at {s}", ", starts {s}"],
    "end": [" until {e}", " till {e}", " up to {e}", " ending {e}", ", expires {e}", " until {e} only"],
}
# labelled forms ("Zone name: ..., Active: 09:00-17:00") and bulletins put the window in a field
WHEN_LABEL = {
    "both": [", Active: {s}-{e}", "\nWindow: {s} - {e}", ", Time: {s} to {e}", " / {s}-{e}"],
    "start": [", From: {s}", "\nStart: {s}", " / from {s}"],
    "end": [", Until: {e}", "\nEnd: {e}", " / until {e}"],
}
# names set off in the message; the gold name is what is inside
QUOTES = [("", ""), ("", ""), ("", ""), ('"', '"'), ("'", "'"), ("“", "”"), ("«", "»"), ("[", "]"), ("(", ")")]


def quoted(rng: random.Random, name: str) -> str:
    a, b = rng.choice(QUOTES)
    return f"{a}{name}{b}"


# -- templates (the last of each list is never used in train) -------------------------------------
# create: {zone} {where} {r} {when}; labelled ones end in "|label": their window is a field
# fmt: off
CREATE_T = [
    "create a no-fly zone {zone} at {where} with radius {r}{when}",
    "{zone}: no-fly zone, {r} around {where}{when}",
    "{r} no-fly zone around {where} called {zone}{when}",
    "{r} radius around {where}, name it {zone}{when}",
    "Zone name: {zone}, Position {where}, Radius {r}{when}|label",
    "Name: {zone}\nCentre: {where}\nRadius: {r}{when}|label",
    "NFZ {zone} / {where} / {r}{when}|label",
    "NOTAM - {zone} - {where} - radius {r}{when}",
    "at {where} set up a {r} no-fly zone named {zone}{when}",
    "close the airspace within {r} of {where} for {zone}{when}",
    "no drones within {r} of {where} - call it {zone}{when}",
    "please restrict {where}, {r}, as {zone}{when}",
    "new zone {zone} — centre {where}, r {r}{when}",
    "we need {zone} closed to drones: {r} around {where}{when}",
    "set up NFZ {zone}, {r} around {where}{when}",
    "put a {r} exclusion on {where} and call it {zone}{when}",
    "no-fly zone {zone}. Center: {where}. Radius: {r}.{when}|label",
    "restrict flights within {r} of {where}, name: {zone}{when}",
    "block {r} around {where}: {zone}{when}",
]
LIFT_T = ["lift the no-fly zone {zone}", "remove NFZ {zone}", "{zone} can be reopened, lift it",
          "cancel the restriction on {zone}", "the {zone} zone is done, lift it", "zone to lift: {zone}",
          "{zone} - lift", "kill the {zone} zone", "please remove the restriction called {zone}",
          "end no-fly zone {zone}", "{zone}: no longer needed, remove it", "reopen the airspace of {zone}",
          "lift {zone}", "drop the {zone} no-fly zone"]
WAYPOINT_T = ["move waypoint {wp} of {d} to {c}{alt}", "{d}: update wp {wp} to {c}{alt}",
              "change {d}'s waypoint {wp} to {c}{alt}", "{d} wp{wp} -> {c}{alt}", "waypoint {wp} for {d}: {c}{alt}",
              "for {d}, waypoint {wp} now goes to {c}{alt}", "Drone: {d}, Waypoint: {wp}, Position: {c}{alt}",
              "set {d} waypoint #{wp} at {c}{alt}", "{c} is the new waypoint {wp} of {d}{alt}",
              "reroute {d} - wp {wp} - {c}{alt}", "put waypoint {wp} of {d} at {c}{alt}"]
ALT_T = [" at {a}", ", altitude {a}", " alt {a}", ", fly it at {a}", " ({a})", ", height {a}", " @ {a}"]
MISSION_T = ["assign {d} {a_noun} mission at {t}", "send {d} to {verb} {t}", "{d}: {noun} mission, target {t}",
             "{t} needs {a_noun} - use {d}", "have {d} {verb} {t}", "{d} -> {noun} @ {t}",
             "Drone: {d}, Mission: {noun}, Target: {t}", "I need {d} to {verb} {t}", "{noun} of {t}, {d} please",
             "put {d} on {a_noun} of {t}", "can {d} {verb} {t}?", "{verb} {t} with {d}"]
RECALL_T = ["recall {d}", "bring {d} back to base", "{d} return to base", "RTB {d}", "call back {d} now",
            "abort and recall {d}", "{d}, come home", "get {d} back here", "battery is low on {d}, bring it home",
            "{d} rtb", "ground {d} and bring it back", "send {d} home"]
STATUS_T = ["what's the status of {d}?", "status {d}", "check on {d}", "how is {d} doing?", "where is {d} right now?",
            "{d} status?", "battery level of {d}?", "sitrep {d}", "any news from {d}?", "status check: {d}",
            "how much battery does {d} have left?", "{d} - where and battery?"]
# requests that sound like work but that no tool serves: answered in words, never with a call
UNSERVED_T = ["launch the fireworks over {place} at {time}", "turn on the landing lights of {d}",
              "take a photo of {t} with {d}", "book me a flight to {city}", "open runway {n} for landing",
              "extend {zone} by {r}", "rename the zone {zone} to {zone2}", "how many drones are flying right now?",
              "increase the speed of {d} to {n} m/s", "schedule maintenance for {d} on Friday",
              "call the tower and tell them {d} is inbound", "arm the payload on {d}",
              "list every no-fly zone", "land {d} at {t}", "send a text to the pilot of {d}",
              "make {zone} {r} bigger", "switch {d} to night mode", "play the recording from {d}'s camera"]
# fmt: on
_TYPO_KEEP = set("{}")


def typo(rng: random.Random, text: str) -> str:
    """One typo in a word of four letters or more: two letters swapped, one dropped or doubled."""
    words = [i for i, w in enumerate(text.split(" ")) if len(w) >= 4 and w.isalpha()]
    if not words:
        return text
    parts = text.split(" ")
    i = rng.choice(words)
    w, j = parts[i], rng.randrange(1, len(parts[i]) - 1)
    k = rng.randrange(3)
    parts[i] = (
        w[:j] + w[j + 1] + w[j] + w[j + 2 :] if k == 0 else w[:j] + w[j + 1 :] if k == 1 else w[:j] + w[j] + w[j:]
    )
    return " ".join(parts)


def style(rng: random.Random, pieces: Pieces, decorate: bool = True) -> str:
    """Casing, decoration and typos of one message: slots (names, numbers) are never changed."""
    if rng.random() < 0.12:  # typos live in the literal words only
        lit = [i for i, (t, is_lit) in enumerate(pieces) if is_lit and any(len(w) >= 4 for w in t.split())]
        if lit:
            i = rng.choice(lit)
            pieces = pieces[:i] + [(typo(rng, pieces[i][0]), True)] + pieces[i + 1 :]
    pre = rng.choice(["", "", "", "", "", "please ", "ops: ", "hey, ", "urgent: ", "Clover, ", "ok ", "> ", "FYI "])
    suf = rng.choice(["", "", "", "", "", ".", "!", " please", ", thanks", " asap", " pls", " thx", " - over"])
    if not decorate:
        pre = suf = ""
    pieces = ([(pre, True)] if pre else []) + pieces + ([(suf, True)] if suf else [])
    k = rng.random()
    if k < 0.05:
        pieces = [(t.upper() if lit else t, lit) for t, lit in pieces]
    elif k < 0.12:
        pieces = [(t.lower() if lit else t, lit) for t, lit in pieces]
    elif k < 0.55 and pieces[0][1]:
        pieces[0] = (pieces[0][0][:1].upper() + pieces[0][0][1:], True)
    return "".join(t for t, _ in pieces)
