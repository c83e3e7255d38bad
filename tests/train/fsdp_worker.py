"""Runs 5 training steps of the copy task, alone or under torchrun with FSDP2; writes the losses."""

import json
import sys

import torch

from clover.model import CloverForBlockDiffusion, preset
from clover.train.trainer import TrainConfig, Trainer, setup_distributed, shard_model
from tests.train.copy_task import copy_source

rank, world = setup_distributed()
torch.manual_seed(0)
model = CloverForBlockDiffusion(preset("tiny", block_size=4, shift_logits=False))
if world > 1:
    model = shard_model(model)
cfg = TrainConfig(steps=5, lr=3e-3, warmup=1, block_size=4, log_every=1000, eval_every=10**9)
hist = Trainer(model, copy_source(batch=8), cfg, None).fit(progress=False)
if rank == 0:
    with open(sys.argv[1], "w") as f:
        json.dump([h["loss"] for h in hist], f)
if world > 1:
    torch.distributed.destroy_process_group()
