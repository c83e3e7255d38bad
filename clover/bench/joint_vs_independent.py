"""What ``clover bench decisions`` measures (its flags and table are ``clover.commands.bench_serve``):
on the decision test groups (``clover.airspace.decision_groups.load_groups``), the same engine
answers each group ``joint`` (one request, all answer slots in one block) and ``independent``
(one request per question, submitted together; and, as a client without joint decisions would
do it, one call after another): group all-correct rate, per-question accuracy, wall time per
group. The engine and the airspace groups are imported inside the functions.
"""

from __future__ import annotations

import time

from clover.airspace.decision_groups import load_groups
from clover.data.decision_chat import DecisionGroup, Question, single_question


def client_group(g):
    """The group as a client sends it: questions and options, no answers."""
    return DecisionGroup(g.context, [Question(q.text, list(q.options)) for q in g.questions])


def run_mode(
    engine, tok, groups, mode: str, policy: str, threshold: float, block_size: int | None, sequential: bool = False
) -> dict:
    """Every group answered in ``mode`` (``sequential``: one call per question, one after another);
    group all-correct rate, per-question accuracy, seconds and passes per group, the joint layouts."""
    from clover.api.joint_decisions import decide_sync  # deferred: loads torch, not for clover --help

    knobs = {"policy": policy, "threshold": threshold}
    right_groups = right_q = n_q = 0
    wall = passes = 0.0
    blocks = {}
    for g in groups:
        cg = client_group(g)
        if sequential:
            chosen, t0 = [], time.perf_counter()
            for i in range(len(cg.questions)):
                r = decide_sync(engine, tok, single_question(cg, i), "independent", block_size, knobs)
                chosen.append(r["answers"][0]["option_index"])
                passes += r["timing"]["forward_passes"]
            wall += time.perf_counter() - t0
        else:
            r = decide_sync(engine, tok, cg, mode, block_size, knobs)
            chosen = [a["option_index"] for a in r["answers"]]
            wall += r["timing"]["wall_s"]
            passes += r["timing"]["forward_passes"]
            key = f"{r['block_size']}x{r['blocks']}"
            blocks[key] = blocks.get(key, 0) + 1
        ok = [c == q.answer for c, q in zip(chosen, g.questions)]
        right_groups += all(ok)
        right_q += sum(ok)
        n_q += len(ok)
    n = len(groups)
    return {
        "group_acc": right_groups / n,
        "question_acc": right_q / n_q,
        "s_per_group": wall / n,
        "passes_per_group": passes / n,
        "blocks": blocks,
    }


def expressible(engine, tok, groups) -> list:
    """Groups this tokenizer can ask (options of several tokens take the grammar path; an option
    the layout cannot hold, such as one with a line break, is refused)."""
    from clover.api.joint_decisions import DecisionError, plan_joint  # deferred: loads torch, not for clover --help

    ok = []
    for g in groups:
        try:
            plan_joint(tok, engine.model.config, client_group(g))
            ok.append(g)
        except DecisionError:
            pass
    return ok


def measure_decisions(
    engine, split: str, n: int, policy: str, threshold: float, block_size: int | None = None, sequential: bool = True
) -> tuple[dict, dict]:
    """The first ``n`` groups of ``split`` that ``engine``'s tokenizer can ask, answered ``joint``,
    ``independent`` and (``sequential``) ``independent_sequential`` after a warm-up of two groups
    each → (the figures, flat as the JSON holds them; each mode's ``run_mode`` result). No group
    askable: a ValueError."""
    tok = engine.tokenizer
    asked = load_groups(split, n)
    groups = expressible(engine, tok, asked)
    if not groups:
        raise ValueError(f"no {split} group can be asked with this tokenizer")
    knobs = (policy, threshold, block_size)
    run_mode(engine, tok, groups[:2], "joint", *knobs)  # warm-up
    run_mode(engine, tok, groups[:2], "independent", *knobs)
    res = {
        "joint": run_mode(engine, tok, groups, "joint", *knobs),
        "independent": run_mode(engine, tok, groups, "independent", *knobs),
    }
    if sequential:
        res["independent_sequential"] = run_mode(engine, tok, groups, "independent", *knobs, sequential=True)
    figures = {
        "split": split,
        "n_groups": len(groups),
        "skipped_groups": len(asked) - len(groups),
        "n_questions": sum(len(g.questions) for g in groups),
        "policy": policy,
        "threshold": threshold,
    }
    w = engine.model.lm_head.weight
    figures.update(device=str(w.device), dtype=str(w.dtype)[6:])
    for mode, r in res.items():
        for k, v in r.items():
            figures[f"{mode}_{k}"] = v
    j, i = res["joint"], res["independent"]
    figures["group_acc_gain_points"] = 100 * (j["group_acc"] - i["group_acc"])
    figures["speedup_vs_independent"] = i["s_per_group"] / j["s_per_group"]
    if "independent_sequential" in res:
        figures["speedup_vs_sequential"] = res["independent_sequential"]["s_per_group"] / j["s_per_group"]
    return figures, res
