"""Runs the copy task to step 5, alone or under torchrun with FSDP2; writes the losses.

``fsdp_worker.py OUT [RUN_DIR [UNTIL]]``: with a run directory it resumes from the latest
checkpoint there (if any), stops at step UNTIL (as if killed) and checkpoints on the way.
"""

import json
import sys

import torch

from clover.model import CloverForBlockDiffusion, preset
from clover.train.trainer import TrainConfig, Trainer, setup_distributed, shard_model
from tests.train.copy_task import copy_source

rank, world = setup_distributed()
run_dir = sys.argv[2] if len(sys.argv) > 2 else None
until = int(sys.argv[3]) if len(sys.argv) > 3 else None
torch.manual_seed(0)
model = CloverForBlockDiffusion(preset("tiny", block_size=4, shift_logits=False))
if world > 1:
    model = shard_model(model)
cfg = TrainConfig(steps=5, lr=3e-3, warmup=1, block_size=4, log_every=1000, eval_every=10**9, ckpt_every=3)
trainer = Trainer(model, copy_source(batch=8), cfg, run_dir)
trainer.resume()
hist = trainer.fit(progress=False, until=until)
if rank == 0:
    with open(sys.argv[1], "w") as f:
        json.dump([h["loss"] for h in hist], f)
if world > 1:
    torch.distributed.barrier()  # no rank tears the group down while another still talks to it
    torch.distributed.destroy_process_group()
