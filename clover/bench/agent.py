"""What ``clover bench agent`` measures (its flags and tables are ``clover.commands.bench_agent``):
operator tasks through the whole agent loop (``clover.airspace.loop``) with one model side per
decoder, ``ar`` and the default policy: task success by the world's state, seconds, model calls
and forward passes per task; and the zone demo (``clover.airspace.demo``, through the model's task:
the run the playground's demo button makes); with ``measure_http``, the same tasks through
``clover serve`` over HTTP. The task and the engine are imported inside the functions.
"""

from __future__ import annotations

from clover.airspace.demo import decoder_request
from clover.airspace.extraction_tools import values_form
from clover.airspace.loop import GROUNDED_REPLY, LocalModel, OpenAIModel, run_agent
from clover.airspace.tasks import operator_tasks, task_success
from clover.bench.replies import reply_check, reply_figures
from clover.data.task import model_task

DECODERS = ("ar", "default")  # the default: clover.engine.policies.DEFAULT_POLICY at the given threshold


def run_policy(model, tasks, max_steps: int, vocabulary: frozenset[str] | None = None) -> dict:
    """Every task through the loop with one model side; success, time and passes per task; with
    the task's ``vocabulary`` (``replies.task_vocabulary``), the final replies' faithfulness too."""
    rows, checks = [], []
    for task in tasks:
        r = run_agent(model, task.messages, task.world, task.tools, max_steps=max_steps)
        if vocabulary is not None:
            checks.append(None if r.reply is None else reply_check(r.reply, r.messages[:-1], vocabulary))
            if checks[-1] is not None:
                checks[-1]["reply"] = r.reply
        rows.append(
            {
                "kind": task.kind,
                "ok": task_success(task, r),
                "wall_s": r.wall_s,
                "steps": r.steps,
                "forward_passes": r.forward_passes or 0,
                "stopped": r.stopped,
            }
        )
    n = max(1, len(rows))
    kinds = {}
    for row in rows:
        kinds.setdefault(row["kind"], []).append(row["ok"])
    return {
        **({"replies": reply_figures(checks)} if vocabulary is not None else {}),
        "success": sum(r["ok"] for r in rows) / n,
        "s_per_task": sum(r["wall_s"] for r in rows) / n,
        "passes_per_task": sum(r["forward_passes"] for r in rows) / n,
        "model_calls_per_task": sum(r["steps"] for r in rows) / n,
        "step_limit": sum(r["stopped"] == "step_limit" for r in rows),
        "by_kind": {k: sum(v) / len(v) for k, v in sorted(kinds.items())},
        "tasks": rows,
    }


def local_model(llm, name: str, threshold: float | None, **request):
    """The agent's model side for one of ``DECODERS``, in this process (``request``: more fields
    of each request, ``grounded_reply``; unset: the loop's defaults)."""
    return LocalModel(llm, **decoder_request(name, threshold), **request)


def measure_http(url: str, n: int, threshold: float | None, max_steps: int, load, config=None) -> dict:
    """The tasks of ``measure_agent`` through a running ``clover serve`` at ``url`` with the OpenAI
    client (``OpenAIModel``, one kept-alive connection), after one untimed chat each → per
    decoder: success, seconds and passes per task. ``config``: the served model's (None: the
    bundled model's), whose form of values the tools are offered in."""
    tasks = operator_tasks(n, load=load)
    out = {}
    for name in DECODERS:
        # the same request as the in-process side, grounded replies and all
        model = OpenAIModel(
            url + "/v1", **decoder_request(name, threshold), grounded_reply=GROUNDED_REPLY, values=values_form(config)
        )
        model.chat([{"role": "user", "content": "hello"}], tasks[0].tools)  # warm-up, not timed
        r = run_policy(model, tasks, max_steps)
        out[name] = {k: r[k] for k in ("success", "s_per_task", "passes_per_task", "model_calls_per_task")}
    return out


def zone_demo(llm, n: int, threshold: float | None, max_steps: int) -> dict:
    """The zone demo of ``llm``'s own task (``Task.agent_demo``: ``n`` messages that each ask for one
    no-fly zone, through the loop one after another under the default policy then ``ar``) with
    ``llm.chat`` as the model: each policy's seconds over the whole run, how many zones reached
    the map right, and ar's seconds over the default's."""
    return model_task(llm.config, default=True).agent_demo(
        llm.chat, n, config=llm.config, threshold=threshold, max_steps=max_steps
    )


def measure_agent(
    llm, n: int, threshold: float | None, max_steps: int, split: str = "test", vocabulary=None
) -> tuple[dict, dict, object]:
    """The first ``n`` operator tasks of ``split`` of ``llm``'s own task through the loop under
    each of ``DECODERS`` (after one untimed warm-up chat each) → (the figures as the JSON holds
    them, each decoder's ``run_policy`` result, the task's ``eval_split``); with ``vocabulary``,
    the final replies' faithfulness too (``clover.bench.replies``)."""
    from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD  # deferred: loads torch, not for clover --help

    load = model_task(llm.config, default=True).eval_split  # the model's own task's test split and tools
    tasks = operator_tasks(n, split, load=load)
    w = llm.engine.model.lm_head.weight
    figures: dict = {"tasks": len(tasks), "kinds": {}, "threshold": threshold or DEFAULT_THRESHOLD}
    figures.update(max_steps=max_steps, device=str(w.device), dtype=str(w.dtype)[6:])
    for t in tasks:
        figures["kinds"][t.kind] = figures["kinds"].get(t.kind, 0) + 1
    per = {}
    for name in DECODERS:
        model = local_model(llm, name, threshold)
        model.chat([{"role": "user", "content": "hello"}], tasks[0].tools)  # warm-up, not timed
        per[name] = run_policy(model, tasks, max_steps, vocabulary)
    for policy, r in per.items():
        for k in (
            "success",
            "s_per_task",
            "passes_per_task",
            "model_calls_per_task",
            "step_limit",
            "by_kind",
            "replies",
        ):
            if k not in r:
                continue
            figures[f"{policy}_{k}"] = r[k]
    figures["default_policy"] = DEFAULT_POLICY
    figures["speedup"] = per["ar"]["s_per_task"] / max(1e-9, per["default"]["s_per_task"])
    figures["per_task"] = {p: r["tasks"] for p, r in per.items()}
    return figures, per, load
