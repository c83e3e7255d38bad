"""``clover bench agent``: operator tasks of the test split through the whole agent loop, ``ar``
against the default policy: task success by the world's state, seconds and model passes per task.
This module keeps the flags and the tables; ``clover.bench.agent`` measures."""

from __future__ import annotations

import argparse

from clover.bench import BENCHMARKS, print_table, set_threads, write_json
from clover.bench.agent import measure_agent, measure_http, zone_demo
from clover.bench.results import Recorder
from clover.bench.served import served
from clover.commands.common import add_device_args, add_threads_arg, device_setup, recorder
from clover.commands.threads import apply_threads


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=50, help="operator tasks of the test split (default 50)")
    p.add_argument("--model", help="Clover checkpoint directory (default: the bundled model)")
    p.add_argument("--threshold", type=float, help="the default policy's threshold (default: its own)")
    p.add_argument("--max-steps", type=int, default=4, help="model calls per task at most (default 4)")
    p.add_argument(
        "--demo",
        type=int,
        default=20,
        help="messages that each ask for one no-fly zone, run one after another under the default policy then ar "
        "and timed whole, as the playground's demo button runs them (default 20; 0: none)",
    )
    p.add_argument(
        "--http",
        action="store_true",
        help="also run the tasks through clover serve (started on loopback, same model and threads) with the "
        "OpenAI client, and compare its seconds per task with this process's",
    )
    add_threads_arg(p)
    add_device_args(p)
    p.add_argument("--json", metavar="PATH", help="write the figures here")


def run(args: argparse.Namespace) -> int:
    from clover.api.llm import LLM  # deferred: loads torch, not for clover --help
    from clover.bench.replies import task_vocabulary  # deferred: the task and the engine
    from clover.data.task import model_task
    from clover.engine.policies import DEFAULT_POLICY  # deferred: loads torch, not for clover --help

    rec = recorder(args)
    if args.n < 1:
        raise SystemExit("clover bench agent: --n must be >= 1")
    device_setup(args, "clover bench agent")
    set_threads(args.threads)
    llm = LLM(args.model, threads=args.threads, device=args.device, dtype=args.dtype, compile=args.compile)
    args.threads = apply_threads(llm.engine.model, args.threads)
    vocabulary = task_vocabulary(model_task(llm.config, default=True))  # replies' words are judged against it
    figures, per, load = measure_agent(llm, args.n, args.threshold, args.max_steps, vocabulary=vocabulary)
    figures.update(threads=args.threads, model=args.model or "bundled")
    if args.demo:
        figures["demo"] = zone_demo(llm, args.demo, args.threshold, args.max_steps)
        _print_demo(rec, figures["demo"])
    if args.http:
        flags = ["--log-level", "warning", "--device", args.device, "--dtype", args.dtype]
        flags += ["--compile" if args.compile else "--no-compile", *(["--model", args.model] if args.model else [])]
        with served(flags, args.threads, "clover bench agent") as url:
            figures["http"] = measure_http(url, args.n, args.threshold, args.max_steps, load, llm.config)
    kinds = sorted(figures["kinds"])
    rows = [
        [
            p if p == "ar" else f"default: {DEFAULT_POLICY} τ {figures['threshold']:g}",
            f"{100 * r['success']:.1f} %",
            *[f"{100 * r['by_kind'].get(k, 0):.0f} %" for k in kinds],
            f"{r['s_per_task']:.3f}",
            f"{r['passes_per_task']:.1f}",
            f"{r['model_calls_per_task']:.2f}",
            f"{per['ar']['s_per_task'] / max(1e-9, r['s_per_task']):.2f}x",
            f"{100 * r['replies']['faithful']:.0f} % of {r['replies']['replies']}",
        ]
        for p, r in per.items()
    ]
    print_table(
        rec,
        f"agent: {figures['tasks']} operator tasks of the test split through the loop ({args.threads} thread)",
        [
            "policy",
            "task success",
            *[f"{k} ({figures['kinds'][k]})" for k in kinds],
            "s / task",
            "passes / task",
            "model calls / task",
            "speed-up",
            "replies faithful",
        ],
        rows,
        [
            "success: the world after the task equals the world the gold calls make from the same start "
            "(and every drone the gold calls query was queried)",
            "s / task: operator message in to final reply out, tools included; passes: model forward passes",
            "replies faithful: final replies whose numbers and ids are the user's or the tools' as written, and "
            "whose words are all well formed (docs/benchmarks.md, Replies)",
        ],
    )
    if args.http:
        _print_http(rec, figures, per)
    write_json(rec, args.json, figures)
    return 0


def _print_http(recorder: Recorder, figures: dict, per: dict) -> None:
    rows = []
    for p, r in figures["http"].items():
        r["vs_in_process"] = r["s_per_task"] / max(1e-9, per[p]["s_per_task"])
        row = [p, f"{per[p]['s_per_task']:.3f}", f"{r['s_per_task']:.3f}", f"{r['vs_in_process']:.3f}"]
        rows.append([*row, f"{100 * per[p]['success']:.1f} %", f"{100 * r['success']:.1f} %"])
    print_table(
        recorder,
        f"agent: the same {figures['tasks']} tasks in process and through clover serve (HTTP, OpenAI client)",
        ["policy", "in process s / task", "HTTP s / task", "HTTP / in process", "success in process", "success HTTP"],
        rows,
        ["HTTP: clover serve on loopback in another process, same model and threads; one kept-alive connection"],
    )


def _print_demo(recorder: Recorder, out: dict) -> None:
    n = out["messages"]
    rows = [
        [name, f"{d['seconds']:.2f}", f"{d['zones_right']} of {n}"] for name, d in out.items() if isinstance(d, dict)
    ]
    print_table(
        recorder,
        f"demo: {n} airspace messages, each a no-fly zone on the map, one after another",
        ["policy", "seconds, all messages", "zones right"],
        rows,
        [f"speed-up of the default over ar: {out['speedup']:.2f}x"],
    )


BENCHMARKS["agent"] = (
    "operator tasks through the agent loop: task success by world state, s and passes per task",
    add_args,
    run,
)
