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
from clover.commands.common import add_device_args, device_setup

PRECISIONS = ("fp32", "int8", "int4")
BITS = {"int8": 8, "int4": 4}
# the targets the bench reports against (docs/quantization.md)
EXACT_MATCH_DROP = {"int8": 0.01, "int4": 0.02}
INT4_BYTES_RATIO = 0.3


def add_quant_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=50, help="tool-call test turns for exact match (bundled model)")
    p.add_argument("--max-tokens", type=int, default=64, help="new tokens per prompt in the speed runs")
    p.add_argument("--speed-prompts", type=int, default=4, help="prompts decoded one by one at batch 1")
    p.add_argument("--batch", type=int, default=16, help="the larger batch size (as many prompts)")
    p.add_argument("--int4-group-size", type=int, default=128, help="int4 group size (int8: one scale per row)")
    p.add_argument("--no-medium", action="store_true", help="skip the medium preset")
    p.add_argument("--threads", type=int, default=1)
    add_device_args(p, default="cpu")  # the int8/int4 kernels measured here are CPU ones
    p.add_argument("--json", metavar="PATH", help="write the figures here")


def _bundled(precision: str, group4: int):
    from clover.commands.common import load_model_and_tokenizer
    from clover.model.quant import quantize_model

    model, tok = load_model_and_tokenizer(None, None, "cpu", "float32")
    if precision != "fp32":
        quantize_model(model, BITS[precision], group4 if precision == "int4" else None)
    return model.eval(), tok


