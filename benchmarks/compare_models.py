"""Models of either airspace task side by side on the airspace validation chats and hand-written
messages (``clover.airspace.compare``): exact match overall and by kind, tokens per pass.

    python benchmarks/compare_models.py --model new=RUN/export --model bundled= \
        --cases benchmarks/newcomer_messages.jsonl --cases benchmarks/operator_messages.jsonl --json OUT.json

``--model NAME=PATH`` (an empty PATH is the bundled model); the first model is the one to judge.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # clover from this tree when run as a script


def main(argv: list[str] | None = None) -> int:
    from clover.bench.results import Recorder, markdown_table

    rec = Recorder()  # the result file: this command line, its start, the tables printed
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", action="append", required=True, help="NAME=PATH (PATH empty: the bundled model)")
    p.add_argument("--n", type=int, default=200, help="validation chats")
    p.add_argument("--cases", action="append", default=[], help="hand-written messages (JSONL), repeatable")
    p.add_argument("--case-n", type=int, default=None, help="only the first N messages of each cases file")
    p.add_argument("--policy", default="ar", help="a policy name, or default (the engine's default policy)")
    p.add_argument("--block-size", type=int, default=None, help="decode at this block size (default: the model's)")
    p.add_argument("--device", default=None)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", default=None, help="write the figures here")
    a = p.parse_args(argv)
    from clover.airspace import compare
    from clover.bench import write_json
    from clover.engine.policies import DEFAULT_POLICY

    policy = DEFAULT_POLICY if a.policy == "default" else a.policy

    models = {}
    for m in a.model:
        name, _, path = m.partition("=")
        models[name] = path or None
    t0 = time.perf_counter()
    res = compare.compare(models, a.n, a.cases, policy, a.device, a.threads, a.case_n, a.block_size)
    res["_settings"] = {
        "n": a.n,
        "cases": a.cases,
        "case_n": a.case_n,
        "policy": a.policy,
        "block_size": a.block_size,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    columns, rows = table(res)
    print(markdown_table(columns, rows))
    rec.record("models side by side: exact match per set, tokens per pass and per second on validation", columns, rows)
    write_json(rec, a.json, res)  # a result file (clover.bench.results): the command, commit, machine, this table
    return 0


def table(res: dict) -> tuple[list[str], list[list[str]]]:
    """One row per model: exact match on each set, then tokens per pass and per second on validation."""
    names = [k for k in res if not k.startswith("_")]
    sets = [k for k in res[names[0]] if k != "task"]
    rows = []
    for m in names:
        cells = [f"{100 * res[m][s]['exact']:.1f} % of {res[m][s]['n']}" for s in sets]
        v = res[m]["validation"]
        rows.append([m, res[m]["task"], *cells, f"{v['tpf']:.2f}", f"{v['tokens_per_s']:.0f}"])
    return ["model", "task", *sets, "TPF", "tokens/s"], rows


if __name__ == "__main__":
    raise SystemExit(main())
