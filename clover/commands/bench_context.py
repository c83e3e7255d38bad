"""``clover bench context``: decode cost at long prompts, Clover hybrid vs the all-attention
variant of the same size (random weights): ms per generated token and cache bytes. The GDN
layers keep a constant-size state, so the cost of history should stay flat for them.
"""

from __future__ import annotations

import argparse
import time

from clover.bench import print_table, set_threads, write_json
from clover.commands.common import add_device_args, add_threads_arg, device_setup
from clover.commands.threads import use_threads


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def add_context_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lengths", default="1024,4096,16384,32768", help="prompt lengths")
    p.add_argument("--preset", default="small", help="model shape (random weights)")
    p.add_argument("--tokens", type=int, default=64, help="new tokens decoded at each length")
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--steps-per-block", type=int, default=4, help="passes per block ('fixed' policy, same for both)")
    p.add_argument("--real-prefill", action="store_true", help="prefill for real (minutes at 16K on a CPU)")
    add_threads_arg(p)
    add_device_args(p)
    p.add_argument("--json", metavar="PATH", help="write the figures here")


class _SyntheticHistory:
    """Prefill stand-in: a cache of the prompt's complete blocks with random contents.

    What a decode pass costs depends on how much history there is, not on what it holds, and
    a real 16K prefill of the all-attention model takes minutes on a small CPU.
    """

    def __init__(self, model, spare: int):
        self.model, self.spare = model, spare

    def __call__(self, req, alone: bool = False):
        import torch

        from clover.model.cache import AttnCache

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


def run_context(args: argparse.Namespace) -> int:
    import torch

    from clover.api.loading import place_model
    from clover.engine import Engine, Finished, SamplingParams
    from clover.model import CloverForBlockDiffusion, preset

    device, dtype = device_setup(args, "clover bench context")
    set_threads(args.threads)
    lengths = _ints(args.lengths)
    torch.manual_seed(0)
    cfg = preset(args.preset, max_position_embeddings=2 * max(lengths) + 4096)  # RoPE has no hard limit
    use_threads(args.threads, cfg)
    models = {}
    for name, c in (("clover", cfg), ("attention", cfg.all_attention())):
        torch.manual_seed(0)
        models[name] = place_model(CloverForBlockDiffusion(c).eval(), device, dtype)
        models[name].compile_passes(args.compile)
    params = SamplingParams(
        max_tokens=args.tokens, block_size=args.block_size, policy="fixed", steps_per_block=args.steps_per_block,
        stop_token_ids=[],
    )  # fmt: skip
    figures = {"context_lengths": lengths, "tokens": args.tokens, "block_size": args.block_size,
               "device": str(device), "dtype": str(dtype or torch.float32)[6:]}  # fmt: skip
    for name in models:
        figures[f"{name}_ms_per_token"], figures[f"{name}_cache_bytes"] = [], []
    for L in lengths:
        prompt = torch.randint(0, cfg.vocab_size - 1, (L,), generator=torch.Generator().manual_seed(L)).tolist()
        for name, model in models.items():
            engine = Engine(model, prefill_chunk=0)  # the whole prompt in the admission step, outside the timing
            if not args.real_prefill:
                engine.runner.prefill = _SyntheticHistory(model, spare=args.tokens + 2 * args.block_size)
            engine.generate(prompt[:L], SamplingParams(max_tokens=args.block_size, block_size=args.block_size))  # warm
            rid = engine.add_request(prompt, params)
            engine.step()  # admission (prefill) is not decode time
            (batch,) = engine.scheduler.running()
            nbytes = batch.cache.nbytes()
            t0 = time.perf_counter()
            done = []
            while not done:
                done = [e.output for e in engine.step() if isinstance(e, Finished) and e.request_id == rid]
            wall = time.perf_counter() - t0
            tokens = done[0].stats["tokens"]
            figures[f"{name}_ms_per_token"].append(1e3 * wall / tokens)
            figures[f"{name}_cache_bytes"].append(nbytes)
    rows = []
    for i, L in enumerate(lengths):
        c_ms, a_ms = figures["clover_ms_per_token"][i], figures["attention_ms_per_token"][i]
        c_b, a_b = figures["clover_cache_bytes"][i], figures["attention_cache_bytes"][i]
        rows.append([L, c_ms, a_ms, c_ms / a_ms, f"{c_b / 2**20:.2f}", f"{a_b / 2**20:.2f}", c_b / a_b])
    figures["ms_ratio"] = [r[3] for r in rows]
    figures["bytes_ratio"] = [r[6] for r in rows]
    print_table(
        f"clover bench context ({args.preset} preset, random weights, block {args.block_size}, "
        f"{args.steps_per_block} passes/block, {device} {figures['dtype']}, {torch.get_num_threads()} thread(s))",
        ["prompt", "clover ms/tok", "attention ms/tok", "ratio", "clover cache MiB", "attention cache MiB", "ratio"],
        rows,
        ["history is synthetic (random cache of the right size) unless --real-prefill"]
        if not args.real_prefill
        else [],
    )
    write_json(args.json, figures)
    return 0
