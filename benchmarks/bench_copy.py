"""Can the default model's shape learn to copy? A synthetic block-diffusion copy task.

Each sequence is 24 random tokens, a separator, and the same 24 tokens again as the answer
(masked, block size 8): nothing can be recalled, everything must be copied from its position.
Three variants of the airspace recipe's model, trained side by side from the same seed:

* ``rope 25 % / theta 1e5``: Qwen3.5's partial RoPE; with head_dim 32 only 8 dims rotate;
* ``rope 100 % / theta 1e4``: every head dim rotates (the recipe since this comparison);
* ``GAGA``: the 25 % RoPE with twice the attention layers.

python benchmarks/bench_copy.py [--steps 200] [--threads 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import time

import torch

from clover.airspace.recipes import AirspaceRecipe
from clover.bench import print_table, set_threads, write_json
from clover.bench.results import Recorder
from clover.model import CloverConfig, CloverForBlockDiffusion
from clover.train.objective import MaskingConfig
from clover.train.trainer import TrainConfig, Trainer

VARIANTS = {
    "rope 25 % / theta 1e5": {"partial_rotary_factor": 0.25, "rope_theta": 100_000.0},
    "rope 100 % / theta 1e4": {"partial_rotary_factor": 1.0, "rope_theta": 10_000.0},
    "GAGA, rope 25 % / theta 1e5": {
        "partial_rotary_factor": 0.25,
        "rope_theta": 100_000.0,
        "full_attention_interval": 2,
    },
}


def copy_batch(step: int, n: int = 24, batch: int = 16, vocab: int = 60) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    x = torch.randint(4, vocab, (batch, n), generator=g)
    x0 = torch.cat([x, torch.ones(batch, 1, dtype=torch.long), x], 1)
    target = torch.zeros_like(x0, dtype=torch.bool)
    target[:, n + 1 :] = True
    return {"x0": x0, "target": target, "valid": torch.ones_like(target)}


def main() -> None:
    rec = Recorder()  # the result file: this command line, its start, the tables printed
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    set_threads(args.threads)
    rows, figures = [], {}
    for name, over in VARIANTS.items():
        shape = {**AirspaceRecipe().model, **over}
        cfg = CloverConfig(vocab_size=64, mask_token_id=3, eos_token_id=2, pad_token_id=0, **shape)
        torch.manual_seed(0)
        model = CloverForBlockDiffusion(cfg)
        tc = TrainConfig(
            steps=args.steps,
            lr=2e-3,
            warmup=20,
            block_size=8,
            log_every=10**9,
            eval_every=10**9,
            masking=MaskingConfig(complementary=True, samples=1),
        )
        t0 = time.perf_counter()
        losses = [h["loss"] for h in Trainer(model, copy_batch, tc, None).fit(progress=False)]
        first, last = sum(losses[:10]) / 10, sum(losses[-20:]) / 20
        figures[name] = {"first10_loss": first, "last20_loss": last, "wall_s": time.perf_counter() - t0}
        rows.append([name, f"{first:.3f}", f"{last:.3f}", f"{figures[name]['wall_s']:.0f}"])
    print_table(
        rec,
        f"copy task, airspace model shape ({args.steps} steps, batch 16, {args.threads} thread(s))",
        ["variant", "loss, first 10 steps", "loss, last 20 steps", "s"],
        rows,
        ["uniform guessing is ln(56) = 4.03; a model that copies goes towards 0"],
    )
    write_json(rec, args.json, figures)


if __name__ == "__main__":
    main()
