"""The training loop: one process, or N processes under ``torchrun`` with PyTorch FSDP2.

Everything a step does is a function of (seed, step): the batch comes from the data source
for that step and the masks from a generator seeded with it. Resume therefore continues
bit-exactly, and every rank builds the same global batch and keeps its own rows.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm import tqdm

from clover.model import CloverForBlockDiffusion
from clover.model.layers import balance_loss
from clover.ops.device import resolve_device
from clover.train.checkpoint import load_checkpoint, write_checkpoint
from clover.train.fsdp import shard
from clover.train.layout import latest_checkpoint
from clover.train.objective import MaskingConfig, block_loss, build_batch, loss_normalizer, rows_of

# --time-budget: steps left untimed (warm-up), then steps timed to fit the schedule to the time
_UNTIMED, _TIMED = 3, 20

# A data source: step -> {"x0": [B, T] long, "target": [B, T] bool, "valid": [B, T] bool}
Source = Callable[[int], dict[str, torch.Tensor]]


@dataclass
class TrainConfig:
    steps: int = 1000
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    block_size: int = 32
    seed: int = 0
    log_every: int = 10
    eval_every: int = 500
    ckpt_every: int = 200
    micro_batches: int = 1  # per rank: rows sorted by length, each group padded only to its own longest
    masking: MaskingConfig = field(default_factory=MaskingConfig)
    # [lo, hi]: each step draws its block size from lo..hi, log-uniformly (as many steps at 1-3 as at
    # 32-64), so the memory slot's γ·ln n calibration sees many n; None: every step is block_size
    block_size_range: list[int] | None = None

    def block_size_at(self, step: int) -> int:
        """The block size of ``step``'s batch: a pure function of (seed, step), so the data source
        (which fills each answer's last block) and the loop agree, on every rank and on resume."""
        if self.block_size_range is None:
            return self.block_size
        lo, hi = self.block_size_range
        if not 1 <= lo <= hi:
            raise ValueError(f"block_size_range must be [lo, hi] with 1 <= lo <= hi, got {self.block_size_range}")
        u = random.Random(f"block-size-{self.seed}-{step}").random()
        return min(hi, int(math.exp(math.log(lo) + u * (math.log(hi + 1) - math.log(lo)))))

    def lr_at(self, step: int) -> float:
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        p = min(1.0, (step - self.warmup) / max(1, self.steps - self.warmup))
        return self.lr * (self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * p)))


def _dist() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def train_device(device: str = "auto") -> torch.device:
    """Where training runs: ``auto`` is this process's GPU when there is one (under torchrun the
    one of its ``LOCAL_RANK``), else the CPU; ``cpu`` / ``cuda`` force it (``resolve_device``: a GPU
    torch cannot see is a ValueError that says so)."""
    dev = resolve_device(device)
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if dev.type == "cuda" else dev


def setup_distributed(device: torch.device | None = None) -> tuple[int, int]:
    """Initialise the process group when launched by torchrun (gloo on CPU, nccl on GPU)."""
    device = device or train_device()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return _dist()


def shard_model(model: CloverForBlockDiffusion, dtype: torch.dtype = torch.float32) -> CloverForBlockDiffusion:
    """FSDP2 on a built model: shard every decoder layer, then the root, over all ranks on the
    model's device type (``fsdp.build_sharded`` builds a model sharded from the start)."""
    return shard(model, next(model.parameters()).device.type, dtype)


def length_groups(batch: dict[str, torch.Tensor], groups: int) -> list[dict[str, torch.Tensor]]:
    """Split a batch into ``groups`` parts of rows with similar lengths, each cut to its own
    longest row, so that short rows are not padded to the longest of the whole batch."""
    if groups <= 1:
        return [batch]
    lengths = batch["valid"].sum(1)
    order = lengths.argsort(stable=True)
    parts = []
    for idx in order.tensor_split(groups):
        if idx.numel() == 0:
            continue
        T = max(1, int(lengths[idx].max()))
        parts.append({k: v[:, idx, :T] if v.dim() == 3 else v[idx, :T] for k, v in batch.items()})
    return parts


