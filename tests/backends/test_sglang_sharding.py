"""Tensor parallelism of the SGLang plugin (``clover_sglang.sharding``, importable without SGLang):
two processes with gloo hold one Clover model between them and give the unsharded model's logits."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from clover_sglang.sharding import TensorParallel, parallelize

from clover.bench.exactness import perturb
from clover.model import ATTN, GDN, CloverForBlockDiffusion, preset

TP = 2
# hybrid layers with MoE, query/value heads split, attention's one KV head held by both ranks;
# and a dense model with KV heads split and the GDN's one key head held by both ranks
CASES = {
    "moe": dict(),
    "dense": dict(
        num_attention_heads=4,
        num_key_value_heads=2,
        linear_num_key_heads=1,
        num_experts=0,
        intermediate_size=32,
        shift_logits=False,
        layer_types=[ATTN, GDN, ATTN, GDN],
    ),
}


def full_model(case: str) -> CloverForBlockDiffusion:
    """A tiny random fp32 model whose Clover-only parameters, norms and GDN decay parameters are
    perturbed away from their init."""
    torch.manual_seed(0)
    return perturb(
        CloverForBlockDiffusion(preset("tiny", initializer_range=0.2, **CASES[case])).eval(), ("A_log", "dt_bias")
    )


def decode(model) -> list[torch.Tensor]:
    """Logits of the engine's passes: prefill, then per block two denoise passes (all masked,
    then half unmasked) and the fused commit of the block with the next one's first pass."""
    bs = model.config.block_size
    mask = model.config.mask_token_id
    g = torch.Generator().manual_seed(1)
    seq = torch.randint(0, mask, (2, 5 * bs), generator=g)
    out = []
    with torch.inference_mode():
        cache, tail = model.prefill(seq[:, : 2 * bs + 3], bs)
        block = torch.cat([tail, torch.full((2, bs - tail.shape[1]), mask)], 1)
        out.append(model.step(cache, denoise=block, block_size=bs))
        for b in range(2, 5):
            clean = seq[:, b * bs : (b + 1) * bs]
            half = torch.where(torch.arange(bs) % 2 == 0, clean, mask)
            out.append(model.step(cache, denoise=half, block_size=bs))
            if b < 4:
                nxt = torch.full((2, bs), mask)
                out.append(model.step(cache, commit=clean, denoise=nxt, block_size=bs))
    return out


def _reduce(t: torch.Tensor) -> torch.Tensor:
    dist.all_reduce(t)
    return t


def _rank(rank: int, store: str, result: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=TP)
    try:
        report = {}
        for case in CASES:
            full = full_model(case)
            ref = decode(full)
            plan = TensorParallel(full.config, rank, TP)
            local = CloverForBlockDiffusion(plan.local).eval()
            local.load_state_dict(plan.shard_state_dict(full.state_dict()))
            parallelize(local, _reduce)
            got = decode(local)
            err = max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(got, ref))
            mine = torch.stack(got)
            other = mine.clone()
            dist.broadcast(other, src=0)  # rank 0's logits, to check every rank has the same ones
            n_split = sum(p.numel() for p in local.parameters()) < sum(p.numel() for p in full.parameters())
            report[case] = {
                "max_rel_err": err,
                "same_as_rank0": bool(torch.equal(mine, other)),
                "passes": len(got),
                "smaller": n_split,
            }
        with open(f"{result}.{rank}", "w") as f:
            json.dump(report, f)
    finally:
        dist.destroy_process_group()


def test_two_ranks_give_the_unsharded_logits(tmp_path):
    mp.spawn(_rank, args=(str(tmp_path / "store"), str(tmp_path / "result")), nprocs=TP, join=True)
    for rank in range(TP):
        report = json.loads((tmp_path / f"result.{rank}").read_text())
        for case, r in report.items():
            assert r["passes"] == 6 and r["smaller"], (rank, case, r)
            assert r["max_rel_err"] < 1e-5, (rank, case, r)
            assert r["same_as_rank0"], (rank, case, r)  # every rank makes the same decisions


def test_local_shapes_and_slices():
    cfg = preset("tiny")  # 2 query heads / 1 KV head, GDN 2 key / 4 value heads, experts 16 wide
    a, b = TensorParallel(cfg, 0, 2), TensorParallel(cfg, 1, 2)
    assert (a.local.num_attention_heads, a.local.num_key_value_heads) == (1, 1)
    assert (a.local.linear_num_key_heads, a.local.linear_num_value_heads, a.local.moe_intermediate_size) == (1, 2, 8)
    w = torch.arange(cfg.num_experts * 32 * cfg.hidden_size).reshape(cfg.num_experts, 32, cfg.hidden_size)
    name = "model.layers.0.mlp.experts.gate_up_proj"
    # each rank: its half of the gate rows, then its half of the up rows
    assert torch.equal(torch.cat([a.shard(name, w)[:, :8], b.shard(name, w)[:, :8]], 1), w[:, :16])
    assert torch.equal(torch.cat([a.shard(name, w)[:, 8:], b.shard(name, w)[:, 8:]], 1), w[:, 16:])
    kv = torch.randn(cfg.num_key_value_heads * cfg.head_dim, cfg.hidden_size)
    assert torch.equal(a.shard("model.layers.3.self_attn.k_proj.weight", kv), kv)  # the one KV head, on both
    assert TensorParallel(cfg, 0, 1).local == cfg  # one rank: the whole model


def test_shapes_that_cannot_be_split_are_refused_by_name():
    cfg = preset("tiny", num_attention_heads=6, num_key_value_heads=3)
    with pytest.raises(ValueError, match=r"num_attention_heads = 6 .*--tp-size 4"):
        TensorParallel(cfg, 0, 4)
    with pytest.raises(ValueError, match=r"num_key_value_heads = 3 .*--tp-size 2"):
        TensorParallel(cfg, 0, 2)
    with pytest.raises(ValueError, match=r"linear_num_value_heads = 4 .*--tp-size 8"):
        TensorParallel(preset("tiny", num_attention_heads=8), 0, 8)
    with pytest.raises(ValueError, match=r"moe_intermediate_size = 12 .*--tp-size 8"):
        TensorParallel(preset("tiny", num_attention_heads=8, linear_num_value_heads=8, moe_intermediate_size=12), 0, 8)
    with pytest.raises(KeyError, match="no tensor-parallel layout"):
        TensorParallel(preset("tiny"), 0, 2).shard("model.layers.0.linear_attn.new_thing", torch.zeros(1))
