"""Decision groups: one short shared context and 2-8 related questions whose answers depend on
each other, answered jointly (one constrained slot per question) or one by one.

The closed world, stated in every context by its numbers::

    Alpha: active 09:00-10:30, ceiling 120 m. Oslo Pier: active 13:00-14:00, ceiling 60 m.
    Flight D-17 crosses Alpha 10:15-10:45 at 90 m. Battery 64%, needs 40%, detour +15%.
    Hold if the zone is off 30 min after departure, else reroute.

* active   = the zone's window overlaps the flight's window
* below    = flight altitude < ceiling
* conflict = active and below
* still    = the zone is active at departure + H minutes (H given by the hold rule)
* detour   = conflict and still           (holding would not clear it)
* enough   = battery >= need (+ detour extra when a detour is flown)
* action   = deny if not enough, else approve if no conflict, else reroute if detour, else hold
* on time  = action is approve

Other zones in the context are decoys. Zone names and drone numbers come from the corpora's
split pools, so groups of different splits never share a context.
"""

from __future__ import annotations

import random

from clover.airspace.phrasing import SPLITS, drone_number, zone_name
from clover.data.decision_chat import DecisionGroup, Question, decision_messages, single_question

YES_NO = ["yes", "no"]
ACTIONS = ["approve", "hold", "reroute", "deny"]
HOLD_MINUTES = (15, 20, 30, 45, 60)


def _hm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _scenario(rng: random.Random, split: str) -> dict:
    """Random numbers for one group, before any answer is derived."""
    names: list[str] = []
    while len(names) < rng.choice([1, 1, 2, 3]):
        z = zone_name(rng, split)
        names += [z] if z not in names else []
    zones = []
    for z in names:
        start = rng.randrange(6 * 60, 18 * 60, 15)
        zones.append(
            {"name": z, "start": start, "end": start + rng.randint(2, 16) * 15, "ceiling": rng.randint(3, 30) * 10}
        )
    crossed = rng.choice(zones)
    fs = crossed["start"] + rng.randrange(-150, 240, 5)  # departure near the zone window, so all cases occur
    return {
        "zones": zones,
        "crossed": crossed,
        "drone": f"D-{drone_number(rng, split)}",
        "fs": fs,
        "fe": fs + rng.randint(2, 18) * 5,
        "alt": rng.randint(2, 40) * 10,
        "battery": rng.randint(10, 100),
        "need": rng.randint(10, 80),
        "extra": rng.choice([5, 10, 15, 20, 25]),
        "hold": rng.choice(HOLD_MINUTES),
    }


def _facts(s: dict) -> dict:
    z = s["crossed"]
    active = s["fs"] < z["end"] and z["start"] < s["fe"]
    below = s["alt"] < z["ceiling"]
    conflict = active and below
    still = z["start"] <= s["fs"] + s["hold"] < z["end"]
    detour = conflict and still
    enough = s["battery"] >= s["need"] + (s["extra"] if detour else 0)
    action = "deny" if not enough else "approve" if not conflict else "reroute" if detour else "hold"
    return {
        "active": active,
        "below": below,
        "conflict": conflict,
        "still": still,
        "detour": detour,
        "enough": enough,
        "action": action,
        "on_time": action == "approve",
    }


def _context(s: dict) -> str:
    zones = " ".join(
        f"{z['name']}: active {_hm(z['start'])}-{_hm(z['end'])}, ceiling {z['ceiling']} m." for z in s["zones"]
    )
    return (
        f"{zones}\nFlight {s['drone']} crosses {s['crossed']['name']} {_hm(s['fs'])}-{_hm(s['fe'])} at "
        f"{s['alt']} m. Battery {s['battery']}%, needs {s['need']}%, detour +{s['extra']}%.\n"
        f"Hold if the zone is off {s['hold']} min after departure, else reroute."
    )


def _questions(s: dict, f: dict) -> list[Question]:
    """All eight questions in dependency order (later answers follow from earlier ones)."""
    z, yn = s["crossed"]["name"], lambda b: 0 if b else 1
    return [
        Question(f"Is {z} active during the flight?", YES_NO, yn(f["active"])),
        Question(f"Is the flight below the ceiling of {z}?", YES_NO, yn(f["below"])),
        Question(f"Does the flight conflict with {z}?", YES_NO, yn(f["conflict"])),
        Question(f"Is {z} still active {s['hold']} min after departure?", YES_NO, yn(f["still"])),
        Question("Is a detour needed?", YES_NO, yn(f["detour"])),
        Question("Is the battery enough?", YES_NO, yn(f["enough"])),
        Question("What should the operator do?", ACTIONS, ACTIONS.index(f["action"])),
        Question("Can the flight leave on time?", YES_NO, yn(f["on_time"])),
    ]


def make_group(rng: random.Random, split: str, n_questions: int | None = None) -> DecisionGroup:
    """One group; the final action is balanced over approve/hold/reroute/deny by rejection."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {SPLITS}")
    want = rng.choice(ACTIONS)
    for _ in range(200):
        s = _scenario(rng, split)
        f = _facts(s)
        if f["action"] == want:
            break
    qs = _questions(s, f)
    n = n_questions or rng.randint(2, len(qs))
    keep = (
        sorted(rng.sample(range(len(qs) - 1), n - 1)) + [len(qs) - 1]
        if rng.random() < 0.3
        else sorted(rng.sample(range(len(qs)), n))
    )  # often ending on the question that needs all the others
    return DecisionGroup(_context(s), [qs[i] for i in keep])


def generate_groups(split: str, n: int, seed: int = 0) -> list[DecisionGroup]:
    rng = random.Random(f"clover-decisions-{split}-{seed}")
    return [make_group(rng, split) for _ in range(n)]


def load_groups(split: str, n: int = 200) -> list[DecisionGroup]:
    """The fixed evaluation groups of a split."""
    return generate_groups(split, n, seed=2_000_003 + SPLITS.index(split))


def decision_examples(split: str, n: int, seed: int = 0, joint_frac: float = 0.6) -> list[dict]:
    """Training chats in the corpus format: joint groups and single questions, mixed."""
    rng = random.Random(f"clover-decision-examples-{split}-{seed}")
    out = []
    for g in generate_groups(split, n, seed):
        if rng.random() < joint_frac:
            out.append({"kind": "decision_joint", "tools": None, "messages": decision_messages(g, "joint")})
        else:
            one = single_question(g, rng.randrange(len(g.questions)))
            out.append({"kind": "decision_single", "tools": None, "messages": decision_messages(one, "independent")})
    return out
