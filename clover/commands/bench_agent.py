"""``clover bench agent``: operator tasks of the test split through the whole agent loop, ``ar``
against the default policy: task success by the world's state, seconds and model passes per task."""

from __future__ import annotations

import argparse

from clover.bench import BENCHMARKS, print_table, set_threads, write_json
from clover.commands.common import add_device_args, add_threads_arg, device_setup
from clover.commands.threads import apply_threads

DECODERS = ("ar", "default")  # the default: clover.engine.policies.DEFAULT_POLICY at --threshold


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=50, help="operator tasks of the test split (default 50)")
    p.add_argument("--model", help="Clover checkpoint directory (default: the bundled model)")
    p.add_argument("--threshold", type=float, help="the default policy's threshold (default: its own)")
    p.add_argument("--max-steps", type=int, default=4, help="model calls per task at most (default 4)")
    p.add_argument(
        "--demo",
        type=int,
        default=20,
        help="messages that each ask for one no-fly zone, run one after another and timed whole (default 20; 0: none)",
    )
    add_threads_arg(p)
    add_device_args(p)
    p.add_argument("--json", metavar="PATH", help="write the figures here")


def run_policy(model, tasks, max_steps: int) -> dict:
    """Every task through the loop with one model side; success, time and passes per task."""
    from clover.airspace.loop import run_agent
    from clover.airspace.tasks import task_success

    rows = []
    for task in tasks:
        r = run_agent(model, task.messages, task.world, task.tools, max_steps=max_steps)
        rows.append({"kind": task.kind, "ok": task_success(task, r), "wall_s": r.wall_s, "steps": r.steps,
                     "forward_passes": r.forward_passes or 0, "stopped": r.stopped})  # fmt: skip
    n = max(1, len(rows))
    kinds = {}
    for row in rows:
        kinds.setdefault(row["kind"], []).append(row["ok"])
    return {
        "success": sum(r["ok"] for r in rows) / n,
        "s_per_task": sum(r["wall_s"] for r in rows) / n,
        "passes_per_task": sum(r["forward_passes"] for r in rows) / n,
        "model_calls_per_task": sum(r["steps"] for r in rows) / n,
        "step_limit": sum(r["stopped"] == "step_limit" for r in rows),
        "by_kind": {k: sum(v) / len(v) for k, v in sorted(kinds.items())},
        "tasks": rows,
    }


def run(args: argparse.Namespace) -> int:
    from clover.airspace.tasks import operator_tasks
    from clover.api.llm import LLM
    from clover.data.task import model_task
    from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD

    if args.n < 1:
        raise SystemExit("clover bench agent: --n must be >= 1")
    device_setup(args, "clover bench agent")
    set_threads(args.threads)
    llm = LLM(args.model, threads=args.threads, device=args.device, dtype=args.dtype, compile=args.compile)
    args.threads = apply_threads(llm.engine.model, args.threads)
    load = model_task(llm.config, default=True).eval_split  # the model's own task's test split and tools
    tasks = operator_tasks(args.n, load=load)
    figures: dict = {"tasks": len(tasks), "kinds": {}, "threshold": args.threshold or DEFAULT_THRESHOLD,
                     "max_steps": args.max_steps,
                     "threads": args.threads, "model": args.model or "bundled",
                     "device": str(llm.engine.model.lm_head.weight.device),
                     "dtype": str(llm.engine.model.lm_head.weight.dtype)[6:]}  # fmt: skip
    for t in tasks:
        figures["kinds"][t.kind] = figures["kinds"].get(t.kind, 0) + 1
    per = {}
    for name in DECODERS:
        model = _local_model(llm, name, args.threshold)
        model.chat([{"role": "user", "content": "hello"}], tasks[0].tools)  # warm-up, not timed
        per[name] = run_policy(model, tasks, args.max_steps)
    for policy, r in per.items():
        figures[f"{policy}_success"] = r["success"]
        figures[f"{policy}_s_per_task"] = r["s_per_task"]
        figures[f"{policy}_passes_per_task"] = r["passes_per_task"]
        figures[f"{policy}_model_calls_per_task"] = r["model_calls_per_task"]
        figures[f"{policy}_step_limit"] = r["step_limit"]
        figures[f"{policy}_by_kind"] = r["by_kind"]
    figures["default_policy"] = DEFAULT_POLICY
    figures["speedup"] = per["ar"]["s_per_task"] / max(1e-9, per["default"]["s_per_task"])
    figures["per_task"] = {p: r["tasks"] for p, r in per.items()}
    if args.demo:
        figures["demo"] = _zone_demo(llm, args, load)
    kinds = sorted(figures["kinds"])
    rows = [
        [p if p == "ar" else f"default: {DEFAULT_POLICY} τ {figures['threshold']:g}", f"{100 * r['success']:.1f} %",
         *[f"{100 * r['by_kind'].get(k, 0):.0f} %" for k in kinds], f"{r['s_per_task']:.3f}",
         f"{r['passes_per_task']:.1f}", f"{r['model_calls_per_task']:.2f}",
         f"{per['ar']['s_per_task'] / max(1e-9, r['s_per_task']):.2f}x"]
        for p, r in per.items()
    ]  # fmt: skip
    print_table(
        f"agent: {len(tasks)} operator tasks of the test split through the loop ({args.threads} thread)",
        ["policy", "task success", *[f"{k} ({figures['kinds'][k]})" for k in kinds], "s / task", "passes / task",
         "model calls / task", "speed-up"],
        rows,
        ["success: the world after the task equals the world the gold calls make from the same start "
         "(and every drone the gold calls query was queried)",
         "s / task: operator message in to final reply out, tools included; passes: model forward passes"],
    )  # fmt: skip
    write_json(args.json, figures)
    return 0


def _local_model(llm, name: str, threshold: float | None):
    """The agent's model side for one of ``DECODERS``: ``ar``, or the default policy at
    ``threshold`` (None: the default threshold)."""
    from clover.airspace.loop import LocalModel
    from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD

    if name == "ar":
        return LocalModel(llm, policy="ar")
    return LocalModel(llm, policy=DEFAULT_POLICY, threshold=threshold or DEFAULT_THRESHOLD)


def _zone_demo(llm, args: argparse.Namespace, load) -> dict:
    """``--demo`` messages, each asking for one no-fly zone, through the loop one after another
    under ``ar`` and the default: the whole run's seconds, and how many zones reached the map right.
    ``load``: the model's own task's ``eval_split``."""
    from clover.airspace.tasks import zone_tasks

    tasks = zone_tasks(args.demo, load=load)
    out: dict = {"messages": len(tasks)}
    for name in DECODERS:
        r = run_policy(_local_model(llm, name, args.threshold), tasks, args.max_steps)
        out[name] = {"seconds": r["s_per_task"] * len(tasks), "zones_right": round(r["success"] * len(tasks))}
    out["speedup"] = out["ar"]["seconds"] / max(1e-9, out["default"]["seconds"])
    rows = [[name, f"{d['seconds']:.2f}", f"{d['zones_right']} of {len(tasks)}"]
            for name, d in out.items() if isinstance(d, dict)]  # fmt: skip
    print_table(f"demo: {len(tasks)} airspace messages, each a no-fly zone on the map, one after another",
                ["policy", "seconds, all messages", "zones right"], rows,
                [f"speed-up of the default over ar: {out['speedup']:.2f}x"])  # fmt: skip
    return out


BENCHMARKS["agent"] = ("operator tasks through the agent loop: task success by world state, s and passes per task",
                       add_args, run)  # fmt: skip
