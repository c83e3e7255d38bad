"""Runs the copy task to step 5 on a model built sharded from the meta device
(``clover.train.fsdp.build_sharded``), alone or under torchrun; writes what it saw as JSON.

``scale_worker.py OUT [--dtype bfloat16] [--ac] [--ckpt DIR [--until N]] [--plain]``: the losses,
the dtypes of the weights and of the optimizer state, the dtype the first layer's MoE computes
in and its calls per training step (twice with activation checkpointing: forward and recompute).
``--plain``: one process, no FSDP (a resumed run overwrites the init).

``scale_worker.py OUT --stream-from DIR``: only build the sharded model and stream DIR's weights
into it; writes each rank's peak RSS before and after, and whether its rows equal the source's.
"""

import argparse
import json
from pathlib import Path

import torch
import torch.distributed as dist

from clover.model import CloverForBlockDiffusion, preset
from clover.train.fsdp import build_sharded, local_rows, single_process_group
from clover.train.trainer import TrainConfig, Trainer, setup_distributed
from tests.train.copy_task import copy_source

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--dtype", default="float32")
p.add_argument("--ac", action="store_true")
p.add_argument("--ckpt", help="run directory")
p.add_argument("--until", type=int)
p.add_argument("--plain", action="store_true")
p.add_argument("--stream-from")
args = p.parse_args()

rank, world = setup_distributed()
if world == 1 and not args.plain:
    single_process_group()


def peak_rss() -> int:
    """VmHWM: this process's peak resident set (ru_maxrss would carry the parent's peak across exec)."""
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def stream(src: str) -> dict:
    from safetensors import safe_open

    from clover.model.io import load_config
    from clover.train.warm_start import init_weights, weight_files

    model = build_sharded(load_config(src), torch.device("cpu"), init=False)  # shards allocated, not yet written
    before = peak_rss()
    init_weights(model, src)
    after = peak_rss()
    files, same = weight_files(Path(src)), True
    for name, t in model.state_dict().items():
        local, start = local_rows(t)
        with safe_open(str(files[name]), framework="pt") as h:
            same &= torch.equal(local, h.get_slice(name)[start : start + local.shape[0]])
    return {"before": before, "after": after, "same": bool(same)}


def train() -> dict:
    config = preset("tiny", block_size=4, shift_logits=False)
    if args.plain:
        torch.manual_seed(0)
        model = CloverForBlockDiffusion(config)
    else:
        model = build_sharded(config, torch.device("cpu"), getattr(torch, args.dtype), args.ac)
    seen = {"calls": 0, "dtype": None}

    def hook(module, inputs):  # a pre-hook: a recompute stops once it has what backward needs
        seen["calls"] += 1
        seen["dtype"] = str(inputs[0].dtype)

    model.model.layers[0].mlp.register_forward_pre_hook(hook)
    cfg = TrainConfig(steps=5, lr=3e-3, warmup=1, block_size=4, log_every=1000, eval_every=10**9, ckpt_every=3)
    trainer = Trainer(model, copy_source(batch=8), cfg, args.ckpt)
    trainer.resume()
    start = trainer.step
    hist = trainer.fit(progress=False, until=args.until)
    moments = [v.dtype for st in trainer.opt.state.values() for k, v in st.items() if k != "step"]
    return {
        "losses": [h["loss"] for h in hist],
        "weights": sorted({str(p.dtype) for p in model.parameters()}),
        "moments": sorted({str(d) for d in moments}),
        "mlp_dtype": seen["dtype"],
        "mlp_calls_per_step": seen["calls"] / max(1, trainer.step - start),
    }


res = stream(args.stream_from) if args.stream_from else train()
if args.stream_from:
    with open(f"{args.out}.{rank}", "w") as f:
        json.dump(res, f)
elif rank == 0:
    with open(args.out, "w") as f:
        json.dump(res, f)
if dist.is_initialized():
    dist.barrier()  # no rank tears the group down while another still talks to it
    dist.destroy_process_group()
