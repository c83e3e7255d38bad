"""``clover bench decode`` and ``clover bench context`` (in ``bench_context.py``): their flags and
tables; what they measure is ``clover.bench.decode`` and ``clover.bench.context``.

decode: on the airspace test prompts, the same model decoded with its default policy (the
headline), ``ar`` (one position per pass of a whole block), ``threshold`` at several thresholds,
``prefix`` and ``edit``: exact match of the tool calls, tokens per forward (TPF), tokens/s,
speed-up vs ``ar``; plus a transformers ``Qwen3_5MoeForCausalLM`` of the same shape (random
weights) run with ``generate()``: a real one-token-per-step decoder with a KV cache.
Quality is batch-invariant, so it is measured once at the largest batch size; speed at each.
After the full table, the two summaries the docs quote (``speed_tables``): README.md's decoders
at the smallest and largest batch, and docs/benchmarks.md's one row per batch size.

"""

from __future__ import annotations

import argparse
import dataclasses
import time

from clover.bench import BENCHMARKS, print_table, set_threads, write_json
from clover.bench.decode import (
    DEFAULT_NAME,
    airspace_cases,
    compiled_figures,
    file_cases,
    graph_figures,
    headline,
    hf_twin,
    measure_decoders,
    random_model_and_tokenizer,
    run_engine,
    run_hf,
)
from clover.commands.bench_context import add_context_args, run_context
from clover.commands.common import (
    add_device_args,
    add_graphs_arg,
    add_threads_arg,
    check_graphs,
    device_setup,
    load_model_and_tokenizer,
    recorder,
)
from clover.commands.threads import use_threads

# torch and the engine are imported inside the functions: registering the benchmarks with the
# CLI must stay cheap


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def _floats(s: str) -> list[float]:
    return [float(x) for x in s.split(",") if x]


# -- decode ----------------------------------------------------------------------------------


def add_decode_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="Clover checkpoint directory (default: the bundled model)")
    p.add_argument("--random", action="store_true", help="no checkpoint: a random small model (speed only)")
    p.add_argument(
        "--prompts", help="JSONL file of {prompt_ids | prompt, gold_calls?} instead of the airspace test split"
    )
    p.add_argument(
        "--n",
        type=int,
        default=64,
        help="prompts (tool-call turns of the test split); at the largest batch size they pass through its "
        "slots (continuous batching), and exact match is scored on all of them",
    )
    p.add_argument("--max-tokens", type=int, help="default 160 (64 with --random, which never stops early)")
    p.add_argument("--block-size", type=int, help="default: the model's")
    p.add_argument("--thresholds", default="0.7,0.8,0.9", help="threshold sweep; the last is the headline")
    p.add_argument("--batch-sizes", default="1,4,16")
    p.add_argument("--speed-prompts", type=int, default=4, help="prompts for speed at batch sizes below --n")
    p.add_argument("--no-hf", action="store_true", help="skip the transformers baseline")
    add_threads_arg(p)
    add_device_args(p)
    add_graphs_arg(p)  # adds the default policy decoded with CUDA graphs at each batch size
    p.add_argument("--json", metavar="PATH", help="write the figures here")


def _configs(args, taus: list[float], max_tokens: int) -> dict:
    """The decoders compared: ``ar``, the default policy (the headline), the threshold sweep,
    ``prefix`` and ``edit`` at the last threshold of the sweep."""
    from clover.engine import SamplingParams  # deferred: loads torch, not for clover --help
    from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD  # deferred: loads torch, not for clover --help

    base = dict(max_tokens=max_tokens, block_size=args.block_size)
    configs = {
        "ar": SamplingParams(policy="ar", **base),
        DEFAULT_NAME: SamplingParams(policy=DEFAULT_POLICY, threshold=DEFAULT_THRESHOLD, **base),
    }
    for t in taus:
        configs[f"threshold@{t:g}"] = SamplingParams(policy="threshold", threshold=t, **base)
    for name in ("prefix", "edit"):
        configs[f"{name}@{taus[-1]:g}"] = SamplingParams(policy=name, threshold=taus[-1], **base)
    return configs


def _rows(by_batch: dict, cases_at: dict) -> list[list]:
    labels = {**DECODER_LABELS, DEFAULT_NAME: _label_default()}
    rows = []
    for b, res in by_batch.items():
        for name, r in res.items():
            em = r.get("exact_match")
            vs_ar = r["tokens_per_s"] / res["ar"]["tokens_per_s"]
            rows.append(
                [
                    b,
                    labels.get(name, name),
                    cases_at[b],
                    "-" if em is None else f"{100 * em:.1f}",
                    r.get("tpf", 1.0),
                    r["tokens_per_s"],
                    vs_ar,
                ]
            )
    return rows