def _medium(precision: str, tok, group4: int):
    import torch

    from clover.model import CloverForBlockDiffusion, preset
    from clover.model.quant import quantize_model

    cfg = preset("medium", vocab_size=tok.vocab_size, mask_token_id=tok.mask_token_id, eos_token_id=None)
    torch.manual_seed(0)  # the same random weights for every precision
    model = CloverForBlockDiffusion(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(50)  # peaky, so the threshold policy commits several tokens per pass
    if precision != "fp32":
        quantize_model(model, BITS[precision], group4 if precision == "int4" else None)
    return model


def _speed(model, tok, cases, args) -> dict:
    from clover.bench.decode import run_engine
    from clover.engine import SamplingParams

    run_engine(model, tok, cases[:1], SamplingParams(max_tokens=8), 1)  # warm-up
    out = {}
    for policy in ("ar", "threshold"):
        params = SamplingParams(max_tokens=args.max_tokens, policy=policy)  # the engine's threshold
        for b in (1, args.batch):
            group = cases[: args.speed_prompts] if b == 1 else cases[: args.batch]
            out[f"{policy}@{b}"] = run_engine(model, tok, group, params, b)["tokens_per_s"]
    return out


def run_quant(args: argparse.Namespace) -> int:
    import torch

    from clover.airspace.evaluate import evaluate_airspace
    from clover.bench.decode import airspace_cases
    from clover.model.quant import weight_bytes

    t_start = time.perf_counter()
    device, _ = device_setup(args, "clover bench quant")
    if device.type != "cpu":
        raise SystemExit(f"clover bench quant: --device {args.device}: the int8/int4 kernels it measures run on "
                         "the CPU only; use --device cpu")  # fmt: skip
    if args.dtype not in ("auto", "float32"):
        raise SystemExit(f"clover bench quant: --dtype {args.dtype}: it compares int8/int4 with float32 weights "
                         "(the bf16 row is computed from sizes); use --dtype float32 or auto")  # fmt: skip
    set_threads(args.threads)
    figures: dict = {"bytes": {}, "tokens_per_s": {}, "exact_match": {}, "threads": torch.get_num_threads()}
    rows = []
    models = ["bundled"] + ([] if args.no_medium else ["medium"])
    tok = cases = None
    for which in models:
        for k in ("bytes", "tokens_per_s"):
            figures[k][which] = {}
        for prec in PRECISIONS:
            if which == "bundled":
                model, tok = _bundled(prec, args.int4_group_size)
                if cases is None:
                    cases = airspace_cases(tok, max(args.batch, args.speed_prompts))
            else:
                model = _medium(prec, tok, args.int4_group_size)
            cfg = model.config.replace(quantization=None)
            if prec == "fp32":
                figures["bytes"][which]["fp32"] = weight_bytes(cfg)["total"]
                figures["bytes"][which]["bf16"] = weight_bytes(cfg, float_bytes=2)["total"]
            else:
                q = model.config.quantization
                figures["bytes"][which][prec] = weight_bytes(cfg, q["bits"], q["group_size"])["total"]
            speed = _speed(model, tok, cases, args)
            figures["tokens_per_s"][which][prec] = speed
            em = {}
            if which == "bundled":
                for policy in ("ar", "threshold"):
                    r = evaluate_airspace(model, tok, policy=policy, n=args.n, n_groups=0, progress=False)
                    em[policy] = r["exact_match"]
                figures["exact_match"][prec] = em
            ratio = figures["bytes"][which][prec] / figures["bytes"][which]["fp32"]
            rows.append([which, prec, f"{figures['bytes'][which][prec] / 1e6:.1f} ({ratio:.2f}x)",
                         *(speed[f"{p}@{b}"] for b in (1, args.batch) for p in ("ar", "threshold")),
                         *(f"{100 * em[p]:.1f}" if em else "-" for p in ("ar", "threshold"))])  # fmt: skip
            del model
        b16 = figures["bytes"][which]["bf16"]
        rows.append([which, "bf16", f"{b16 / 1e6:.1f} ({b16 / figures['bytes'][which]['fp32']:.2f}x)"]
                    + ["-"] * 6)  # fmt: skip
    figures["targets"] = targets = _targets(figures, args.batch)
    notes = [
        f"int8: symmetric, one scale per row; int4: asymmetric, groups of {args.int4_group_size}; embeddings, head, "
        "norms, router, gates at fp32 (bytes as clover quantize writes them; bf16 = every weight in bf16)",
        f"tokens/s: {args.max_tokens} new tokens at most; batch 1 = {args.speed_prompts} prompts one by one, "
        f"batch {args.batch} = {args.batch} prompts together; medium = random weights (speed only)",
        f"exact match: {args.n} tool-call turns of the test split, bundled model",
        *(f"target {k}: {'met' if v['met'] else 'NOT met'} ({v['detail']})" for k, v in targets.items()),
        f"took {time.perf_counter() - t_start:.0f} s",
    ]
    cols = ["model", "precision", "weights MB", "ar b1", "thr b1", f"ar b{args.batch}", f"thr b{args.batch}",
            "exact ar %", "exact thr %"]  # fmt: skip
    print_table(f"clover bench quant ({torch.get_num_threads()} thread(s), tokens/s)", cols, rows, notes)
    write_json(args.json, figures)
    return 0


def _targets(f: dict, batch: int) -> dict:
    out = {}
    em = f["exact_match"]
    for prec, drop in EXACT_MATCH_DROP.items():
        if prec in em and "fp32" in em:
            worst = max(em["fp32"][p] - em[prec][p] for p in em[prec])
            out[f"{prec} exact match within {100 * drop:.0f} pt"] = {
                "met": worst <= drop + 1e-9,
                "detail": f"largest drop {100 * worst:.1f} pt over ar and threshold",
            }
    for which, b in f["bytes"].items():
        r = b["int4"] / b["fp32"]
        out[f"{which} int4 bytes <= {INT4_BYTES_RATIO}x fp32"] = {"met": r <= INT4_BYTES_RATIO, "detail": f"{r:.3f}x"}
    if "medium" in f["tokens_per_s"]:
        t = f["tokens_per_s"]["medium"]
        ok = all(t["int8"][f"{p}@1"] >= t["fp32"][f"{p}@1"] for p in ("ar", "threshold"))
        out["medium int8 batch-1 decode >= fp32"] = {
            "met": ok,
            "detail": ", ".join(
                f"{p} {t['int8'][f'{p}@1']:.1f} vs {t['fp32'][f'{p}@1']:.1f}" for p in ("ar", "threshold")
            ),
        }
    return out


BENCHMARKS["quant"] = ("weight-only int8/int4 vs fp32: bytes, decode tokens/s, exact match", add_quant_args, run_quant)
