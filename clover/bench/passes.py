"""One decoding pass timed on its own: eager against compiled (``clover bench decode --compile``).

A pass here is ``model.step`` at batch 1 over a cache holding ``history`` committed tokens: the
denoise pass (one block, read-only) and the fused pass (one block committed, the next denoised),
the two that decoding repeats. Medians over ``reps`` runs; the compile time is the wall time of
the first calls that compile every pass kind decoding meets.
"""

from __future__ import annotations

import statistics
import time

import torch

from clover.engine.engine import Engine


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA); nothing on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(fn, reps: int, device: torch.device | None = None) -> float:
    """Median wall time of ``fn()`` over ``reps`` calls, ms, the device synchronised around each."""
    device = device or torch.device("cpu")
    times = []
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


@torch.inference_mode()
def pass_ms(model, history: int = 96, reps: int = 30) -> dict:
    """Median ms of the denoise and fused passes at batch 1 after ``history`` tokens (whole blocks)."""
    bs = model.config.block_size
    dev = model.lm_head.weight.device
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(4, model.config.vocab_size, (1, history // bs * bs + bs), generator=gen).to(dev)
    prompt, block = tokens[:, :-bs], tokens[:, -bs:]
    cache = model.prefill(prompt, bs)[0]

    def fused():
        c = model.prefill(prompt, bs)[0]
        sync(dev)
        t0 = time.perf_counter()
        model.step(c, commit=block, denoise=block, block_size=bs)
        sync(dev)
        return time.perf_counter() - t0

    model.step(cache, denoise=block, block_size=bs)  # first calls (compiling, when compiled) not timed
    fused()
    denoise = median_ms(lambda: model.step(cache, denoise=block, block_size=bs), reps, dev)
    return {"denoise": denoise, "fused": 1e3 * statistics.median(fused() for _ in range(reps))}


def warm_compiled(model, history: int = 96) -> float:
    """The first calls of a compiled model's denoise and fused passes at two history lengths (each
    kind compiles with the length fixed, then again with it symbolic) → seconds."""
    bs = model.config.block_size
    t0 = time.perf_counter()
    pass_ms(model, history - bs, reps=1)
    pass_ms(model, history, reps=1)
    return time.perf_counter() - t0


@torch.inference_mode()
def compile_and_warm(model, tokenizer, params) -> float:
    """``model.compile_passes()`` and the first decode that compiles the pass kinds → seconds."""
    model.compile_passes()
    t0 = time.perf_counter()
    engine = Engine(model, tokenizer, max_batch_size=1)
    # three prompts of different lengths: each pass kind is compiled for one history length, then
    # again with the length symbolic (dynamic shapes), so later lengths compile nothing
    for text in ("Drone 7 status?", "Create a no-fly zone over the stadium, radius 500 m.", "hi " * 40):
        engine.generate_batch([tokenizer.encode(text)], params)
    return time.perf_counter() - t0
