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
The probability of the chosen option is p(option | context, every other token as decided),
renormalised over the question's options, from one extra batched scoring pass in the engine
thread (the engine's events do not carry confidences).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

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
from clover.model import ModelCache

MAX_QUESTIONS = 8


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
        return SamplingParams(max_tokens=len(self.forced), block_size=self.block_size, allowed=allowed,
                              stop_token_ids=[], **self.knobs)  # fmt: skip

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
    return Plan(prompt, forced, slots, bs, dict(knobs or {}))


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


# -- scoring (engine thread) ---------------------------------------------------------------------
@torch.inference_mode()
def score(model, plans: list[Plan], generated: list[list[int]]) -> list[list[list[float]]]:
    """Per plan, per slot: p(option | everything else as generated), over the slot's options.

    One prefill per (plan, block) and one batched denoise pass for every slot of every plan:
    row = that slot's block with only the slot masked.
    """
    cfg = model.config
    dev = model.lm_head.weight.device
    rows = []  # (plan index, slot index, prefix length, block tokens, position in block)
    for pi, (plan, gen) in enumerate(zip(plans, generated)):
        full = plan.prompt_ids + list(gen)
        bs = plan.block_size
        for si, s in enumerate(plan.slots):
            a = len(plan.prompt_ids) + s.index
            start = a // bs * bs
            rows.append((pi, si, start, full[start : start + bs], a - start, bs))
    out: list[list[list[float]]] = [[[] for _ in p.slots] for p in plans]
    by_bs: dict[int, list] = {}
    for r in rows:
        by_bs.setdefault(r[5], []).append(r)
    for bs, group in by_bs.items():
        caches, prefixes = [], {}
        for pi, _, start, *_ in group:
            key = (pi, start)
            if key not in prefixes:
                ids = (plans[pi].prompt_ids + list(generated[pi]))[:start]
                cache, _ = model.prefill(torch.tensor([ids], dtype=torch.long, device=dev), bs)
                if cfg.shift_logits and cache.last_logits is None:
                    cache.last_logits = torch.zeros(1, cfg.vocab_size, device=dev, dtype=model.lm_head.weight.dtype)
                prefixes[key] = cache
            caches.append(prefixes[key])
        x = torch.full((len(group), bs), cfg.mask_token_id, dtype=torch.long, device=dev)
        for r, (_, _, _, block, pos, _) in enumerate(group):
            x[r, : len(block)] = torch.tensor(block, device=dev)
            x[r, pos] = cfg.mask_token_id
        cache = ModelCache.cat(caches)
        logits = model.step(cache, denoise=x, block_size=bs)  # [R, bs, V]
        for r, (pi, si, _, _, pos, _) in enumerate(group):
            ids = torch.tensor(plans[pi].slots[si].option_ids, device=dev)
            out[pi][si] = logits[r, pos, ids].float().softmax(-1).tolist()
    return out


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
    t1 = time.perf_counter()
    probs = score(engine.model, plans, [o.token_ids for o in outs])
    return result(group, mode, plans, outs, probs, t0, t1, time.perf_counter())


def result(group: DecisionGroup, mode: str, plans: list[Plan], outs, probs, t0: float, t1: float, t2: float) -> dict:
    gen = [o.token_ids for o in outs]
    return {
        "mode": mode,
        "answers": answers(group, plans, gen, probs),
        "block_size": plans[0].block_size,
        "blocks": max(p.blocks for p in plans),
        "timing": {
            "wall_s": t2 - t0,
            "decode_s": t1 - t0,
            "score_s": t2 - t1,
            "requests": len(plans),
            "forward_passes": sum(o.stats.get("forward_passes", 0) for o in outs),
        },  # fmt: skip
        "usage": {
            "prompt_tokens": sum(len(p.prompt_ids) for p in plans),
            "completion_tokens": sum(len(g) for g in gen),
        },  # fmt: skip
    }
