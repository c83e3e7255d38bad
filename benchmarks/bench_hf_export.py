"""The exported Hugging Face folder against Clover: logits and greedy tokens (docs/hf-export.md).

python benchmarks/bench_hf_export.py [--n 20] [--threads 1] [--json out.json]

For the bundled model and the random ``tiny`` preset (``clover.bench.hf_export``), each exported
with ``export_hf`` and loaded by transformers in a fresh interpreter where clover cannot be
imported, in fp32 on the CPU: the largest relative logit error (max |hf − clover| / max |clover|)
over the logit cases the export tests use, and how many of N greedy generations under each policy
(``prefix``, ``threshold``, ``ar``; no grammar) equal Clover's engine token for token: the bundled
model on the first N test-split chats (128 new tokens at most), the tiny one on N random prompts
(16 new tokens at most). ``--threads``: Clover's side; the transformers side runs at one thread.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from clover.bench import print_table, set_threads, write_json
from clover.bench.hf_export import (
    MAX_TOKENS,
    TINY_TOKENS,
    chat_prompts,
    compare,
    export_bundled,
    export_tiny,
    tiny_prompts,
)
from clover.bench.results import Recorder
from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD

POLICIES = ["prefix", "threshold", "ar"]


def layout(config) -> str:
    """The layers as letters (G: gated delta net, A: attention) and the experts."""
    letters = config.layer_pattern
    return f"{letters}, {config.num_experts} experts" if config.num_experts else f"{letters}, dense"


def row(name: str, prompts: str, f: dict) -> list:
    """One model's row: its logit error, then per policy the generations equal to the engine's."""
    equal = [f"{f['policies'][p]['equal']} / {f['policies'][p]['n']} equal" for p in POLICIES]
    tokens = " / ".join(str(f["policies"][p]["tokens"]) for p in POLICIES)
    return [name, prompts, f"{f['max_rel_logit_err']:.1e}", *equal, tokens]


def column(policy: str) -> str:
    """A policy's column: its threshold where it has one, and whether it is the default."""
    name = f"{policy} τ {DEFAULT_THRESHOLD}" if policy in ("prefix", "threshold") else policy
    return name + " (default)" if policy == DEFAULT_POLICY else name


def main() -> None:
    rec = Recorder()  # the result file: this command line, its start, the tables printed
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20, help="chats (bundled) and random prompts (tiny) per policy")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args()
    set_threads(args.threads)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "bundled").mkdir()
        (root / "tiny").mkdir()
        bundled = export_bundled(root / "bundled")
        _, chats = chat_prompts(bundled["tok"], args.n)
        tiny = export_tiny(root / "tiny")
        figures = {
            "bundled": compare(bundled, chats, POLICIES, MAX_TOKENS, root / "bundled" / "run"),
            "tiny": compare(tiny, tiny_prompts(args.n), POLICIES, TINY_TOKENS, root / "tiny" / "run"),
        }
    figures["wall_s"] = time.perf_counter() - t0
    rows = [
        row(
            f"bundled ({layout(bundled['model'].config)})",
            f"{args.n} test chats, ≤ {MAX_TOKENS} new tokens",
            figures["bundled"],
        ),
        row(
            f"random tiny preset ({layout(tiny['model'].config)})",
            f"{args.n} random prompts, ≤ {TINY_TOKENS} new tokens",
            figures["tiny"],
        ),
    ]
    tokens = "new tokens (" + " / ".join(POLICIES) + ")"
    cols = ["model", "prompts", "max rel. logit error", *map(column, POLICIES), tokens]
    print_table(rec, "transformers on the exported folder vs Clover, fp32, greedy", cols, rows)
    print(f"wall time {figures['wall_s']:.0f} s")
    write_json(rec, args.json, figures)


if __name__ == "__main__":
    main()
