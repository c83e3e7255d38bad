"""Decode speed against torch's thread count, idle and beside CPU-bound processes: the figures
behind the default ``--threads`` of the commands (``clover.commands.threads``).

Each case runs in a fresh process (OpenMP reads its wait policy once, at start): the bundled
model and the ``medium`` preset (random weights; speed only) decode the same prompts at batch 1
with 1, 2 and every core's threads, with OpenMP's default (spinning) and passive waiting, while
``--spinners`` other programs spin on the CPU (bounded by the run). ``--json`` writes the figures.

    python benchmarks/bench_threads.py --spinners 0,2 --json threads.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

SPIN = "import time\nend = time.time() + {s}\nwhile time.time() < end: pass\n"


def child(model: str, threads: int, max_tokens: int, prompts: int) -> dict:
    """One case in this process: tokens/s of batch-1 decoding after one warm-up request."""
    import torch

    from clover.api.loading import load_model_dir
    from clover.bench.decode import airspace_cases
    from clover.engine import Engine, SamplingParams

    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)
    if model == "bundled":
        m, tok = load_model_dir(None)
    else:
        from clover.airspace.tokenizer import build_default_tokenizer
        from clover.model import CloverForBlockDiffusion, preset

        tok = build_default_tokenizer()
        torch.manual_seed(0)
        cfg = preset(model, vocab_size=tok.vocab_size, mask_token_id=tok.mask_token_id, eos_token_id=tok.eos_token_id)
        m = CloverForBlockDiffusion(cfg).eval()
    cases = [c[0] for c in airspace_cases(tok, prompts)]
    engine = Engine(m, tok, max_batch_size=1)
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)  # the same tokens at every thread count
    engine.generate_batch(cases[:1], SamplingParams(max_tokens=8))  # warm-up
    t0 = time.perf_counter()
    outs = engine.generate_batch(cases, params)
    wall = time.perf_counter() - t0
    tokens = sum(len(o.token_ids) for o in outs)
    return {
        "tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "active_params": m.num_parameters()["active_params"],
    }


def run_case(model, threads, wait, args) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env.pop("OMP_WAIT_POLICY", None)
    if wait != "default":
        env["OMP_WAIT_POLICY"] = wait
    tokens = dict(kv.split("=") for kv in args.max_tokens.split(","))[model]
    cmd = [sys.executable, __file__, "--child", model, str(threads), tokens, str(args.prompts)]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.case_timeout)
    except subprocess.TimeoutExpired:  # slower than the limit: recorded as such, the sweep goes on
        return {"timed_out_s": args.case_timeout}
    if out.returncode:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _span(values: list[float], fmt: str) -> str:
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    return lo if lo == hi else f"{lo}-{hi}"


def by_setting(results: list[dict]) -> tuple[list[str], list[list[str]]]:
    """The cases as docs/benchmarks.md's "CPU threads" shows them: one row per model and number of
    spinners (the load's range over its cases), one column per thread count and OpenMP wait,
    tokens/s (the range over repeats; a case that timed out says so)."""
    settings = list(dict.fromkeys((r["threads"], r["wait"]) for r in results))
    rows = []
    for model, spinners in dict.fromkeys((r["model"], r["spinners"]) for r in results):
        mine = [r for r in results if (r["model"], r["spinners"]) == (model, spinners)]
        cells = []
        for t, w in settings:
            runs = [r for r in mine if (r["threads"], r["wait"]) == (t, w)]
            speeds = [r["tokens_per_s"] for r in runs if "tokens_per_s" in r]
            late = [r["timed_out_s"] for r in runs if "tokens_per_s" not in r]
            cell = ", ".join(filter(None, [speeds and _span(speeds, ".3g"), late and f"timed out ({max(late)} s)"]))
            cells.append(cell or "-")
        rows.append([model, str(spinners), _span([r["loadavg_1m"] for r in mine], ".1f"), *cells])
    names = [f"{t} thread" if t == 1 else f"{t} threads, {w} wait" for t, w in settings]
    return ["model", "spinners", "load (1 min)", *names], rows


def main() -> None:
    from clover.bench.results import Recorder

    rec = Recorder()  # the result file: this command line, its start, the tables printed
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="bundled,medium")
    p.add_argument("--threads", default=f"1,2,{os.cpu_count()}", help="thread counts (repeats dropped)")
    p.add_argument("--waits", default="default,PASSIVE", help="OMP_WAIT_POLICY values (default: unset)")
    p.add_argument("--spinners", default="0,2", help="CPU-spinning processes beside each case")
    p.add_argument("--max-tokens", default="bundled=64,medium=16", help="new tokens per prompt, per model")
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--case-timeout", type=int, default=240)
    p.add_argument("--repeat", type=int, default=1, help="runs of every case")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()
    threads = sorted({int(t) for t in args.threads.split(",")})
    results = []
    for spinners in [int(s) for s in args.spinners.split(",")]:
        # each spinner a program of its own (its own session): the scheduler shares the CPU between
        # sessions first, so spinners in the case's own session would favour more threads
        spin = [
            subprocess.Popen([sys.executable, "-c", SPIN.format(s=args.case_timeout * 8)], start_new_session=True)
            for _ in range(spinners)
        ]
        try:
            for rep in range(args.repeat):  # repeats interleaved, so a change of load touches every case
                for model in args.models.split(","):
                    for t in threads:
                        for wait in args.waits.split(",") if t > 1 else ["default"]:
                            load = os.getloadavg()[0]
                            r = run_case(model, t, wait, args)
                            r.update(model=model, threads=t, wait=wait, spinners=spinners, loadavg_1m=load, rep=rep)
                            results.append(r)
                            print(json.dumps(r), flush=True)
        finally:
            for s in spin:
                s.kill()
                s.wait()
    from clover.bench import print_table, write_json

    speed = lambda r: f"{r['tokens_per_s']:.3g}" if "tokens_per_s" in r else f"timed out ({r['timed_out_s']} s)"
    rows = [[r["model"], r["spinners"], r["threads"], r["wait"], f"{r['loadavg_1m']:.1f}", speed(r)] for r in results]
    print_table(
        rec,
        f"decode tokens/s at batch 1 by torch threads ({os.cpu_count()} CPUs)",
        ["model", "spinners", "threads", "OMP wait", "load (1 min)", "tokens/s"],
        rows,
    )
    print_table(rec, "the same, one row per model and spinners (tokens/s; a range over repeats)", *by_setting(results))
    write_json(rec, args.json, {"cpu_count": os.cpu_count(), "results": results})


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        m, t, n, k = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
        print(json.dumps(child(m, t, n, k)))
    else:
        main()
