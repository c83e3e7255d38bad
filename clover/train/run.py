"""A training run from start to end: its setup (``clover.train.setup``: the ``RunSpec`` of
``clover train`` → a ``Run``), then the model (plain, or FSDP2 sharded from the meta device), the
evaluate/export step and the fit, resumed when asked.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from clover.data.tokenizer import CloverTokenizer
from clover.model import CloverConfig, CloverForBlockDiffusion
from clover.model.config import ConfigError
from clover.model.io import CheckpointError, save_model
from clover.ops.device import resolve_dtype
from clover.train.ar import ArTrainer, build_model, evaluate_ar
from clover.train.checkpoint import gather_model_state
from clover.train.fsdp import apply_checkpointing, build_sharded, is_sharded, single_process_group
from clover.train.hf_checkpoint import load_hf_state, save_hf
from clover.train.layout import latest_checkpoint
from clover.train.objective import block_loss, build_batch, noisy_blocks
from clover.train.setup import Run, RunSpec, SetupError, setup
from clover.train.sharded_checkpoint import write_model_dir
from clover.train.trainer import KindCE, Trainer, shard_model
from clover.train.warm_start import init_weights


def train(spec: RunSpec) -> int:
    """Run ``spec`` to its end (or its time budget); returns the exit code."""
    run = setup(spec)
    if run.recipe.autoregressive:
        return fit_ar(run)
    return fit_clover(run)


# -- the Clover model ---------------------------------------------------------------------------------
def build_clover_model(run: Run) -> tuple[CloverForBlockDiffusion, bool, list | None]:
    """The model to train → (model, sharded, grown layers). A resumed run keeps its checkpoint's
    shape, a warm start its model's own; ``--config``'s "model" fields apply on top (an ablation
    switch, more layers with ``--grow``). Several processes, or bf16: FSDP2 from the meta device,
    each rank holding only its rows (one process gets a process group of one); else the plain
    model of one process."""
    spec = run.spec
    ck = latest_checkpoint(run.dir) if spec.resume else None
    try:
        base = CloverConfig.load(ck / "config.json") if ck is not None else run.init_config
        if base is not None:
            config = CloverConfig.from_dict({**base.to_dict(), **run.over.get("model", {})})
            if run.data is None:  # trained on its recipe's corpus: the model now answers that recipe's task
                config.extra = {**config.extra, **run.recipe.model_config(run.tok).extra}
        else:
            config = run.recipe.model_config(run.tok)
    except (ConfigError, TypeError) as e:  # e.g. a --config model field of the wrong type
        raise SetupError(str(e)) from None
    sharded = run.world > 1 or spec.dtype != "float32"
    if sharded:
        if run.world == 1:
            single_process_group(run.device)
        fresh = run.init_dir is None or spec.grow  # a warm start sets every weight
        model = build_sharded(
            config,
            run.device,
            resolve_dtype(spec.dtype, run.device),
            spec.activation_checkpointing,
            run.recipe.train.seed,
            init=fresh,
        )
    else:
        model = CloverForBlockDiffusion(config)
        if spec.activation_checkpointing:
            apply_checkpointing(model)
    grown = init_weights(model, run.init_dir, grow=spec.grow) if run.init_dir else None  # streamed, rank by rank
    if not sharded:
        model.to(run.device)
    return model, sharded, grown


def validation_loss(model, batches: list[dict], cfg, tok: CloverTokenizer, device: torch.device) -> dict:
    """The masked-token loss of the validation batches (each masked with its own fixed seed) and
    the mean cross-entropy of the masked tokens by kind."""
    model.eval()
    tot = 0.0
    kinds = KindCE(tok)
    with torch.no_grad():
        for i, vb in enumerate(batches):
            b = build_batch(
                vb["x0"],
                vb["target"],
                vb["valid"],
                model.config.mask_token_id,
                cfg.block_size,
                cfg.masking,
                torch.Generator().manual_seed(i),
            )
            b = {k: v.to(device) for k, v in b.items()}
            loss, ce, _ = block_loss(model, b, cfg.block_size, cfg.masking, train=False)
            tot += float(loss)
            nb = noisy_blocks(b, cfg.block_size)
            kinds.add(nb["y"][nb["mask"]], ce)  # the same masked positions, in the same order as ce
    model.train()
    return {"val_loss": tot / len(batches), "val_ce": kinds.by_kind()}


def export_model(model, tok: CloverTokenizer, out: Path, record: dict, rank: int) -> None:
    """Write a model directory (weights, config, tokenizer, training record). Every rank calls
    it: a sharded model's ranks write their shards, consolidated into the directory's weight
    files; a plain model is written by rank 0."""
    if is_sharded(model):
        write_model_dir(model, out)
    elif rank == 0:
        save_model(model, out)
    if rank == 0:
        tok.save(out)
        (out / "training.json").write_text(json.dumps(record, indent=1))


def fit_clover(run: Run) -> int:
    """Train a Clover model: evaluate (and export) at every evaluation, resume when asked."""
    model, _, grown = build_clover_model(run)
    counts = model.num_parameters()  # global counts (a shard's numel is its whole parameter's)
    val_batches, cfg = run.source(validation=True), run.recipe.train

    def evaluate(m, step):
        res = validation_loss(m, val_batches, cfg, run.tok, run.device)
        if run.spec.export:
            record = run.record(step, {**res, **counts})
            if grown:  # layer i of this model started from layer grown[i] of --init-from (None: new)
                record["grown_layers"] = grown
            export_model(m, run.tok, Path(run.spec.export), record, run.rank)
        return res

    trainer = Trainer(model, run.source(), cfg, run.dir, evaluate, tokenizer=run.tok)
    about = f"{counts['total_params']:,} parameters ({counts['active_params']:,} active)" if counts else None
    return fit(run, trainer, evaluate, about)


def fit(run: Run, trainer: Trainer, evaluate, about: str | None) -> int:
    """Resume when asked; a run already at its last step only evaluates (and exports); else fit."""
    spec, rank = run.spec, run.rank
    if spec.resume and trainer.resume() and rank == 0:
        print(f"resumed from step {trainer.step}")
    if trainer.step >= trainer.cfg.steps and spec.export:  # nothing to train (a finished run, --steps 0)
        if rank == 0:
            print(f"run already at step {trainer.step} of {trainer.cfg.steps}; exporting to {spec.export}")
        res = evaluate(trainer.model, trainer.step)  # every rank: the export gathers a sharded model
        if rank == 0:
            print(f"step {trainer.step}: val_loss={res['val_loss']:.4g}")
        return 0
    if rank == 0 and about:
        print(f"model: {about}; run dir {run.dir}")
    trainer.model.train()
    budget = spec.time_budget * 60 if spec.time_budget is not None else None
    trainer.fit(progress=spec.progress, workers=spec.workers, time_budget=budget)
    return 0


def fit_ar(run: Run) -> int:
    """Train an autoregressive recipe: a Hugging Face
    ``Qwen3_5MoeForCausalLM`` with a next-token loss; checkpoints and ``--export`` are Hugging Face
    directories (``from_pretrained`` loads them; ``clover convert`` takes them)."""
    spec, tok, cfg = run.spec, run.tok, run.recipe.train
    try:
        model = build_model(run.recipe.hf_config(tok))
    except (TypeError, ValueError) as e:
        raise SetupError(str(e)) from None
    if run.init_dir:  # continue an AR base (same shape), with a fresh optimizer and schedule
        try:
            model.load_state_dict(load_hf_state(run.init_dir, model))
        except CheckpointError as e:
            raise SetupError(f"--init-from: {e}") from None
    total = sum(p.numel() for p in model.parameters())
    model.to(run.device)
    if run.world > 1:
        model = shard_model(model)
    val_batches = run.source(validation=True)

    def evaluate(m, step):
        res = evaluate_ar(m, val_batches, tok)
        if spec.export:
            state = gather_model_state(m)
            if run.rank == 0:
                out = save_hf(m, tok, spec.export, state=state)
                record = {**run.record(step, {**res, "total_params": total}), "data": run.recipe.data_fields()}
                (out / "training.json").write_text(json.dumps(record, indent=1))
        return res

    trainer = ArTrainer(model, run.source(), cfg, run.dir, evaluate, tokenizer=tok)
    return fit(run, trainer, evaluate, f"{total:,} parameters (Qwen3.5-MoE, autoregressive)")
