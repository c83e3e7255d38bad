"""What ``clover bench quant`` measures: weight-only int8 / int4 (clover/model/quant.py) against
full precision, for the bundled model and the ``medium`` preset (random weights): weight bytes,
decode tokens/s and, for the bundled model, tool-call exact match. The command keeps the flags
and the table. torch and the model are imported inside the functions (deferred on purpose:
listing the benchmarks needs neither).
"""

from __future__ import annotations

from clover.api.loading import load_model_dir
from clover.bench.decode import airspace_cases, run_engine
from clover.data.task import model_task

PRECISIONS = ("fp32", "int8", "int4")
BITS = {"int8": 8, "int4": 4}
# the targets the bench reports against (docs/quantization.md)
EXACT_MATCH_DROP = {"int8": 0.01, "int4": 0.02}
INT4_BYTES_RATIO = 0.3


def _bundled(precision: str, group4: int):
    from clover.model.quant import quantize_model  # deferred: loads torch, not for clover --help

    model, tok = load_model_dir(None, None, "cpu", "float32")
    if precision != "fp32":
        quantize_model(model, BITS[precision], group4 if precision == "int4" else None)
    return model.eval(), tok


def _medium(precision: str, tok, group4: int):
    import torch  # deferred: torch, not for clover --help

    from clover.model import CloverForBlockDiffusion, preset  # deferred: loads torch, not for clover --help
    from clover.model.quant import quantize_model  # deferred: loads torch, not for clover --help

    cfg = preset("medium", vocab_size=tok.vocab_size, mask_token_id=tok.mask_token_id, eos_token_id=None)
    torch.manual_seed(0)  # the same random weights for every precision
    model = CloverForBlockDiffusion(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(50)  # peaky, so the threshold policy commits several tokens per pass
    if precision != "fp32":
        quantize_model(model, BITS[precision], group4 if precision == "int4" else None)
    return model


def _speed(model, tok, cases, args) -> dict:
    from clover.engine import SamplingParams  # deferred: loads torch, not for clover --help

    run_engine(model, tok, cases[:1], SamplingParams(max_tokens=8), 1)  # warm-up
    out = {}
    for policy in ("ar", "threshold"):
        params = SamplingParams(max_tokens=args.max_tokens, policy=policy)  # the engine's threshold
        for b in (1, args.batch):
            group = cases[: args.speed_prompts] if b == 1 else cases[: args.batch]
            out[f"{policy}@{b}"] = run_engine(model, tok, group, params, b)["tokens_per_s"]
    return out


def measure_quant(args) -> tuple[dict, list[list]]:
    """Bytes, decode tokens/s and (bundled model) exact match per model and precision, as figures
    and table rows; ``args``: ``clover bench quant``'s settings (n, max_tokens, batch,
    speed_prompts, int4_group_size, no_medium)."""
    import torch  # deferred: torch, not for clover --help

    from clover.model.quant import weight_bytes  # deferred: loads torch, not for clover --help

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
                    cases = airspace_cases(tok, max(args.batch, args.speed_prompts), model.config)
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
                    evaluate = model_task(model.config, default=True).evaluate  # the model's own task
                    r = evaluate(model, tok, policy=policy, n=args.n, n_groups=0, progress=False)
                    em[policy] = r["exact_match"]
                figures["exact_match"][prec] = em
            ratio = figures["bytes"][which][prec] / figures["bytes"][which]["fp32"]
            rows.append(
                [
                    which,
                    prec,
                    f"{figures['bytes'][which][prec] / 1e6:.1f} ({ratio:.2f}x)",
                    *(speed[f"{p}@{b}"] for b in (1, args.batch) for p in ("ar", "threshold")),
                    *(f"{100 * em[p]:.1f}" if em else "-" for p in ("ar", "threshold")),
                ]
            )
            del model
        b16 = figures["bytes"][which]["bf16"]
        rows.append([which, "bf16", f"{b16 / 1e6:.1f} ({b16 / figures['bytes'][which]['fp32']:.2f}x)"] + ["-"] * 6)
    figures["targets"] = _targets(figures, args.batch)
    return figures, rows


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