class Trainer:
    def __init__(
        self,
        model: CloverForBlockDiffusion,
        source: Source,
        cfg: TrainConfig,
        run_dir: str | Path | None,
        evaluate: Callable[[CloverForBlockDiffusion, int], dict] | None = None,
        tokenizer=None,
    ):
        self.model, self.source, self.cfg = model, source, cfg
        self.run_dir = Path(run_dir) if run_dir else None
        self.evaluate = evaluate
        self.tokenizer = tokenizer  # saved into every checkpoint when given
        self.rank, self.world = _dist()
        self.device = next(model.parameters()).device  # batches are built on the CPU (seeded), then moved
        decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
        other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": other, "weight_decay": 0.0}],
            lr=cfg.lr,
            betas=(0.9, 0.95),
        )
        self.step = 0
        self.history: list[dict] = []

    def save(self) -> None:
        """Checkpoint the run in its model's format (``checkpoint.write_checkpoint``)."""
        write_checkpoint(self.run_dir, self.step, self.model, self.opt, {"config": asdict(self.cfg)}, self.tokenizer)

    def resume(self) -> bool:
        """Load the run's newest intact checkpoint (False: there is none). A newer one that is
        damaged (cut short, half written) is passed over, saying so in one line."""
        skipped: list[str] = []
        if self.run_dir is None or (ck := latest_checkpoint(self.run_dir, skipped)) is None:
            return False
        if skipped and self.rank == 0:
            print(f"clover train: passed over {'; '.join(skipped)}; resuming from {ck.name}", flush=True)
        state = load_checkpoint(ck, self.model, self.opt)
        self.step = state["step"]
        return True

    def train_step(self, step: int, data: dict[str, torch.Tensor] | None = None) -> dict:
        """One optimiser step on the global batch of ``step`` (``data``: that batch, already built
        by a prefetch worker); returns its figures."""
        cfg, model = self.cfg, self.model
        for g in self.opt.param_groups:
            g["lr"] = cfg.lr_at(step)
        data = self.source(step) if data is None else data
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
        bs = cfg.block_size_at(step)
        batch = build_batch(data["x0"], data["target"], data["valid"], model.config.mask_token_id, bs, cfg.masking, gen)
        batch = {k: v.to(self.device) for k, v in batch.items()}
        norm = loss_normalizer(batch, cfg.masking)  # over the global batch: ranks agree
        local = rows_of(batch, slice(self.rank, None, self.world))
        # the same number of groups on every rank (FSDP2 gathers weights once per forward)
        groups = max(1, min(cfg.micro_batches, batch["x0"].shape[0] // self.world))
        loss, stats = 0.0, 0.0
        for part in length_groups(local, groups):
            part_loss, _, out = block_loss(model, part, bs, cfg.masking, normalizer=norm)
            loss, stats = loss + part_loss, stats + out.router_stats  # [L, 2, E] sums over this rank's tokens
        if self.world > 1:
            counts = stats[:, 0].detach().clone()
            dist.all_reduce(counts)  # global routed fractions; probability sums stay local
            probs = stats[:, 1] * self.world  # x world: FSDP averages the gradients over ranks
            n_glob = counts.sum(-1, keepdim=True) / model.config.num_experts_per_tok
            aux = (model.config.num_experts * (counts / counts.sum(-1, keepdim=True)) * probs / n_glob).sum(-1).mean()
            loss = loss * self.world
        else:
            aux = torch.stack([balance_loss(s, model.config.num_experts_per_tok) for s in stats]).mean()
        return {**self._update(step, loss, aux, data), "masked": int(batch["mask"].sum()), "block_size": bs}

    def _update(self, step: int, loss: torch.Tensor, aux: torch.Tensor, data: dict[str, torch.Tensor]) -> dict:
        """Backward ``loss`` + the MoE balance term, clip, step; the step's figures (loss and aux
        averaged over ranks)."""
        cfg, model = self.cfg, self.model
        total = loss + model.config.router_aux_loss_coef * aux
        self.opt.zero_grad(set_to_none=True)
        total.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        self.opt.step()
        figs = torch.stack([loss.detach() / self.world, aux.detach() / self.world])
        if self.world > 1:
            dist.all_reduce(figs)
        return {
            "step": step,
            "loss": float(figs[0]),
            "aux": float(figs[1]),
            "lr": cfg.lr_at(step),
            "grad_norm": float(gnorm),
            "tokens": int(data["valid"].sum()),
        }

    def fit(
        self, progress: bool = True, until: int | None = None, workers: int = 0, time_budget: float | None = None
    ) -> list[dict]:
        """Train to ``cfg.steps`` (or stop early at step ``until``, as if interrupted).

        ``workers``: processes that build the coming steps' batches ahead (the source is a pure
        function of the step, so the batches, and the losses, are the same as without them).
        ``time_budget`` (seconds): fit the run to the time. After a few steps the schedule's
        length (``cfg.steps``, which the cosine decay reads) becomes the steps that fit in what
        is left (never more than asked); past the budget the run ends at once, with the final
        evaluation and checkpoint. All ranks take rank 0's decision."""
        cfg = self.cfg
        if self.run_dir and self.rank == 0:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        bar = tqdm(
            total=cfg.steps, initial=self.step, disable=not progress or self.rank != 0, desc="train", dynamic_ncols=True
        )
        log = open(self.run_dir / "train_log.jsonl", "a") if self.run_dir and self.rank == 0 else None
        batches = _prefetch(self.source, self.step, cfg.steps, workers) if workers > 0 else None
        t0, tok, start = time.perf_counter(), 0, self.step
        t_fit = None  # when the steps used to fit the schedule began
        try:
            while self.step < min(cfg.steps, until or cfg.steps):
                figs = self.train_step(self.step, next(batches) if batches is not None else None)
                self.step += 1
                tok += figs["tokens"]
                figs["tokens_per_s"] = tok / max(1e-9, time.perf_counter() - t0)
                self.history.append(figs)
                bar.update(1)
                if time_budget is not None:
                    t_fit = self._fit_to_time(time_budget, t0, start, t_fit, bar, log)
                if self.step % cfg.log_every == 0 or self.step == cfg.steps:
                    bar.set_postfix(loss=f"{figs['loss']:.3f}", tok_s=f"{figs['tokens_per_s']:.0f}")
                    if log:
                        log.write(json.dumps({**figs, "time": time.time()}) + "\n")
                        log.flush()
                if self.evaluate and (self.step % cfg.eval_every == 0 or self.step == cfg.steps):
                    res = self.evaluate(self.model, self.step)
                    if log and res:
                        log.write(json.dumps({"step": self.step, "eval": res, "time": time.time()}) + "\n")
                        log.flush()
                    if res:
                        bar.write(f"step {self.step}: " + _figures(res))
                if self.run_dir and (self.step % cfg.ckpt_every == 0 or self.step in (cfg.steps, until)):
                    self.save()
        finally:
            bar.close()
            if log:
                log.close()
        return self.history

    def _fit_to_time(self, budget: float, t0: float, start: int, t_fit, bar, log):
        """``fit``'s time budget, checked after each step: sets ``cfg.steps``."""
        cfg, now = self.cfg, time.perf_counter()
        done = self.step - start
        if done == _UNTIMED:  # the first steps pay for warm-up (allocator, kernels): timed from here
            return now
        want = cfg.steps
        if now - t0 >= budget:
            want = self.step
        elif done == _UNTIMED + _TIMED and t_fit is not None:
            per_step = (now - t_fit) / _TIMED
            want = min(cfg.steps, self.step + int(0.95 * (budget - (now - t0)) / per_step))
        if self.world > 1:  # every rank stops at the same step
            w = torch.tensor([want], device=self.device if self.device.type == "cuda" else "cpu")
            dist.broadcast(w, 0)
            want = int(w)
        if want != cfg.steps:
            cfg.steps = max(want, self.step)
            bar.total = cfg.steps
            if log:
                log.write(json.dumps({"step": self.step, "steps": cfg.steps, "time_budget": budget}) + "\n")
        return t_fit


class KindCE:
    """Validation cross-entropy summed by kind of token (``tokenizer.categories``: digit, word,
    markup, end, other): copying from the message shows up in digits and words."""

    def __init__(self, tok):
        self.names, cats = tok.categories()
        self.cats = torch.tensor(cats)
        self.sum = torch.zeros(len(self.names), dtype=torch.float64)
        self.n = torch.zeros(len(self.names))

    def add(self, tokens: torch.Tensor, ce: torch.Tensor) -> None:
        """``tokens`` [N] the scored token ids, ``ce`` [N] their cross-entropies, in the same order."""
        kind, ce = self.cats[tokens.cpu()], ce.detach().cpu()
        self.sum.index_add_(0, kind, ce.double())
        self.n.index_add_(0, kind, torch.ones_like(ce))

    def mean(self) -> float:
        return float(self.sum.sum() / self.n.sum())

    def by_kind(self) -> dict[str, float]:
        return {c: float(self.sum[k] / self.n[k]) for k, c in enumerate(self.names) if self.n[k]}


class _Steps(torch.utils.data.Dataset):
    """The source's batches for steps ``start..end-1``, for a DataLoader's workers."""

    def __init__(self, source: Source, start: int, end: int):
        self.source, self.start, self.end = source, start, end

    def __len__(self) -> int:
        return max(0, self.end - self.start)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return self.source(self.start + i)


def _prefetch(source: Source, start: int, end: int, workers: int):
    """An iterator over the batches of steps ``start..end-1``, built ahead by ``workers``
    processes, in step order."""
    loader = torch.utils.data.DataLoader(
        _Steps(source, start, end), batch_size=None, num_workers=workers, prefetch_factor=4
    )
    return iter(loader)


def _figures(res: dict) -> str:
    """``val_loss=0.61, val_ce=(digit 0.31, word 1.2)`` for the progress line."""

    def one(v):
        if isinstance(v, dict):
            return "(" + ", ".join(f"{k} {one(x)}" for k, x in v.items()) + ")"
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    return ", ".join(f"{k}={one(v)}" for k, v in res.items())
