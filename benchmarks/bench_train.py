"""Training-step throughput on the airspace recipe's model and data, three ways in one run.

* ``full``: the two-stream forward over every block (``forward_train``), one mask per sequence,
  the batch padded to its longest row: how the trainer worked before the noisy stream became a
  set of blocks;
* ``blocks``: the training call on the blocks that carry a mask only (same masks, same loss);
* ``recipe``: what ``clover train --recipe airspace`` runs: 16 sequences, 2 masks + their
  complements per sequence sharing one clean stream, rows grouped by length (4 groups).

The figure that matters is masked tokens per second: each masked token is one term of the loss.

python benchmarks/bench_train.py [--steps 6] [--json out.json] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from clover.airspace.diffusion_recipe import Airspace2Recipe, airspace2_source
from clover.bench import print_table, set_threads, write_json
from clover.bench.results import Recorder
from clover.data import default_model_dir
from clover.data.tokenizer import CloverTokenizer
from clover.model import CloverForBlockDiffusion
from clover.train.objective import MaskingConfig, build_batch, loss_normalizer
from clover.train.trainer import Trainer


class FullForwardTrainer(Trainer):
    """The reference step: noisy stream over every block of every row, one view per sequence."""

    def train_step(self, step: int) -> dict:
        cfg, model = self.cfg, self.model
        data = self.source(step)
        gen = torch.Generator().manual_seed(step)
        b = build_batch(data["x0"], data["target"], data["valid"], model.config.mask_token_id, 32, cfg.masking, gen)
        out = model.forward_train(b["x0"], b["xt"][0], 32, b["valid"])
        mask = b["mask"][0]
        ce = F.cross_entropy(out.logits[mask].float(), b["x0"][mask], reduction="none")
        loss = (ce * b["weight"][0][mask]).sum() / loss_normalizer(b, cfg.masking) + 1e-3 * out.aux_loss
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return {"loss": loss.item(), "masked": int(mask.sum())}


def run(name: str, batch: int, masking: MaskingConfig, groups: int, steps: int, tok, full: bool = False) -> dict:
    recipe = Airspace2Recipe(batch_size=batch)
    recipe.train.masking, recipe.train.micro_batches = masking, groups
    recipe.train.block_size_range = None  # one block size, the same for every way
    source = airspace2_source(tok, recipe)  # the same data for every way
    torch.manual_seed(0)
    model = CloverForBlockDiffusion(recipe.model_config(tok))
    trainer = (FullForwardTrainer if full else Trainer)(model, source, recipe.train, None)
    first = 1000
    trainer.train_step(first - 1)  # warm-up
    t0, masked, seqs = time.perf_counter(), 0, 0
    for s in range(first, first + steps):
        masked += trainer.train_step(s)["masked"]
        seqs += batch
    wall = time.perf_counter() - t0
    return {
        "way": name,
        "s_per_step": wall / steps,
        "sequences_per_s": seqs / wall,
        "masked_tokens_per_s": masked / wall,
        "masked_per_step": masked / steps,
    }


def main() -> None:
    rec = Recorder()  # the result file: this command line, its start, the tables printed
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=6, help="timed steps per way")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    set_threads(args.threads)
    tok = CloverTokenizer.load(default_model_dir())
    one = MaskingConfig(t_min=0.05, t_max=1.0, complementary=False, samples=1)
    rows = [
        run("full", 8, one, 1, args.steps, tok, full=True),
        run("blocks", 8, one, 1, args.steps, tok),
        run("recipe", 16, Airspace2Recipe().train.masking, 4, args.steps, tok),
    ]
    base = rows[0]["masked_tokens_per_s"]
    for r in rows:
        r["masked_tokens_per_s_vs_full"] = r["masked_tokens_per_s"] / base
    print_table(
        rec,
        f"training step, airspace model and data ({args.steps} steps each, {args.threads} thread(s))",
        ["way", "s / step", "sequences / s", "masked tokens / step", "masked tokens / s", "vs full"],
        [
            [
                r["way"],
                f"{r['s_per_step']:.3f}",
                f"{r['sequences_per_s']:.1f}",
                f"{r['masked_per_step']:.0f}",
                f"{r['masked_tokens_per_s']:.0f}",
                f"{r['masked_tokens_per_s_vs_full']:.2f}x",
            ]
            for r in rows
        ],
        [
            "full: noisy stream over every block; blocks: only blocks with a mask (same loss, tested)",
            "recipe: 16 sequences x (2 masks + complements), one clean stream each, 4 length groups",
        ],
    )
    write_json(rec, args.json, {r["way"]: r for r in rows})


if __name__ == "__main__":
    main()
