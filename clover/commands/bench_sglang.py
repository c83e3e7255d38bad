"""``clover bench sglang``: Clover served by SGLang against Clover's own engine, on the same
airspace test prompts, batch 1 and 16: tokens/s, tokens per forward, same committed tokens and
the largest relative logit error (docs/sglang.md). SGLang runs in a subprocess of its own
environment (``make sglang``); clover/bench/sglang.py measures, this module keeps the flags and
the table."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from clover.bench import BENCHMARKS, print_table, set_threads, write_json
from clover.commands.common import add_threads_arg
from clover.commands.threads import use_threads


def add_sglang_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="Clover checkpoint directory (default: the bundled model)")
    p.add_argument("--policy", choices=["prefix", "threshold", "ar", "fixed"],
                   help="Clover's policy in both engines (SGLang: the matching Clover dLLM algorithm; "
                   "default: Clover's default)")  # fmt: skip
    p.add_argument("--prompts", type=int, default=32, help="airspace test prompts")
    p.add_argument("--max-tokens", type=int, default=64, help="new tokens per prompt")
    p.add_argument("--logit-prompts", type=int, default=4,
                   help="prompts whose every pass is checked against PyTorch (and their TPF counted)")  # fmt: skip
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where both engines run")
    add_threads_arg(p)
    p.add_argument("--python", help="SGLang's Python (default: .venv-sglang/bin/python, `make sglang`)")
    p.add_argument("--json", metavar="PATH", help="write the figures here")


def run_sglang(args) -> dict:
    import torch

    from clover.bench.decode import airspace_cases, run_engine
    from clover.bench.sglang import SGLangServer, logit_error
    from clover.data.tokenizer import CloverTokenizer
    from clover.engine import SamplingParams
    from clover.engine.policies import DEFAULT_POLICY
    from clover.export.hf_folder import export_hf
    from clover.model.io import load_model, resolve_dir

    args.policy = args.policy or DEFAULT_POLICY
    set_threads(args.threads)
    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    src = resolve_dir(args.model or Path(__file__).resolve().parents[1] / "assets" / "default")
    tok = CloverTokenizer.load(src)
    model = load_model(src, device, torch.float32).eval()
    use_threads(args.threads, model.config)
    cases = [(ids, gold) for ids, gold in airspace_cases(tok, args.prompts, model.config)]
    prompts = [ids for ids, _ in cases]
    params = SamplingParams(max_tokens=args.max_tokens, policy=args.policy)
    fig: dict = {"policy": args.policy, "prompts": len(prompts), "max_tokens": args.max_tokens, "device": device,
                 "clover": {}, "sglang": {}}  # fmt: skip
    ref = None
    for batch in (1, 16):
        r = run_engine(model, tok, cases, params, batch)
        ref = r["ids"]
        fig["clover"][batch] = {"tokens_per_s": r["tokens_per_s"], "tpf": r["tpf"], "tokens": r["tokens"]}
    with tempfile.TemporaryDirectory() as work:
        hf = Path(work) / "hf"
        export_hf(src, hf)
        passes = Path(work) / "passes"
        with SGLangServer(hf, args.policy, "cpu" if device == "cpu" else "cuda", logits_dir=passes,
                          log=Path(work) / "server.log", python=args.python) as server:  # fmt: skip
            fig["sglang_start_s"] = server.start_s
            server.generate(prompts[:2], args.max_tokens)  # warm-up
            for batch in (1, 16):
                outs, wall = server.generate(prompts, args.max_tokens, concurrency=batch)
                tokens = sum(len(o) for o in outs)
                fig["sglang"][batch] = {"tokens_per_s": tokens / wall, "tokens": tokens,
                                        "same_tokens": sum(a == b for a, b in zip(outs, ref))}  # fmt: skip
            lf = logit_error(server, passes, model.cpu() if device != "cpu" else model,
                             prompts[: args.logit_prompts], args.max_tokens)  # fmt: skip
    fig["max_rel_logit_err"] = lf["max_rel_logit_err"]
    fig["sglang_tpf"] = lf["tokens"] / lf["passes"] if lf["passes"] else 0.0  # on the logit prompts
    fig["clover_tpf"] = run_engine(model, tok, cases[: args.logit_prompts], params, 1)["tpf"]  # the same prompts
    fig["same_tokens"] = min(fig["sglang"][b]["same_tokens"] for b in (1, 16))
    fig["sglang_tokens_per_s"] = fig["sglang"][16]["tokens_per_s"]
    fig["clover_tokens_per_s"] = fig["clover"][16]["tokens_per_s"]
    return fig


def run(args) -> int:
    t0 = time.time()
    fig = run_sglang(args)
    rows = [[name, b, f"{fig[key][b]['tokens_per_s']:.1f}", f"{fig[key][b].get('same_tokens', '-')}"]
            for name, key in (("Clover engine", "clover"), ("SGLang", "sglang")) for b in (1, 16)]  # fmt: skip
    notes = [
        f"same tokens: {fig['same_tokens']}/{fig['prompts']} prompts; max relative logit error "
        f"{fig['max_rel_logit_err']:.2e}",
        f"TPF on the {args.logit_prompts} logit prompts: Clover {fig['clover_tpf']:.2f}, "
        f"SGLang {fig['sglang_tpf']:.2f} (SGLang runs one more forward per block: the commit)",
        f"SGLang server start {fig['sglang_start_s']:.0f} s; whole benchmark {time.time() - t0:.0f} s",
    ]
    print_table(f"Clover vs SGLang ({fig['policy']}, {fig['device']}, {fig['max_tokens']} new tokens)",
                ["engine", "batch", "tokens/s", "same tokens"], rows, notes)  # fmt: skip
    write_json(args.json, fig)
    return 0 if fig["same_tokens"] == fig["prompts"] else 1


BENCHMARKS["sglang"] = ("Clover served by SGLang (make sglang) vs Clover's engine: tokens/s at batch 1 and 16, "
                        "same tokens, logit error", add_sglang_args, run)  # fmt: skip
