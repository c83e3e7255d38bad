"""Model-core figures: chunked vs recurrent delta rule at T=2048, training-forward throughput,
the MoE expert paths side by side (per-expert loop, grouped GEMM, dense), and one attention
layer's denoise pass over a long cache, in place vs by concatenation.

python benchmarks/bench_model.py [--json out.json] [--threads 1] [--only moe|attention]
"""

from __future__ import annotations

import argparse
import time

import torch

from clover.bench import print_table, write_json
from clover.bench.results import Recorder
from clover.model import CloverForBlockDiffusion, preset
from clover.ops.delta_rule import delta_rule_chunked, delta_rule_recurrent


def _time(fn, reps=1):
    fn()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps


def delta_rule_figures(T=2048, B=1, H=4, d=64):
    g = torch.Generator().manual_seed(0)
    q = torch.nn.functional.normalize(torch.randn(B, T, H, d, generator=g), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, d, generator=g), dim=-1)
    v, gg, beta = (
        torch.randn(B, T, H, d, generator=g),
        -torch.rand(B, T, H, generator=g),
        torch.rand(B, T, H, generator=g),
    )
    bl = list(range(31, T, 32))
    out = {}
    for name, fn in (("recurrent", delta_rule_recurrent), ("chunked", delta_rule_chunked)):
        with torch.no_grad():
            out[f"{name}_fwd_s"] = _time(lambda fn=fn: fn(q, k, v, gg, beta, boundaries=bl))
        ins = [t.clone().requires_grad_() for t in (q, k, v, gg, beta)]

        def fb(fn=fn, ins=ins):
            o, s = fn(*ins, boundaries=bl)
            (o.sum() + s.sum()).backward()

        out[f"{name}_fwd_bwd_s"] = _time(fb)
    out["fwd_speedup"] = out["recurrent_fwd_s"] / out["chunked_fwd_s"]
    out["fwd_bwd_speedup"] = out["recurrent_fwd_bwd_s"] / out["chunked_fwd_bwd_s"]
    return out


def train_forward_figures(batch=4, T=512, block=32):
    torch.manual_seed(0)
    m = CloverForBlockDiffusion(preset("small")).train()
    x0 = torch.randint(0, 4000, (batch, T))
    xt = torch.where(torch.rand(batch, T) < 0.5, torch.full_like(x0, m.config.mask_token_id), x0)
    with torch.no_grad():
        fwd = _time(lambda: m.forward_train(x0, xt, block), reps=2)

    def fb():
        m.forward_train(x0, xt, block).logits.float().logsumexp(-1).mean().backward()

    fwdbwd = _time(fb)
    return {
        "small_params": m.num_parameters()["total_params"],
        "batch": batch,
        "seq_len": T,
        "train_forward_tokens_per_s": batch * T / fwd,
        "train_step_tokens_per_s": batch * T / fwdbwd,
    }


# the bundled model's MoE shape (clover/assets/default/config.json)
BUNDLED_MOE = dict(hidden_size=128, moe_intermediate_size=128, num_experts=4, num_experts_per_tok=2)


def moe_figures(tokens=(16, 64, 512), reps=20):
    """One MoE layer of the medium preset and of the bundled model's shape: ms per call of each
    expert path (routing excluded), no grad, and forward + backward at the largest size."""
    out = {}
    for label, over in (("medium", {}), ("bundled", BUNDLED_MOE)):
        torch.manual_seed(0)
        moe = CloverForBlockDiffusion(preset("medium", **over)).model.layers[0].mlp
        for n in tokens:
            h = torch.randn(n, moe.gate.weight.shape[1], requires_grad=True)
            w, i = torch.nn.functional.linear(h, moe.gate.weight).float().softmax(-1).topk(moe.gate.top_k, -1)
            w, i = (w / w.sum(-1, keepdim=True)).detach(), i
            for name in ("grouped", "grouped_mm", "dense"):
                fn = getattr(moe, f"_{name}")
                with torch.no_grad():
                    out[f"moe_{label}_{name}_{n}tok_ms"] = 1e3 * _time(lambda fn=fn: fn(h, w, i), reps)
                if n == tokens[-1] and name != "dense":
                    bwd = lambda fn=fn: fn(h, w, i).square().sum().backward()
                    out[f"moe_{label}_{name}_{n}tok_fwd_bwd_ms"] = 1e3 * _time(bwd, max(1, reps // 4))
    return out


def attention_step_figures(histories=(512, 4096, 16384), block=32, reps=20):
    """One medium-preset attention layer, a denoise pass of one block over ``histories`` cached
    tokens: ms per pass (best of ``reps``) in place (``forward_step``) and by concatenation
    (``forward_step_reference``), for one row and for four rows of different lengths."""
    from clover.model.attention import Attention
    from clover.model.cache import AttnCache
    from clover.model.layers import RotaryEmbedding

    torch.manual_seed(0)
    cfg = preset("medium")
    att, rope_emb = Attention(cfg).eval(), RotaryEmbedding(cfg)
    out = {}
    for L in histories:
        for rows, lengths in ((1, [L]), (4, [L, L - block, L - 4 * block, L - 2 * block])):
            lens = torch.tensor(lengths)
            cache = AttnCache(*(torch.randn(rows, L + 2 * block, cfg.num_key_value_heads, cfg.head_dim) for _ in "kv"))
            x = torch.randn(rows, block, cfg.hidden_size)
            rope = rope_emb(lens[:, None] + torch.arange(block), x.dtype)
            for name, fn in (("in_place", att.forward_step), ("concat", att.forward_step_reference)):
                with torch.no_grad():
                    fn(x, rope, cache, lens, 0, block)
                    best = float("inf")
                    for _ in range(reps):
                        t = time.perf_counter()
                        fn(x, rope, cache, lens, 0, block)
                        best = min(best, time.perf_counter() - t)
                out[f"attn_{name}_{rows}rows_{L}hist_ms"] = 1e3 * best
    return out


def main() -> None:
    rec = Recorder()  # the result file: this command line, its start, the tables printed
    p = argparse.ArgumentParser()
    p.add_argument("--json")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--only", choices=["delta_rule", "train", "moe", "attention"], help="one group of figures")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    groups = {
        "delta_rule": delta_rule_figures,
        "train": train_forward_figures,
        "moe": moe_figures,
        "attention": attention_step_figures,
    }
    res = {"threads": a.threads}
    for name, fn in groups.items():
        if a.only in (None, name):
            res.update(fn())
    rows = [[k, f"{v:.4g}" if isinstance(v, float) else str(v)] for k, v in res.items()]
    print_table(rec, "Clover model core (CPU)", ["figure", "value"], rows)
    write_json(rec, a.json, res)  # a result file (clover.bench.results)


if __name__ == "__main__":
    main()
