"""Joint decisions (design §4): up to 8 questions about one context, answered in one block.

``joint``: one request. The prompt is the decision-group chat (``clover.data.decisions``: all
questions in one user turn) ending with the first answer prefix ``1: ``; the generated region
is laid out in advance, ``<answer 1>\\n2: <answer 2>\\n3: ...``, every structural token pinned
by a one-token allowed set and every answer slot constrained to its question's options
(``SamplingParams.allowed``), so the slots are denoised together, each seeing the others. The
block size is the model's when the region fits in the first block, else the smallest one up
to ``max_block_size`` that holds it (the response says which, and how many blocks it spans).

``independent``: one request per question (its own prompt, one constrained slot), submitted
together.

Each option must be exactly one token where it stands (after ``": "`` or the assistant
header); anything else is refused with a clear message, because a slot is one position.
Each answer's probabilities are those the engine chose from when it committed the slot:
p(option | context, the answers committed before it), over the question's options (the slot
is constrained to them). In ``joint`` mode the slots committed later see the earlier answers;
no extra pass is spent on them (they come back as the request's ``logprobs``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from clover.data.chat import render
from clover.data.decisions import (
    DecisionGroup,
    Question,
    answer_slots,
    answer_text,
    decision_messages,
    single_question,
)
from clover.engine import SamplingParams

MAX_QUESTIONS = 8
# the commit threshold of answer slots unless the request sets one: below the engine's 0.9
# because a slot is a choice among 2-8 options; chosen on the validation groups (0.9 → 0.7:
# same all-correct rate, ~35 % fewer passes; see the closing note of issue 5)
DEFAULT_THRESHOLD = 0.7


class DecisionError(ValueError):
    """A decision request this model cannot answer as asked (the server answers 400)."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


@dataclass
class Slot:
    question: int  # index into the request's questions
    index: int  # generated-position index of the answer token
    option_ids: list[int]  # one token per option, in the question's order


@dataclass
class Plan:
    """One engine request: prompt, the laid-out generated tokens (-1 at slots), its slots."""

    prompt_ids: list[int]
    forced: list[int]
    slots: list[Slot]
    block_size: int
    knobs: dict = field(default_factory=dict)

    def params(self) -> SamplingParams:
        allowed = {i: [t] for i, t in enumerate(self.forced) if t >= 0}
        allowed.update({s.index: list(s.option_ids) for s in self.slots})
        k = max(len(s.option_ids) for s in self.slots)  # every option's probability comes back
        return SamplingParams(max_tokens=len(self.forced), block_size=self.block_size, allowed=allowed,
                              stop_token_ids=[], logprobs=k, **self.knobs)  # fmt: skip

    @property
    def blocks(self) -> int:
        """Blocks the generated region touches."""
        P, bs = len(self.prompt_ids), self.block_size
        return (P + len(self.forced) - 1) // bs - P // bs + 1


def check_questions(context: str, questions: list[dict]) -> DecisionGroup:
    if not questions:
        raise DecisionError("questions is empty: give 1 to 8 questions", "questions")
    if len(questions) > MAX_QUESTIONS:
        raise DecisionError(
            f"{len(questions)} questions: a decision group holds at most {MAX_QUESTIONS} (one block of answer slots)",
            "questions",
        )
    out = []
    for i, q in enumerate(questions):
        opts = [str(o) for o in q["options"]]
        if any(not o.strip() for o in opts):
            raise DecisionError(f"question {i + 1}: options must be non-empty", f"questions.{i}.options")
        try:
            out.append(Question(str(q["question"]), opts))
        except ValueError as e:
            raise DecisionError(f"question {i + 1}: {e}", f"questions.{i}.options") from None
    return DecisionGroup(context, out)


def option_ids(tokenizer, before: str, options: list[str], qi: int, banned: set[int]) -> list[int]:
    """One token id per option, as the option tokenises right after ``before``."""
    base = tokenizer.encode(before)
    ids = []
    for o in options:
        e = tokenizer.encode(before + o)
        if e[: len(base)] != base or len(e) != len(base) + 1:
            pieces = [tokenizer.decode([t]) for t in e[len(base) :]] if e[: len(base)] == base else None
            how = f"{len(pieces)} tokens {pieces}" if pieces else "not a separate token"
            raise DecisionError(
                f"question {qi + 1}: option {o!r} is {how} for this model's tokenizer; every option must be "
                "exactly one token (each answer is one constrained slot). Use single-token options "
                "(e.g. yes/no) or rephrase them.",
                f"questions.{qi}.options",
            )
        if e[-1] in banned:
            raise DecisionError(f"question {qi + 1}: option {o!r} is a special token", f"questions.{qi}.options")
        ids.append(e[-1])
    if len(set(ids)) != len(ids):
        raise DecisionError(f"question {qi + 1}: two options are the same token", f"questions.{qi}.options")
    return ids


def _banned(tokenizer, config) -> set[int]:
    ids = {config.mask_token_id, *config.eos_ids}
    for name in ("eos_token_id", "pad_token_id", "mask_token_id"):
        if getattr(tokenizer, name, None) is not None:
            ids.add(getattr(tokenizer, name))
    return ids


