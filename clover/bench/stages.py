"""Where an engine step's time goes, stage by stage (``benchmarks/profile_stages.py``): the model's
pass, the back end's glue around it and each host stage of the engine (``clover.engine.stages``),
in milliseconds of this thread's CPU time per engine step (the back ends run on one thread, the
caller's, so a busy machine's other processes are left out), for a back end at a batch size and
a policy; tokens/s are wall-clock.

The model's pass is the time inside the model's own ``step`` (PyTorch: the whole forward, prefill
included; llama.cpp: the library's ``clover_step`` call, and the passes inside its block loop,
``clover_denoise_block``, as the library counts them); the back end's glue is the rest of the
back end's ``step`` or ``denoise_blocks`` (torch tensors to int32 arrays, a logits buffer per row,
the rows' logits stacked into one tensor); the block loop's own time is the rest of
``clover_denoise_block``. Everything else an engine step spends is host time outside the pass.
torch is imported inside the functions (deferred on purpose: listing the benchmarks needs neither).
"""

from __future__ import annotations

import time

from clover.bench.decode import exact

PASS = "model pass"
GLUE = "back-end glue (inputs, logits out)"
BLOCK_LOOP = "library's block loop outside its passes (graphs, choice, policy, commit)"


def _instrument(model, clock):
    """Wrap ``model``'s pass (and a native back end's glue) with ``clock``; returns the undo."""
    from clover.backends.llamacpp import LlamaCppClover  # deferred: loads torch, not for clover --help

    undo = []
    if isinstance(model, LlamaCppClover):
        lib = model.native._lib
        native_step = lib.clover_step
        lib.clover_step = clock.wrap(PASS, native_step)
        undo.append(lambda: setattr(lib, "clover_step", native_step))
        model.step = clock.wrap(GLUE, type(model).step.__get__(model))
        undo.append(lambda: delattr(model, "step"))
        model.denoise_blocks = clock.wrap(GLUE, type(model).denoise_blocks.__get__(model))
        undo.append(lambda: delattr(model, "denoise_blocks"))
        native = model.native
        loop = clock.wrap(BLOCK_LOOP, type(native).denoise_block.__get__(native))

        def block(*args, **kwargs):  # the passes' own time, as the library counts it, goes to PASS
            out = loop(*args, **kwargs)
            clock.seconds[BLOCK_LOOP] -= out[2]
            clock.seconds[PASS] += out[2]
            return out

        native.denoise_block = block
        undo.append(lambda: delattr(native, "denoise_block"))
    else:
        model.step = clock.wrap(PASS, type(model).step.__get__(model))
        undo.append(lambda: delattr(model, "step"))

    def restore():
        for u in undo:
            u()

    return restore


def measure_stages(model, tokenizer, cases, params, batch: int) -> dict:
    """Decode ``cases`` (prompt ids, gold calls) through a fresh engine, ``batch`` requests at a time
    (batch 1: one after another), under a ``StageClock``: ms per step of every stage, the step's
    total, the host time outside the pass, tokens/s, tokens per pass and exact match."""
    from clover.engine import Engine  # deferred: loads torch, not for clover --help
    from clover.engine.stages import ENGINE_STAGES, StageClock

    engine = Engine(model, tokenizer, max_batch_size=batch)
    engine.generate_batch([cases[0][0]], params)  # warm-up (first-call allocations, the grammar tables)
    clock = StageClock(time.thread_time)
    engine.clock = clock
    restore = _instrument(model, clock)
    forwards0 = engine.runner.forwards
    try:
        outs, t0, c0 = [], time.perf_counter(), time.thread_time()
        for s in range(0, len(cases), batch):
            outs += engine.generate_batch([c[0] for c in cases[s : s + batch]], params)
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    finally:
        restore()
        engine.clock = None
    ms = clock.per_step_ms()
    stages = {k: ms.get(k, 0.0) for k in (PASS, GLUE, BLOCK_LOOP, *ENGINE_STAGES)}
    total = 1e3 * cpu / clock.steps
    forwards = engine.runner.forwards - forwards0
    tokens = sum(len(o.token_ids) for o in outs)
    passes = sum(o.stats["forward_passes"] for o in outs)
    scores = [x for x in (exact(o.text, c[1]) for o, c in zip(outs, cases)) if x is not None]
    return {
        "stages_ms": stages,
        "step_ms": total,
        "outside_pass_ms": total - stages[PASS],
        "steps": clock.steps,
        "forwards": forwards,
        "row_passes": passes,
        # per pass of one request (a batch's pass of R rows is R of them): the same count whatever
        # loop ran it, where engine steps (a pass, or a whole block) and forward calls are not
        "outside_pass_ms_per_row_pass": (total - stages[PASS]) * clock.steps / passes if passes else 0.0,
        "tokens": tokens,
        "tokens_per_s": tokens / wall,
        "tokens_per_cpu_s": tokens / cpu,
        "tpf": tokens / passes if passes else 0.0,
        "exact_match": sum(scores) / len(scores) if scores else None,
        "ids": [o.token_ids for o in outs],
    }
