"""Joint decisions (docs/architecture.md, Joint decisions): up to 8 questions about one context,
answered in one block.

``joint``: one request. The prompt is the decision-group chat (``clover.data.decision_chat``: all
questions in one user turn) ending with the first answer prefix ``1: ``; the generated region
is laid out in advance, ``<answer 1>\\n2: <answer 2>\\n3: ...``, every structural token pinned
by a one-token allowed set and every answer slot constrained to its question's options
(``SamplingParams.allowed``), so the slots are denoised together, each seeing the others. The
block size is the model's when the region fits in the first block, else the smallest one up
to ``max_block_size`` that holds it (the response says which, and how many blocks it spans).

``independent``: one request per question (its own prompt, one constrained slot), submitted
together.

When every option is one token where it stands (after ``": "`` or the assistant header), each
answer is one constrained slot and its probabilities are those the engine chose from when it
committed the slot: p(option | context, the answers committed before it), over the question's
options. In ``joint`` mode the slots committed later see the earlier answers; no extra pass is
spent on them (they come back as the request's ``logprobs``).

Options of several tokens ("escalate", "needs review") are decoded under a grammar instead
(``clover.engine.grammar.choice_grammar``: each answer one of its options, the prefixes fixed),
still in one request for ``joint``: the block's positions are denoised together and commit left
to right, several per pass where the model is sure. An answer's probability is then that of its
tokens as they were committed (their product), reported for the chosen option only.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from clover.api.errors import as_api_error, bad_request, too_large
from clover.api.settings import BLOCK_SETTINGS, block_size_problem, decoding_values
from clover.data.chat import render
from clover.data.decision_chat import (
    DecisionGroup,
    Question,
    answer_slots,
    answer_text,
    decision_messages,
    single_question,
)
from clover.engine import SamplingParams
from clover.engine.grammar import choice_grammar

MAX_QUESTIONS = 8
# how answer slots commit unless the request says: "prefix" (left to right in runs: the leftmost
# open slot, then each next position while p >= τ), so a later answer sees the earlier ones, as
# the questions come in dependency order. τ 0.7: on the validation decision groups as accurate as
# τ 0.9 in fewer passes per group (docs/benchmarks.md, Joint decisions)
DEFAULT_POLICY = "prefix"
DEFAULT_THRESHOLD = 0.7
DEFAULT_KNOBS = {"policy": DEFAULT_POLICY, "threshold": DEFAULT_THRESHOLD}


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
    layout: list[tuple[str, list[str]]] | None = None  # the grammar path (multi-token options)
    first: int = 0  # index of the plan's first question in the request
    max_new: int = 0  # grammar path: a bound on the generated tokens (one per byte)

    def params(self) -> SamplingParams:
        if self.layout is not None:
            return SamplingParams(
                max_tokens=self.max_new,
                block_size=self.block_size,
                logprobs=0,
                grammar=choice_grammar(self.layout),
                **self.knobs,
            )
        allowed = {i: [t] for i, t in enumerate(self.forced) if t >= 0}
        allowed.update({s.index: list(s.option_ids) for s in self.slots})
        k = max(len(s.option_ids) for s in self.slots)  # every option's probability comes back
        return SamplingParams(
            max_tokens=len(self.forced),
            block_size=self.block_size,
            allowed=allowed,
            stop_token_ids=[],
            logprobs=k,
            **self.knobs,
        )

    @property
    def max_tokens(self) -> int:
        """Tokens the answer region generates (the grammar path: at most)."""
        return len(self.forced) or self.max_new

    @property
    def blocks(self) -> int:
        """Blocks the generated region touches (the grammar path: at most)."""
        P, bs = len(self.prompt_ids), self.block_size
        return (P + self.max_tokens - 1) // bs - P // bs + 1


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


def option_ids(tokenizer, before: str, options: list[str], qi: int, banned: set[int]) -> list[int] | None:
    """One token id per option, as the option tokenises right after ``before``; None when some
    option is several tokens there (then the group takes the grammar path)."""
    base = tokenizer.encode(before)
    ids = []
    for o in options:
        e = tokenizer.encode(before + o)
        if e[: len(base)] != base or len(e) != len(base) + 1:
            return None
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
        ids = option_ids(tokenizer, text if i == 0 else prefix, opts, first + i, banned)
        if ids is None:
            return _grammar_plan(prompt, layout, first, config, block_size, knobs)
        slots.append(Slot(first + i, len(forced), ids))
        forced.append(-1)
    # the layout must be how a whole answer tokenises (true for a tokenizer that never merges
    # across ": " and "\n"); checked with every question's first option
    laid = prompt + [max(t, 0) for t in forced]
    for s in slots:
        laid[len(prompt) + s.index] = s.option_ids[0]
    if tokenizer.encode(head + answer_text(group, [0] * len(layout), mode)) != laid:
        return _grammar_plan(prompt, layout, first, config, block_size, knobs)  # no fixed token layout
    bs = fit_block_size(config, len(prompt), len(forced), block_size)
    return Plan(prompt, forced, slots, bs, {**DEFAULT_KNOBS, **(knobs or {})})


def _grammar_plan(prompt: list[int], layout, first: int, config, block_size, knobs) -> Plan:
    """Multi-token options: the answer region under a choice grammar (the first prefix is in the prompt)."""
    for i, (_, opts) in enumerate(layout):
        if any("\n" in o for o in opts):
            raise DecisionError(
                f"question {first + i + 1}: an option may not contain a line break", f"questions.{first + i}.options"
            )
    parts = [("" if i == 0 else prefix, opts) for i, (prefix, opts) in enumerate(layout)]
    bound = sum(len(p.encode()) + max(len(o.encode()) for o in opts) for p, opts in parts) + 1
    return Plan(
        prompt,
        [],
        [],
        block_size or config.block_size,
        {**DEFAULT_KNOBS, **(knobs or {})},
        layout=parts,
        first=first,
        max_new=bound,
    )


def plan_joint(
    tokenizer, config, group: DecisionGroup, block_size: int | None = None, knobs: dict | None = None
) -> list[Plan]:
    """All questions in one request: every answer slot in one block."""
    return [_plan(tokenizer, config, group, "joint", 0, block_size, knobs)]


def plan_independent(
    tokenizer, config, group: DecisionGroup, block_size: int | None = None, knobs: dict | None = None
) -> list[Plan]:
    """One request per question (its own prompt: the context and that question alone)."""
    bs = block_size or config.block_size
    return [
        _plan(tokenizer, config, single_question(group, i), "independent", i, bs, knobs)
        for i in range(len(group.questions))
    ]


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
def grammar_answers(group: DecisionGroup, plan: Plan, out, tokenizer) -> list[tuple[int, dict]]:
    """The grammar path: which option each answer is, read off the generated bytes, and the
    probability of its tokens as committed."""
    pieces = [tokenizer.token_bytes(t) for t in out.token_ids]
    spans, pos = [], 0  # (start, end, logprob) per generated token, in bytes
    for i, b in enumerate(pieces):
        lp = out.logprobs[i].logprob if out.logprobs and i < len(out.logprobs) else 0.0
        spans.append((pos, pos + len(b), lp))
        pos += len(b)
    text = b"".join(pieces)
    res, at = [], 0
    for k, (prefix, opts) in enumerate(plan.layout):
        qi = plan.first + k
        q = group.questions[qi]
        at += len(prefix.encode()) if text.startswith(prefix.encode(), at) else 0
        after = plan.layout[k + 1][0].encode() if k + 1 < len(plan.layout) else b""

        def ends_here(o: str) -> bool:  # the option is followed by the next prefix, or ends the text
            end = at + len(o.encode())
            return text.startswith(after, end) if after else end == len(text)

        fits = [j for j, o in enumerate(opts) if text.startswith(o.encode(), at) and ends_here(o)]
        if not fits:  # cut short (max tokens): no answer
            res.append((qi, _answer(qi, q, None, 0.0, {})))
            continue
        j = max(fits, key=lambda j: len(opts[j]))
        end = at + len(opts[j].encode())
        p = math.exp(sum(lp for a, b, lp in spans if a < end and b > at))
        res.append((qi, _answer(qi, q, j, p, {q.options[j]: p})))
        at = end
    return res


def _answer(qi: int, q: Question, k: int | None, p: float, probabilities: dict[str, float]) -> dict:
    """One answer as the response gives it: question ``qi`` answered with option ``k`` (None: no
    answer) at probability ``p``; ``probabilities``: by option, those the response reports."""
    option = None if k is None else q.options[k]
    return {
        "index": qi,
        "question": q.text,
        "option": option,
        "option_index": k,
        "probability": p,
        "probabilities": probabilities,
    }


def answers(group: DecisionGroup, plans: list[Plan], outs, probs, tokenizer=None) -> list[dict]:
    qs = group.questions
    res: list[dict] = [{} for _ in qs]
    for plan, out, pp in zip(plans, outs, probs):
        if plan.layout is not None:
            for qi, a in grammar_answers(group, plan, out, tokenizer):
                res[qi] = a
            continue
        gen = out.token_ids
        for s, p in zip(plan.slots, pp):
            q = qs[s.question]
            tok = gen[s.index] if s.index < len(gen) else None
            k = s.option_ids.index(tok) if tok in s.option_ids else max(range(len(p)), key=p.__getitem__)
            res[s.question] = _answer(s.question, q, k, p[k], dict(zip(q.options, p)))
    return res


def plan_request(
    req, tokenizer, config, limits
) -> tuple[DecisionGroup, list[Plan], list[tuple[list[int], SamplingParams]]]:
    """A checked ``DecisionRequest`` → (the group, its plans, the engine requests); every problem
    is an APIError (400, or 413 for a prompt past ``limits``). ``/v1/decisions`` and ``clover.LLM.decide``."""
    if problem := block_size_problem(req.block_size, config.max_block_size):
        raise bad_request(problem, "block_size")
    knobs = decoding_values(req, tuple(s for s in BLOCK_SETTINGS if s.name != "block_size"))
    try:
        group = check_questions(req.context, [q.model_dump() for q in req.questions])
        plans = PLANS[req.mode](tokenizer, config, group, req.block_size, knobs)
        items = [(p.prompt_ids, p.params()) for p in plans]
    except DecisionError as e:
        raise bad_request(str(e), e.param) from None
    except ValueError as e:
        raise as_api_error(e) from None
    longest = max(len(p.prompt_ids) for p in plans)
    if longest > limits.max_prompt_tokens:
        raise too_large(
            f"the decision prompt is {longest} tokens; this server accepts at most {limits.max_prompt_tokens}",
            code="prompt_too_long",
            param="context",
        )
    over = max(plans, key=lambda p: len(p.prompt_ids) + p.max_tokens)  # the answers must fit in the context too
    if len(over.prompt_ids) + over.max_tokens > limits.context:
        raise bad_request(
            f"the decision prompt ({len(over.prompt_ids)} tokens) and its answers (up to "
            f"{over.max_tokens} tokens) exceed the model's context of {limits.context}",
            "context",
            "context_length_exceeded",
        )
    return group, plans, items


def decide_sync(
    engine,
    tokenizer,
    group: DecisionGroup,
    mode: str = "joint",
    block_size: int | None = None,
    knobs: dict | None = None,
) -> dict:
    """The whole thing in the calling thread, with ``engine`` to itself (benchmarks, scripts)."""
    t0 = time.perf_counter()
    plans = PLANS[mode](tokenizer, engine.model.config, group, block_size, knobs)
    outs = engine.generate_batch([p.prompt_ids for p in plans], [p.params() for p in plans])
    return result(group, mode, plans, outs, t0, time.perf_counter(), tokenizer)


def result(group: DecisionGroup, mode: str, plans: list[Plan], outs, t0: float, t1: float, tokenizer=None) -> dict:
    gen = [o.token_ids for o in outs]
    return {
        "mode": mode,
        "answers": answers(group, plans, outs, probabilities(plans, outs), tokenizer),
        "block_size": plans[0].block_size,
        "blocks": max(p.blocks for p in plans),
        "timing": {
            "wall_s": t1 - t0,
            "requests": len(plans),
            "forward_passes": sum(o.stats.get("forward_passes", 0) for o in outs),
        },
        "usage": {
            "prompt_tokens": sum(len(p.prompt_ids) for p in plans),
            "completion_tokens": sum(len(g) for g in gen),
        },
    }
