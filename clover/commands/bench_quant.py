"""``clover bench quant``: weight-only int8 / int4 (clover/model/quant.py) against full precision.

For the bundled model and for the ``medium`` preset (random weights, where the matmuls dominate a
CPU decode step): weight bytes per precision (fp32, bf16, int8, int4), decode tokens/s with
``ar`` and ``threshold`` at batch 1 and 16, and for the bundled model tool-call exact match on the
test split (``clover.airspace.evaluate.evaluate_airspace``, ``--n`` turns) per precision and policy.
"""

from __future__ import annotations

import argparse
import time

from clover.bench import BENCHMARKS, print_table, set_threads, write_json
from clover.bench.quant import measure_quant
from clover.commands.common import add_device_args, add_threads_arg, device_setup, recorder
from clover.commands.threads import use_threads
from clover.data import default_model_dir


def add_quant_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=50, help="tool-call test turns for exact match (bundled model)")
    p.add_argument("--max-tokens", type=int, default=64, help="new tokens per prompt in the speed runs")
    p.add_argument("--speed-prompts", type=int, default=4, help="prompts decoded one by one at batch 1")
    p.add_argument("--batch", type=int, default=16, help="the larger batch size (as many prompts)")
    p.add_argument("--int4-group-size", type=int, default=128, help="int4 group size (int8: one scale per row)")
    p.add_argument("--no-medium", action="store_true", help="skip the medium preset")
    add_threads_arg(p)
    add_device_args(p, default="cpu", compile=False)  # the int8/int4 kernels measured here are CPU ones
    p.add_argument("--json", metavar="PATH", help="write the figures here")


def run_quant(args: argparse.Namespace) -> int:
    import torch  # deferred: torch, not for clover --help

    rec = recorder(args)
    t_start = time.perf_counter()
    device, _ = device_setup(args, "clover bench quant")
    if device.type != "cpu":
        raise SystemExit(
            f"clover bench quant: --device {args.device}: the int8/int4 kernels it measures run on "
            "the CPU only; use --device cpu"
        )
    if args.dtype not in ("auto", "float32"):
        raise SystemExit(
            f"clover bench quant: --dtype {args.dtype}: it compares int8/int4 with float32 weights "
            "(the bf16 row is computed from sizes); use --dtype float32 or auto"
        )
    set_threads(args.threads)
    from clover.model import preset  # deferred: loads torch, not for clover --help
    from clover.model.io import load_config  # deferred: loads torch, not for clover --help

    # one count for every row: the rule's for the largest model measured
    use_threads(args.threads, load_config(default_model_dir()) if args.no_medium else preset("medium"))
    figures, rows = measure_quant(args)
    targets = figures["targets"]
    notes = [
        f"int8: symmetric, one scale per row; int4: asymmetric, groups of {args.int4_group_size}; embeddings, head, "
        "norms, router, gates at fp32 (bytes as clover quantize writes them; bf16 = every weight in bf16)",
        f"tokens/s: {args.max_tokens} new tokens at most; batch 1 = {args.speed_prompts} prompts one by one, "
        f"batch {args.batch} = {args.batch} prompts together; medium = random weights (speed only)",
        f"exact match: {args.n} tool-call turns of the test split, bundled model",
        *(f"target {k}: {'met' if v['met'] else 'NOT met'} ({v['detail']})" for k, v in targets.items()),
        f"took {time.perf_counter() - t_start:.0f} s",
    ]
    cols = [
        "model",
        "precision",
        "weights MB",
        "ar b1",
        "thr b1",
        f"ar b{args.batch}",
        f"thr b{args.batch}",
        "exact ar %",
        "exact thr %",
    ]
    print_table(rec, f"clover bench quant ({torch.get_num_threads()} thread(s), tokens/s)", cols, rows, notes)
    write_json(rec, args.json, figures)
    return 0


BENCHMARKS["quant"] = ("weight-only int8/int4 vs fp32: bytes, decode tokens/s, exact match", add_quant_args, run_quant)