def _label_default() -> str:
    from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD  # deferred: loads torch, not for clover --help

    return f"default ({DEFAULT_POLICY} τ {DEFAULT_THRESHOLD:g})"


def _rate(r: dict, tpf: bool) -> str:
    return f"{r['tokens_per_s']:.0f}" + (f" ({r['tpf']:.2f})" if tpf else "")


def speed_tables(by_batch: dict, sizes: list[int]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, columns, rows) of the two summaries the docs show: decoders as rows with tokens/s at
    the smallest and the largest batch and exact match (README.md's "Benchmark"), then one row per
    batch size with ``ar``, the default against both baselines, the default unfused and ``hf``
    (docs/benchmarks.md's "Decode speed"). Cells are tokens/s, TPF in brackets; "-" where a
    decoder did not run at that batch size."""
    from clover.engine.policies import DEFAULT_POLICY, DEFAULT_THRESHOLD  # deferred: loads torch, not for clover --help

    d, ends = DEFAULT_NAME, list(dict.fromkeys((sizes[0], sizes[-1])))
    full = by_batch[sizes[-1]]

    def versus(b: int, digits: int) -> str:
        r = by_batch[b]
        ratios = [f"{r[d]['tokens_per_s'] / r[k]['tokens_per_s']:.{digits}f}x {k}" for k in ("ar", "hf") if k in r]
        return ", ".join(ratios)

    names = [d, "ar", *sorted((k for k in full if k.startswith("threshold@")), key=lambda k: -float(k[10:]))]
    names += [k for k in full if k not in names and "@" in k]
    labels = {d: f"{DEFAULT_POLICY} τ {DEFAULT_THRESHOLD:g} (default)", "ar": "ar (one position per pass)"}
    rows = []
    for name in [*names, "hf"]:
        cells = []
        for b in ends:
            r = by_batch[b].get(name)
            vs = versus(b, 1) if name == d and r is not None else ""
            cells.append("-" if r is None else _rate(r, name not in ("ar", "hf")) + (f": {vs}" if vs else ""))
        em = full.get(name, {}).get("exact_match")
        label = labels.get(name) or ("hf generate() (same shape)" if name == "hf" else " τ ".join(name.split("@")))
        rows.append([label, *cells, "-" if em is None else f"{100 * em:.1f} %"])
    if "hf" not in full:
        rows.pop()
    summary = (
        "decoders at the smallest and the largest batch (tokens/s, TPF in brackets)",
        ["decoding", *[f"batch {b} tok/s (TPF)" for b in ends], "exact match"],
        rows,
    )
    by_size = []
    for b, r in by_batch.items():
        default = ", ".join(filter(None, [f"{r[d]['tpf']:.2f}", versus(b, 2)]))
        by_size.append(
            [
                b,
                f"{r['ar']['tokens_per_s']:.0f}",
                f"{r[d]['tokens_per_s']:.0f} ({default})",
                f"{r['unfused']['tokens_per_s']:.0f}" if "unfused" in r else "-",
                f"{r['hf']['tokens_per_s']:.0f}" if "hf" in r else "-",
            ]
        )
    per_batch = (
        "ar, the default and hf generate() at each batch size (tokens/s)",
        [
            "batch",
            "ar tok/s",
            f"default {DEFAULT_POLICY} τ {DEFAULT_THRESHOLD:g} tok/s (TPF, vs ar, vs hf)",
            "default, unfused commit",
            "hf generate() tok/s",
        ],
        by_size,
    )
    return [summary, per_batch]


# how the table names its rows (the JSON keeps the short names)
DECODER_LABELS = {
    "ar": "ar (block model, 1 position/pass)",
    "hf": "hf generate() (1 token/step)",
    "unfused": "default, unfused commit",
}


def _pass_note(p: dict) -> str:
    text = (
        f"one pass at batch 1 after 96 tokens: denoise {p['pass_ms_eager']:.2f} ms, "
        f"fused {p['fused_pass_ms_eager']:.2f} ms eager"
    )
    if "compile_s" not in p:
        return text + " (--compile adds the compiled pass)"
    same = ", ".join(f"{k} {100 * v:.0f} %" for k, v in p["compiled_same_tokens"].items())
    return (
        f"{text}; compiled {p['pass_ms_compiled']:.2f} / {p['fused_pass_ms_compiled']:.2f} ms "
        f"({p['pass_speedup']:.2f}x) after {p['compile_s']:.0f} s of compiling; default policy at batch 1 "
        f"compiled {p['compiled_default_tokens_per_s']:.0f} tok/s ({p['compiled_speedup']:.2f}x eager); "
        f"same tokens as eager: {same}"
    )


def _graphs_note(g: dict | None) -> str:
    if g is None:
        return "--cuda-graphs adds the default policy decoded with CUDA graphs"
    per = "; ".join(
        f"batch {b} {r['tokens_per_s']:.0f} tok/s ({r['speedup']:.2f}x eager, first run "
        f"{r['first_tokens_per_s']:.0f}), same tokens {100 * r['same_tokens']:.0f} %"
        for b, r in g.items()
    )
    return f"CUDA graphs, the default policy: {per}"


def run_decode(args: argparse.Namespace) -> int:
    import torch  # deferred: torch, not for clover --help

    rec = recorder(args)
    t_start = time.perf_counter()
    device, dtype = device_setup(args, "clover bench decode")
    check_graphs(args, device, "clover bench decode")
    set_threads(args.threads)
    if args.random:
        model, tokenizer = random_model_and_tokenizer(device, dtype)
        use_threads(args.threads, model.config)
    else:
        model, tokenizer = load_model_and_tokenizer(args.model, args.threads, args.device, args.dtype)
    if args.prompts:
        cases = file_cases(args.prompts, tokenizer, args.n)
    else:  # the test split of the model's own task
        cases = airspace_cases(tokenizer, args.n, model.config)
    taus, sizes = _floats(args.thresholds), sorted(_ints(args.batch_sizes))
    configs = _configs(args, taus, args.max_tokens or (64 if args.random else 160))
    run_engine(model, tokenizer, cases[:1], dataclasses.replace(configs["ar"], max_tokens=8), 1)  # warm-up
    w = model.lm_head.weight
    hf = None if args.no_hf else hf_twin(model.config).to(w.device, w.dtype)  # where Clover runs, as it runs
    if hf is not None:
        run_hf(hf, cases[:1], [4], 1)  # warm-up
    full, by_batch = measure_decoders(model, tokenizer, cases, configs, sizes, args.speed_prompts, hf)
    passes = compiled_figures(model, tokenizer, cases, configs, full, by_batch, sizes, args.compile, args.speed_prompts)
    if args.cuda_graphs:
        passes["cuda_graphs"] = graph_figures(model, tokenizer, cases, configs, by_batch, sizes, args.speed_prompts)
    figures = {
        "model": args.model or ("random" if args.random else "default"),
        "n": len(cases),
        "device": str(w.device),
        "dtype": str(w.dtype)[6:],
        "batch_sizes": sizes,
        **headline(full, by_batch, sizes, hf, f"threshold@{taus[-1]:g}"),
        **passes,
        "by_batch": {
            b: {k: {kk: vv for kk, vv in v.items() if kk not in ("lengths", "ids")} for k, v in r.items()}
            for b, r in by_batch.items()
        },
    }
    cases_at = {b: len(cases) if b == sizes[-1] else min(len(cases), max(b, args.speed_prompts)) for b in sizes}
    notes = [
        f"headline (JSON top level): batch {sizes[0]}, the default policy vs ar; exact match and TPF from the "
        f"batch-{sizes[-1]} run (decoding is batch-invariant)",
        "ar is the block model committing one position per pass: each pass computes a whole block, so it is "
        "not an autoregressive decoder; hf is one (a transformers Qwen3_5MoeForCausalLM of the same shape, "
        "random weights, greedy generate() with KV cache, as many new tokens per prompt as ar produced)",
        f"batch {sizes[-1]}: the {len(cases)} prompts through {sizes[-1]} slots (continuous batching); hf runs "
        f"them as static batches of {sizes[-1]} (generate() has no refill), each row's own length counted",
        f"unfused = the default with the commit of a finished block as its own forward "
        f"(same tokens: {figures['fused_same_tokens']})",
    ]
    notes.append(_pass_note(passes))
    notes.append(_graphs_note(passes.get("cuda_graphs")))
    if args.random:
        notes.append("--random: random weights, exact match is meaningless; speed figures only")
    notes.append(f"took {time.perf_counter() - t_start:.0f} s")
    where = f"{figures['device']} {figures['dtype']}, {torch.get_num_threads()} thread(s)"
    print_table(
        rec,
        f"clover bench decode ({figures['model']}, {len(cases)} prompts, {where})",
        ["batch", "decoder", "prompts", "exact %", "TPF", "tokens/s", "vs ar"],
        _rows(by_batch, cases_at),
        notes,
    )
    for title, columns, rows in speed_tables(by_batch, sizes):
        print_table(rec, title, columns, rows)
    write_json(rec, args.json, figures)
    return 0


BENCHMARKS["decode"] = (
    "the default policy vs ar and the other policies on the airspace test prompts, + transformers "
    "generate() of the same shape",
    add_decode_args,
    run_decode,
)
BENCHMARKS["context"] = (
    "decode cost and cache size at long prompts: Clover hybrid vs all-attention",
    add_context_args,
    run_context,
)
