"""Decoding by block size (``benchmarks/bench_decode_blocks.py``): the default policy's tokens/s at
batch 1 (the prompts one after another), tokens per pass and, on the bundled model, exact match
of the test split's tool calls, at each block size, through PyTorch (f32) and llama.cpp (f32,
q8_0, q4_k), for the bundled model and the random-weight ``medium`` preset; optionally stock
llama.cpp's one-token decoding of a same-shape Qwen3.5-MoE beside them (``clover.bench.llamacpp``).

The module imports torch (the script imports it when it runs).
"""

from __future__ import annotations

import time
from pathlib import Path

from clover.backends.llamacpp import LlamaCppClover
from clover.bench.decode import run_engine
from clover.engine import SamplingParams
from clover.export.gguf import export_gguf
from clover.model.io import load_model

TYPES = ("f32", "q8_0", "q4_k")


def speed(model, tok, cases, block_size: int, max_tokens: int) -> dict:
    """The default policy at ``block_size``, batch 1: tokens per second over ``cases`` one after
    another, of wall time and of this thread's CPU time (both back ends run on the caller's thread
    at one thread; on a busy machine the CPU figure leaves the other processes out)."""
    params = SamplingParams(max_tokens=max_tokens, block_size=block_size)
    run_engine(model, tok, cases[:1], SamplingParams(max_tokens=8, block_size=block_size), 1)  # warm-up
    tokens = passes = 0
    wall, c0 = 0.0, time.thread_time()
    for c in cases:
        r = run_engine(model, tok, [c], params, 1)
        tokens, wall = tokens + r["tokens"], wall + r["wall_s"]
        passes += r["tokens"] / r["tpf"] if r["tpf"] else 0
    cpu = time.thread_time() - c0
    return {
        "tokens_per_s": tokens / wall,
        "tokens_per_cpu_s": tokens / cpu,
        "tpf": tokens / passes if passes else 0.0,
    }


def quality(model, tok, cases, block_size: int, max_tokens: int) -> float | None:
    """Exact match of the tool calls of ``cases`` (prompt ids, gold calls), batch 16."""
    return run_engine(model, tok, cases, SamplingParams(max_tokens=max_tokens, block_size=block_size), 16)[
        "exact_match"
    ]


def backends(src: Path, work: Path, types=TYPES, threads: int = 1) -> dict:
    """``{"PyTorch f32": model, "llama.cpp f32": model, ...}`` for the checkpoint ``src``; the GGUF
    files are written under ``work``."""
    import torch  # the module needs torch anyway; here for the dtype

    out = {"PyTorch f32": load_model(src, "cpu", torch.float32).eval()}
    for t in types:
        path = export_gguf(src, work / f"clover-{t}.gguf", t).out
        out[f"llama.cpp {t}"] = LlamaCppClover(path, threads=threads)
    return out


def measure_blocks(models: dict, tok, speed_cases, quality_cases, sizes, max_tokens: int) -> dict:
    """Every (back end and type, block size): tokens/s, tokens per pass and (``quality_cases``
    given) exact match."""
    out: dict = {}
    for name, m in models.items():
        out[name] = {}
        for bs in sizes:
            t0 = time.perf_counter()
            r = speed(m, tok, speed_cases, bs, max_tokens)
            if quality_cases:
                r["exact_match"] = quality(m, tok, quality_cases, bs, max_tokens)
            r["took_s"] = time.perf_counter() - t0
            out[name][bs] = r
    return out
