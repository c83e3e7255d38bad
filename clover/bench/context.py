"""What ``clover bench context`` measures (its flags and table are ``clover.commands.bench_context``):
decode cost at long prompts, Clover hybrid vs the all-attention variant of the same size (random
weights): ms per generated token and cache bytes. The GDN layers keep a constant-size state, so
the cost of history should stay flat for them. torch and the engine are imported inside the
functions (listing the benchmarks needs neither).
"""

from __future__ import annotations

import time

from clover.api.loading import place_model


class SyntheticHistory:
    """Prefill stand-in: a cache of the prompt's complete blocks with random contents.

    What a decode pass costs depends on how much history there is, not on what it holds, and
    a real 16K prefill of the all-attention model takes minutes on a small CPU.
    """

    def __init__(self, model, spare: int):
        self.model, self.spare = model, spare

    def __call__(self, req, alone: bool = False):
        import torch  # deferred: torch, not for clover --help

        from clover.model.cache import AttnCache  # deferred: loads torch, not for clover --help

        bs = req.block_size
        P = len(req.prompt) // bs * bs
        cache = self.model.new_cache(1)
        g = torch.Generator().manual_seed(0)
        for c in cache.layers:
            if isinstance(c, AttnCache):
                shape = (1, P + self.spare, *c.k.shape[2:])
                c.k, c.v = torch.randn(shape, generator=g).to(c.k), torch.randn(shape, generator=g).to(c.v)
            else:
                c.S = (torch.randn(c.S.shape, generator=g) * 0.1).to(c.S)
                c.tail = torch.randn(c.tail.shape, generator=g).to(c.tail)
        cache.lengths[:] = P
        if self.model.config.shift_logits:
            w = self.model.lm_head.weight
            cache.last_logits = torch.zeros(1, self.model.config.vocab_size, device=w.device, dtype=w.dtype)
        return cache, torch.tensor([req.prompt[P:]], dtype=torch.long, device=cache.lengths.device)


def context_config(preset_name: str, lengths: list[int]):
    """The model shape measured: ``preset_name`` with room for the longest prompt and its decode."""
    from clover.model import preset  # deferred: loads torch, not for clover --help

    return preset(preset_name, max_position_embeddings=2 * max(lengths) + 4096)  # RoPE has no hard limit


def measure_context(
    cfg,
    lengths: list[int],
    tokens: int,
    block_size: int,
    steps_per_block: int,
    device,
    dtype,
    real_prefill: bool = False,
    compile: bool = False,
) -> dict:
    """Decode ``tokens`` new tokens after a prompt of each of ``lengths`` (history synthetic unless
    ``real_prefill``), with ``cfg`` and its all-attention variant (random weights, seed 0), on
    ``device`` in ``dtype`` (None: float32): ms per token and cache bytes per model and length,
    and their ratios (Clover over all-attention)."""
    import torch  # deferred: torch, not for clover --help

    from clover.engine import Engine, Finished, SamplingParams  # deferred: loads torch, not for clover --help
    from clover.model import CloverForBlockDiffusion  # deferred: loads torch, not for clover --help

    models = {}
    for name, c in (("clover", cfg), ("attention", cfg.all_attention())):
        torch.manual_seed(0)
        models[name] = place_model(CloverForBlockDiffusion(c).eval(), device, dtype)
        models[name].compile_passes(compile)
    params = SamplingParams(
        max_tokens=tokens, block_size=block_size, policy="fixed", steps_per_block=steps_per_block, stop_token_ids=[]
    )
    figures = {"context_lengths": lengths, "tokens": tokens, "block_size": block_size, "device": str(device)}
    figures["dtype"] = str(dtype or torch.float32)[6:]
    for name in models:
        figures[f"{name}_ms_per_token"], figures[f"{name}_cache_bytes"] = [], []
    for L in lengths:
        prompt = torch.randint(0, cfg.vocab_size - 1, (L,), generator=torch.Generator().manual_seed(L)).tolist()
        for name, model in models.items():
            engine = Engine(model, prefill_chunk=0)  # the whole prompt in the admission step, outside the timing
            if not real_prefill:
                engine.runner.prefill = SyntheticHistory(model, spare=tokens + 2 * block_size)
            engine.generate(prompt[:L], SamplingParams(max_tokens=block_size, block_size=block_size))  # warm
            rid = engine.add_request(prompt, params)
            engine.step()  # admission (prefill) is not decode time
            (batch,) = engine.scheduler.running()
            nbytes = batch.cache.nbytes()
            t0 = time.perf_counter()
            done = []
            while not done:
                done = [e.output for e in engine.step() if isinstance(e, Finished) and e.request_id == rid]
            wall = time.perf_counter() - t0
            figures[f"{name}_ms_per_token"].append(1e3 * wall / done[0].stats["tokens"])
            figures[f"{name}_cache_bytes"].append(nbytes)
    figures["ms_ratio"] = [c / a for c, a in zip(figures["clover_ms_per_token"], figures["attention_ms_per_token"])]
    figures["bytes_ratio"] = [c / a for c, a in zip(figures["clover_cache_bytes"], figures["attention_cache_bytes"])]
    return figures
