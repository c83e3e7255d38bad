"""Decision groups: a shared context and 2-6 related questions whose answers depend on each other.

Rules of the closed world: a zone restricts flights *below* its ceiling while it is active; a
flight violates the zone when the zone is active during the flight and the flight is below the
ceiling; the operator approves a flight without violation, delays it when the zone ends within
an hour of the planned start, reroutes it otherwise; a flight proceeds as planned only when it
is approved and its battery covers the need.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from clover.data.corpus import drone_number, zone_names

YES_NO = ["yes", "no"]
ACTIONS = ["approve", "delay", "reroute"]


@dataclass
class Question:
    text: str
    options: list[str]
    answer: int  # index into options


@dataclass
class DecisionGroup:
    context: str
    questions: list[Question]


def _hm(m: int) -> str:
    return f"{m // 60:02d}:{m % 60:02d}"


def make_group(rng: random.Random, split: str, n_questions: int | None = None) -> DecisionGroup:
    zone = rng.choice(zone_names(split))
    d = f"D-{drone_number(rng, split)}"
    zs = rng.randint(6 * 60, 18 * 60) // 15 * 15
    ze = zs + rng.randint(2, 16) * 15
    ceiling = rng.randint(3, 30) * 10
    fs = rng.randint(5 * 60, 20 * 60) // 5 * 5
    fe = fs + rng.randint(2, 12) * 5
    alt = rng.randint(2, 40) * 10
    battery, need = rng.randint(10, 100), rng.randint(10, 90)
    active = fs < ze and zs < fe
    above = alt >= ceiling
    violates = active and not above
    action = "approve" if not violates else ("delay" if ze - fs <= 60 else "reroute")
    enough = battery >= need
    proceed = action == "approve" and enough
    context = (
        f"Zone {zone} is active {_hm(zs)}-{_hm(ze)} below {ceiling} m. "
        f"Flight {d} crosses {zone} {_hm(fs)}-{_hm(fe)} at {alt} m. Battery {battery}%, needs {need}%."
    )
    yn = lambda b: 0 if b else 1  # noqa: E731
    qs = [
        Question(f"Is {zone} active during the flight?", YES_NO, yn(active)),
        Question("Is the flight at or above the ceiling?", YES_NO, yn(above)),
        Question(f"Does the flight violate {zone}?", YES_NO, yn(violates)),
        Question("What should the operator do?", ACTIONS, ACTIONS.index(action)),
        Question("Is the battery enough?", YES_NO, yn(enough)),
        Question("Can the flight proceed as planned?", YES_NO, yn(proceed)),
    ]
    n = n_questions or rng.randint(2, len(qs))
    keep = sorted(rng.sample(range(len(qs)), n))
    return DecisionGroup(context, [qs[i] for i in keep])


def generate_groups(split: str, n: int, seed: int = 0) -> list[DecisionGroup]:
    rng = random.Random(f"decisions-{split}-{seed}")
    return [make_group(rng, split) for _ in range(n)]


def load_groups(split: str, n: int = 100) -> list[DecisionGroup]:
    return generate_groups(split, n, seed={"train": 0, "validation": 1, "test": 2}[split] + 777)


def question_block(questions: list[Question], numbered: bool = True) -> str:
    lines = []
    for i, q in enumerate(questions):
        opts = "/".join(q.options)
        lines.append(f"{i + 1}. {q.text} ({opts})" if numbered else f"{q.text} ({opts})")
    return "\n".join(lines)


def joint_user(context: str, questions: list[Question]) -> str:
    return f"{context}\nAnswer each question:\n{question_block(questions)}"


def answer_slots(n_questions: int) -> list[str]:
    """Text before each answer in the joint assistant turn: answer i follows prefix i."""
    return [("" if i == 0 else "\n") + f"{i + 1}: " for i in range(n_questions)]


def joint_answer(group: DecisionGroup) -> str:
    return "".join(p + q.options[q.answer] for p, q in zip(answer_slots(len(group.questions)), group.questions))


def parse_joint(text: str, questions: list[Question]) -> list[int | None]:
    """Chosen option index per question from a joint answer text (None if unreadable)."""
    got: dict[int, str] = {}
    for line in text.split("<|im_end|>")[0].splitlines():
        k, _, v = line.partition(":")
        if k.strip().isdigit():
            got[int(k) - 1] = v.strip()
    return [q.options.index(got[i]) if got.get(i) in q.options else None for i, q in enumerate(questions)]


def decision_messages(group: DecisionGroup, mode: str = "joint", index: int = 0) -> list[dict]:
    """Chat messages for a group: ``joint`` (all questions, one line per answer) or
    ``independent`` (question ``index`` alone, the bare option as answer)."""
    if mode == "joint":
        return [
            {"role": "user", "content": joint_user(group.context, group.questions)},
            {"role": "assistant", "content": joint_answer(group)},
        ]
    q = group.questions[index]
    return [
        {"role": "user", "content": f"{group.context}\n{question_block([q], numbered=False)}"},
        {"role": "assistant", "content": q.options[q.answer]},
    ]


def decision_examples(split: str, n: int, seed: int = 0) -> list[dict]:
    """Training chats: joint groups and single questions, mixed."""
    rng = random.Random(f"decision-examples-{split}-{seed}")
    out = []
    for g in generate_groups(split, n, seed):
        if rng.random() < 0.6:
            out.append({"kind": "decision_joint", "tools": None, "messages": decision_messages(g, "joint")})
        else:
            i = rng.randrange(len(g.questions))
            out.append({"kind": "decision_single", "tools": None, "messages": decision_messages(g, "independent", i)})
    return out
