"""``clover bench llama.cpp``: Clover in llama.cpp against Clover's PyTorch engine and stock
llama.cpp (the same-shape autoregressive model), batch 1 on the CPU; clover/bench/llamacpp.py
measures, this module keeps the flags and the tables: one pass, then decode tokens/s (docs/llama-cpp.md)."""

from __future__ import annotations

import argparse
import time

from clover.bench import BENCHMARKS, print_table, set_threads, write_json
from clover.commands.common import recorder


def add_llamacpp_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads for every runtime (fixed, not the commands' default: the runtimes are compared "
        "at equal threads)",
    )
    p.add_argument("--reps", type=int, default=20, help="timed passes per B (the median is reported)")
    p.add_argument("--max-tokens", type=int, default=64, help="new tokens per prompt in the decode runs")
    p.add_argument("--speed-prompts", type=int, default=4, help="airspace prompts decoded one by one (batch 1)")
    p.add_argument("--twin-tokens", type=int, default=64, help="one-token steps timed in stock llama.cpp")
    p.add_argument("--n", type=int, default=200, help="airspace test turns for exact match per type (0: skip)")
    p.add_argument("--same", type=int, default=50, help="test prompts compared token by token with PyTorch (0: skip)")
    p.add_argument("--same-max-tokens", type=int, default=128, help="new tokens at most in that comparison")
    p.add_argument("--no-medium", action="store_true", help="skip the medium preset")
    p.add_argument("--no-stock", action="store_true", help="skip stock llama.cpp (no build of libllama)")
    p.add_argument("--work", help="directory for the exported files (default: the system's temporary one)")
    p.add_argument("--json", metavar="PATH", help="write the figures here")


def _rows(fig: dict) -> list[list]:
    rows = []
    for which, runtimes in fig["pass_ms"].items():
        for t in fig["types"]:
            stock = runtimes["stock_llamacpp"].get(t, {})
            for B in fig["sizes"]:
                eff = fig["pass_efficiency"].get(which, {}).get(t, {}).get(B)
                rows.append(
                    [
                        which,
                        t,
                        B,
                        runtimes["clover_llamacpp"][t][B],
                        runtimes["clover_torch"].get(t, {}).get(B, "-"),
                        stock.get(B, "-"),
                        eff if eff is not None else "-",
                    ]
                )
    return rows


DECODE_COLUMNS = [
    "model",
    "type",
    "Clover llama.cpp ar",
    "Clover llama.cpp default",
    "Clover PyTorch ar",
    "Clover PyTorch default",
    "stock one-token",
    "default / stock",
]


def _tps(x) -> str:
    """tokens/s as the docs write them: whole from 100, else 3 significant figures."""
    return x if isinstance(x, str) else f"{x:.0f}" if x >= 100 else f"{x:.3g}"


def decode_rows(fig: dict) -> list[list]:
    """One row per model and type of the decode tokens/s (docs/llama-cpp.md's second table): Clover
    in llama.cpp and in PyTorch (f32 only) under ``ar`` and the default, stock llama.cpp decoding
    one token per step, and the default's speed over stock's; "-" where a runtime did not run."""
    rows = []
    for which, pol in fig["llamacpp_tokens_per_s"].items():
        torch_tps = fig["torch_tokens_per_s"].get(which, {})
        for t in fig["types"]:
            if t not in pol.get("ar", {}):
                continue
            torch_cells = [torch_tps.get(p, {}).get(t, "-") for p in ("ar", "default")]
            stock = fig["twin_llamacpp_tokens_per_s"].get(which, {}).get(t, "-")
            ratio = fig["speedup_vs_twin"].get(which, {}).get(t, "-")
            cells = [pol["ar"][t], pol["default"][t], *torch_cells, stock]
            rows.append([which, t, *map(_tps, cells), ratio if isinstance(ratio, str) else f"{ratio:.2f}"])
    return rows


def _notes(fig: dict, took: float) -> list[str]:
    notes = []
    for which, pol in fig["llamacpp_tokens_per_s"].items():
        for t in fig["types"]:
            torch_tps = fig["torch_tokens_per_s"].get(which, {})
            line = f"{which} {t}: decode tokens/s llama.cpp " + ", ".join(f"{p} {v[t]:.1f}" for p, v in pol.items())
            if t in next(iter(torch_tps.values()), {}):
                line += "; PyTorch " + ", ".join(f"{p} {v[t]:.1f}" for p, v in torch_tps.items())
            twin = fig["twin_llamacpp_tokens_per_s"].get(which, {}).get(t)
            if twin:
                line += f"; stock one-token {twin:.1f} (default/stock {fig['speedup_vs_twin'][which][t]:.2f}x)"
            notes.append(line)
    notes.append(
        "max rel. logit error f32: " + ", ".join(f"{k} {v:.1e}" for k, v in fig["max_rel_logit_err_f32"].items())
    )
    if fig["exact_match"]:
        notes.append(
            "exact match (bundled, test split): "
            + ", ".join(f"{k} {v:.3f}" for k, v in fig["exact_match"].items())
            + f"; PyTorch f32 {fig.get('exact_match_torch_f32', float('nan')):.3f}"
        )
    for pol, v in fig.get("same_tokens_f32", {}).items():
        notes.append(f"same committed tokens as PyTorch at f32, {pol}: {v['same']} of {v['of']}")
    notes.append(
        f"pass: one denoise pass of B positions after a {fig['history']}-token history, median; stock: a "
        "B-token pass with logits at every position; efficiency = stock ms / Clover-in-llama.cpp ms"
    )
    notes.append(f"took {took:.0f} s")
    return notes


def run_llamacpp(args: argparse.Namespace) -> int:
    from clover.backends.llamacpp import available  # deferred: loads torch, not for clover --help
    from clover.bench.llamacpp import measure_llamacpp  # deferred: loads torch, not for clover --help

    rec = recorder(args)
    problem = available()
    if problem is not None:
        raise SystemExit(f"clover bench llama.cpp: {problem}")
    t0 = time.perf_counter()
    set_threads(args.threads)
    fig = measure_llamacpp(args)
    cols = ["model", "type", "B", "llama.cpp ms", "PyTorch ms", "stock ms", "efficiency"]
    print_table(
        rec,
        f"clover bench llama.cpp ({args.threads} thread(s), one pass)",
        cols,
        _rows(fig),
        _notes(fig, time.perf_counter() - t0),
    )
    print_table(rec, "decode tokens/s (batch 1, the prompts one after another)", DECODE_COLUMNS, decode_rows(fig))
    write_json(rec, args.json, fig)
    return 0


BENCHMARKS["llama.cpp"] = (
    "Clover in llama.cpp vs its PyTorch engine and stock llama.cpp (same-shape AR): passes, decode, exactness",
    add_llamacpp_args,
    run_llamacpp,
)
