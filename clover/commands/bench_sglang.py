"""``clover bench sglang``: Clover served by SGLang against Clover's own engine, on the same
airspace test prompts, batch 1 and 16: tokens/s, tokens per forward, same committed tokens and
the largest relative logit error (docs/sglang.md). SGLang runs in a subprocess of its own
environment (``make sglang``); ``clover.bench.sglang.measure_sglang`` measures, this module keeps
the flags and the table."""

from __future__ import annotations

import argparse
import time

from clover.bench import BENCHMARKS, print_table, set_threads, write_json
from clover.commands.common import add_threads_arg, recorder
from clover.commands.threads import use_threads
from clover.data import default_model_dir


def add_sglang_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="Clover checkpoint directory (default: the bundled model)")
    p.add_argument(
        "--policy",
        choices=["prefix", "threshold", "ar", "fixed"],
        help="Clover's policy in both engines (SGLang: the matching Clover dLLM algorithm; default: Clover's default)",
    )
    p.add_argument("--prompts", type=int, default=32, help="airspace test prompts")
    p.add_argument("--max-tokens", type=int, default=64, help="new tokens per prompt")
    p.add_argument(
        "--logit-prompts",
        type=int,
        default=4,
        help="prompts whose every pass is checked against PyTorch (and their TPF counted)",
    )
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where both engines run")
    p.add_argument(
        "--tp-size",
        type=int,
        default=1,
        help="SGLang server's --tp-size: tensor-parallel ranks (GPUs; on a CPU, processes)",
    )
    add_threads_arg(p)
    p.add_argument("--python", help="SGLang's Python (default: .venv-sglang/bin/python, `make sglang`)")
    p.add_argument("--json", metavar="PATH", help="write the figures here")


def run_sglang(args) -> dict:
    """The model and its prompts loaded as the flags say, then ``clover.bench.sglang.measure_sglang``."""
    import torch  # deferred: torch, not for clover --help

    from clover.bench.sglang import measure_sglang  # deferred: loads torch, not for clover --help
    from clover.data.tokenizer import CloverTokenizer  # deferred: tokenizers, not for clover --help
    from clover.engine.policies import DEFAULT_POLICY  # deferred: loads torch, not for clover --help
    from clover.model.io import load_model, resolve_dir  # deferred: loads torch, not for clover --help

    args.policy = args.policy or DEFAULT_POLICY
    set_threads(args.threads)
    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    src = resolve_dir(args.model or default_model_dir())
    tok = CloverTokenizer.load(src)
    model = load_model(src, device, torch.float32).eval()
    use_threads(args.threads, model.config)
    return measure_sglang(
        model,
        tok,
        src,
        args.policy,
        device,
        args.prompts,
        args.max_tokens,
        args.logit_prompts,
        args.python,
        args.tp_size,
    )


def run(args) -> int:
    rec = recorder(args)
    t0 = time.time()
    fig = run_sglang(args)
    rows = [
        [name, b, f"{fig[key][b]['tokens_per_s']:.1f}", f"{fig[key][b].get('same_tokens', '-')}"]
        for name, key in (("Clover engine", "clover"), ("SGLang", "sglang"))
        for b in (1, 16)
    ]
    notes = [
        f"same tokens: {fig['same_tokens']}/{fig['prompts']} prompts; max relative logit error "
        f"{fig['max_rel_logit_err']:.2e}",
        f"TPF on the {args.logit_prompts} logit prompts: Clover {fig['clover_tpf']:.2f}, "
        f"SGLang {fig['sglang_tpf']:.2f} (SGLang runs one more forward per block: the commit)",
        f"SGLang server start {fig['sglang_start_s']:.0f} s; whole benchmark {time.time() - t0:.0f} s",
    ]
    tp = f", SGLang on {fig['tp_size']} tensor-parallel ranks" if fig["tp_size"] > 1 else ""
    print_table(
        rec,
        f"Clover vs SGLang ({fig['policy']}, {fig['device']}, {fig['max_tokens']} new tokens{tp})",
        ["engine", "batch", "tokens/s", "same tokens"],
        rows,
        notes,
    )
    write_json(rec, args.json, fig)
    return 0 if fig["same_tokens"] == fig["prompts"] else 1


BENCHMARKS["sglang"] = (
    "Clover served by SGLang (make sglang) vs Clover's engine: tokens/s at batch 1 and 16, same tokens, logit error",
    add_sglang_args,
    run,
)
