"""Joint decisions as chat text: a decision group (one shared context, 2-8 questions with their
options), its user turn, the answer's layout (one ``i: option`` line per question, the slots an
engine constrains) and how an answer text is read back (docs/architecture.md, Joint decisions).

What a group says comes from elsewhere: a client's request (``/v1/decisions``) or a task's
generator of training and evaluation groups.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Question:
    text: str
    options: list[str]
    answer: int | None = None  # index into options; None for a client's unanswered question

    def __post_init__(self):
        if not 2 <= len(self.options) <= 8 or len(set(self.options)) != len(self.options):
            raise ValueError(f"a question needs 2-8 distinct options, got {self.options}")
        if self.answer is not None and not 0 <= self.answer < len(self.options):
            raise ValueError(f"answer {self.answer} out of range for {self.options}")


@dataclass
class DecisionGroup:
    context: str
    questions: list[Question] = field(default_factory=list)

    @property
    def answers(self) -> list[int | None]:
        return [q.answer for q in self.questions]


# -- chat renderings ----------------------------------------------------------------------------
def question_line(q: Question) -> str:
    return f"{q.text} ({'/'.join(q.options)})"


def joint_user(group: DecisionGroup) -> str:
    lines = [f"{i + 1}. {question_line(q)}" for i, q in enumerate(group.questions)]
    return group.context + "\nAnswer each question:\n" + "\n".join(lines)


def answer_slots(group: DecisionGroup, mode: str = "joint") -> list[tuple[str, list[str]]]:
    """The assistant answer's layout as ``[(prefix, options), ...]``: the answer text is
    ``prefix_1 + option_1 + prefix_2 + option_2 + ...`` (then ``<|im_end|>``), so an engine can
    force the prefixes and put one constrained slot per question.

    joint: ``[("1: ", opts1), ("\\n2: ", opts2), ...]``; independent (a one-question group): ``[("", opts)]``.
    """
    if mode == "joint":
        return [(("\n" if i else "") + f"{i + 1}: ", q.options) for i, q in enumerate(group.questions)]
    if mode == "independent":
        if len(group.questions) != 1:
            raise ValueError("independent mode renders one question: use single_question(group, i)")
        return [("", group.questions[0].options)]
    raise ValueError(f"unknown mode {mode!r}; choose 'joint' or 'independent'")


def answer_text(group: DecisionGroup, choices: list[int] | None = None, mode: str = "joint") -> str:
    """The assistant answer for ``choices`` (default: the gold answers)."""
    choices = group.answers if choices is None else choices
    if any(c is None for c in choices):
        raise ValueError("every question needs an answer to render the answer text")
    return "".join(p + opts[c] for (p, opts), c in zip(answer_slots(group, mode), choices))


def single_question(group: DecisionGroup, index: int) -> DecisionGroup:
    """The group reduced to question ``index`` (same context), for independent mode."""
    return DecisionGroup(group.context, [group.questions[index]])


def decision_messages(group: DecisionGroup, mode: str = "joint", with_answer: bool = True) -> list[dict]:
    """Chat messages for a group: ``joint`` (all questions, one ``i: option`` line each) or
    ``independent`` (a one-question group, see :func:`single_question`; the bare option).
    Without ``with_answer`` the messages end with the user turn (the engine's prompt)."""
    if mode == "joint":
        user = joint_user(group)
    elif mode == "independent":
        answer_slots(group, mode)  # validates: one question
        user = group.context + "\n" + question_line(group.questions[0])
    else:
        raise ValueError(f"unknown mode {mode!r}; choose 'joint' or 'independent'")
    msgs = [{"role": "user", "content": user}]
    if with_answer:
        msgs.append({"role": "assistant", "content": answer_text(group, mode=mode)})
    return msgs


def parse_answers(text: str, group: DecisionGroup, mode: str = "joint") -> list[int | None]:
    """Chosen option index per question from an answer text (None where unreadable)."""
    text = text.split("<|im_end|>")[0].strip()
    if mode == "independent":
        opts = group.questions[0].options
        return [opts.index(text) if text in opts else None]
    got: dict[int, str] = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        if k.strip().isdigit():
            got[int(k) - 1] = v.strip()
    return [q.options.index(got[i]) if got.get(i) in q.options else None for i, q in enumerate(group.questions)]


def parse_joint(text: str, questions: list[Question]) -> list[int | None]:
    """``parse_answers`` for a joint answer, given the questions only."""
    return parse_answers(text, DecisionGroup("", questions), "joint")
