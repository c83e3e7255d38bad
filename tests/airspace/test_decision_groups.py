"""Decision groups: answers checked against an independent reading of the context."""

import re
from collections import Counter

import pytest

from clover.airspace import decision_groups as D
from clover.airspace.phrasing import heldout_words
from clover.data import decision_chat as layout


def _minutes(hm: str) -> int:
    h, m = hm.split(":")
    return int(h) * 60 + int(m)


def oracle(group: layout.DecisionGroup) -> dict[str, str]:
    """Re-derive every answer from the context text alone, with sets of minutes (a different
    computation from the generator's interval arithmetic)."""
    ctx = group.context
    zones = {
        m[1].strip(): (_minutes(m[2]), _minutes(m[3]), int(m[4]))
        for m in re.finditer(r"([^:.\n]+): active (\d\d:\d\d)-(\d\d:\d\d), ceiling (\d+) m\.", ctx)
    }
    f = re.search(
        r"Flight (D-\d+) crosses (.+) (\d\d:\d\d)-(\d\d:\d\d) at (\d+) m\. Battery (\d+)%, needs (\d+)%, "
        r"detour \+(\d+)%\.\nHold if the zone is off (\d+) min after departure, else reroute\.",
        ctx,
    )
    zs, ze, ceiling = zones[f[2]]
    fs, fe, alt, battery, need, extra, hold = _minutes(f[3]), _minutes(f[4]), *map(int, f.groups()[4:])
    zone_on = set(range(zs, ze))
    active = bool(zone_on & set(range(fs, fe)))
    conflict = active and alt < ceiling
    still = fs + hold in zone_on
    detour = conflict and still
    enough = battery - need - (extra if detour else 0) >= 0
    action = "deny" if not enough else "reroute" if detour else "hold" if conflict else "approve"
    yn = lambda b: "yes" if b else "no"
    return {
        "active during": yn(active),
        "below the ceiling": yn(alt < ceiling),
        "conflict": yn(conflict),
        "min after departure": yn(still),
        "detour": yn(detour),
        "battery": yn(enough),
        "operator": action,
        "on time": yn(action == "approve"),
    }


@pytest.mark.parametrize("split", ["train", "test"])
def test_answers_follow_from_the_context(split):
    actions = Counter()
    for g in D.generate_groups(split, 300, seed=1):
        assert 2 <= len(g.questions) <= 8 and len(g.context) < 400
        truth = oracle(g)
        for q in g.questions:
            key = next(k for k in truth if k in q.text)
            assert q.options[q.answer] == truth[key], (g.context, q.text)
            assert 2 <= len(q.options) <= 4 and all(" " not in o for o in q.options)
            if key == "operator":
                actions[truth[key]] += 1
    assert min(actions.values()) > 0.1 * sum(actions.values()) and set(actions) == set(D.ACTIONS)


def test_joint_rendering_and_slots():
    for g in D.generate_groups("validation", 50):
        msgs = layout.decision_messages(g, "joint")
        answer = msgs[-1]["content"]
        slots = layout.answer_slots(g)
        assert answer == "".join(p + opts[q.answer] for (p, opts), q in zip(slots, g.questions))
        assert answer.splitlines() == [f"{i + 1}: {q.options[q.answer]}" for i, q in enumerate(g.questions)]
        assert layout.parse_answers(answer, g) == g.answers
        assert msgs[0]["content"].startswith(g.context) and f"{len(g.questions)}. " in msgs[0]["content"]
        assert layout.decision_messages(g, "joint", with_answer=False) == msgs[:1]
        one = layout.single_question(g, len(g.questions) - 1)
        m1 = layout.decision_messages(one, "independent")
        assert m1[-1]["content"] == one.questions[0].options[one.questions[0].answer]
        assert layout.answer_slots(one, "independent") == [("", one.questions[0].options)]
        assert layout.parse_answers(m1[-1]["content"], one, "independent") == one.answers
    two = layout.DecisionGroup("c", [layout.Question("a?", ["yes", "no"]), layout.Question("b?", ["yes", "no"])])
    assert layout.parse_answers("1: yes\n2: maybe", two) == [0, None]
    with pytest.raises(ValueError):
        layout.answer_slots(g, "independent")
    with pytest.raises(ValueError):
        layout.Question("q", ["only"])


def test_splits_are_disjoint_and_deterministic():
    ctx = {s: {g.context for g in D.generate_groups(s, 300)} for s in ("train", "validation", "test")}
    assert not ctx["train"] & ctx["test"] and not ctx["train"] & ctx["validation"]
    train_words = set(re.findall(r"\w+", "\n".join(ctx["train"]).lower()))
    assert not any(w.lower() in train_words for w in heldout_words("test") + heldout_words("validation"))
    assert D.generate_groups("test", 20, seed=4) == D.generate_groups("test", 20, seed=4)
    assert D.load_groups("test", 10) == D.load_groups("test", 10)
    exs = D.decision_examples("train", 50)
    assert {e["kind"] for e in exs} == {"decision_joint", "decision_single"} and all(e["tools"] is None for e in exs)