def fit_block_size(config, prompt_len: int, n: int, requested: int | None) -> int:
    """The model's block size if ``n`` generated tokens fit in the first block, else the smallest
    block size up to ``max_block_size`` that holds them (else the model's: the region then spans blocks)."""
    if requested is not None:
        return requested
    bs = config.block_size
    for b in [bs, *range(bs + 1, config.max_block_size + 1)]:
        if prompt_len % b + n <= b:
            return b
    return bs


def _plan(tokenizer, config, group: DecisionGroup, mode: str, first: int, block_size, knobs) -> Plan:
    """The prompt ends with the first answer prefix; then prefix tokens and one slot per question."""
    layout = answer_slots(group, mode)  # [(prefix, options), ...]
    head = render(decision_messages(group, mode, with_answer=False), add_generation_prompt=True)
    text = head + layout[0][0]
    prompt = tokenizer.encode(text)
    banned = _banned(tokenizer, config)
    forced: list[int] = []
    slots = []
    for i, (prefix, opts) in enumerate(layout):
        if i:
            forced += tokenizer.encode(prefix)
        slots.append(Slot(first + i, len(forced), option_ids(tokenizer, text if i == 0 else prefix, opts, first + i,
                                                             banned)))  # fmt: skip
        forced.append(-1)
    # the layout must be how a whole answer tokenises (true for a tokenizer that never merges
    # across ": " and "\n"); checked with every question's first option
    laid = prompt + [max(t, 0) for t in forced]
    for s in slots:
        laid[len(prompt) + s.index] = s.option_ids[0]
    if tokenizer.encode(head + answer_text(group, [0] * len(layout), mode)) != laid:
        raise DecisionError("this tokenizer does not split the answer layout into fixed tokens", "questions")
    bs = fit_block_size(config, len(prompt), len(forced), block_size)
    return Plan(prompt, forced, slots, bs, {"threshold": DEFAULT_THRESHOLD, **(knobs or {})})


def plan_joint(tokenizer, config, group: DecisionGroup, block_size: int | None = None,
               knobs: dict | None = None) -> list[Plan]:  # fmt: skip
    """All questions in one request: every answer slot in one block."""
    return [_plan(tokenizer, config, group, "joint", 0, block_size, knobs)]


def plan_independent(tokenizer, config, group: DecisionGroup, block_size: int | None = None,
                     knobs: dict | None = None) -> list[Plan]:  # fmt: skip
    """One request per question (its own prompt: the context and that question alone)."""
    bs = block_size or config.block_size
    return [_plan(tokenizer, config, single_question(group, i), "independent", i, bs, knobs)
            for i in range(len(group.questions))]  # fmt: skip


PLANS = {"joint": plan_joint, "independent": plan_independent}


# -- probabilities -------------------------------------------------------------------------------
def probabilities(plans: list[Plan], outs) -> list[list[list[float]]]:
    """Per plan, per slot: the option probabilities the engine chose from (its logprobs over the
    slot's constrained set, so they sum to 1), in the question's option order."""
    res = []
    for plan, out in zip(plans, outs):
        per_slot = []
        for s in plan.slots:
            lp = out.logprobs[s.index] if out.logprobs and s.index < len(out.logprobs) else None
            top = dict(lp.top) if lp is not None else {}
            per_slot.append([math.exp(top[t]) if t in top else 0.0 for t in s.option_ids])
        res.append(per_slot)
    return res


# -- answers -------------------------------------------------------------------------------------
def answers(group: DecisionGroup, plans: list[Plan], generated: list[list[int]], probs) -> list[dict]:
    qs = group.questions
    res: list[dict] = [{} for _ in qs]
    for plan, gen, pp in zip(plans, generated, probs):
        for s, p in zip(plan.slots, pp):
            q = qs[s.question]
            tok = gen[s.index] if s.index < len(gen) else None
            k = s.option_ids.index(tok) if tok in s.option_ids else max(range(len(p)), key=p.__getitem__)
            res[s.question] = {
                "index": s.question, "question": q.text, "option": q.options[k], "option_index": k,
                "probability": p[k], "probabilities": dict(zip(q.options, p)),
            }  # fmt: skip
    return res


def decide_sync(engine, tokenizer, group: DecisionGroup, mode: str = "joint", block_size: int | None = None,
                knobs: dict | None = None) -> dict:  # fmt: skip
    """The whole thing in the calling thread, with ``engine`` to itself (benchmarks, scripts)."""
    t0 = time.perf_counter()
    plans = PLANS[mode](tokenizer, engine.model.config, group, block_size, knobs)
    outs = engine.generate_batch([p.prompt_ids for p in plans], [p.params() for p in plans])
    return result(group, mode, plans, outs, t0, time.perf_counter())


def result(group: DecisionGroup, mode: str, plans: list[Plan], outs, t0: float, t1: float) -> dict:
    gen = [o.token_ids for o in outs]
    return {
        "mode": mode,
        "answers": answers(group, plans, gen, probabilities(plans, outs)),
        "block_size": plans[0].block_size,
        "blocks": max(p.blocks for p in plans),
        "timing": {
            "wall_s": t1 - t0,
            "requests": len(plans),
            "forward_passes": sum(o.stats.get("forward_passes", 0) for o in outs),
        },  # fmt: skip
        "usage": {
            "prompt_tokens": sum(len(p.prompt_ids) for p in plans),
            "completion_tokens": sum(len(g) for g in gen),
        },  # fmt: skip
    }
