"""``clover train``: run a recipe in one process, or under ``torchrun`` with FSDP2."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import torch


def _export(model, tok, out: Path, extra: dict, rank: int) -> None:
    """Write a model directory (weights, config, tokenizer, training record). Every rank calls
    it: a sharded model's ranks write their shards, consolidated into the directory's weight
    files; a plain model is written by rank 0."""
    from clover.model.io import save_model
    from clover.train.fsdp import is_sharded
    from clover.train.sharded_checkpoint import write_model_dir

    if is_sharded(model):
        write_model_dir(model, out)
    elif rank == 0:
        save_model(model, out)
    if rank == 0:
        tok.save(out)
        (out / "training.json").write_text(json.dumps(extra, indent=1))


def _typed(v, current, what: str):
    """``v`` as the type of the field's ``current`` value (an int where a float is due is fine; a
    bool only where a bool is due); else refused by name."""
    want = type(current)
    if isinstance(v, bool) != (want is bool) or not isinstance(v, (int, float) if want is float else want):
        raise SystemExit(f"clover: {what} must be {want.__name__}, got {v!r}")
    return want(v)


def apply_overrides(recipe, over: dict, where: str) -> None:
    """``{"train": {...}, "model": {...}, "data": {...}}`` onto a recipe; unknown fields are refused
    by name. ``data`` holds the recipe's own scalar fields (batch size, decision share, curriculum)."""
    from dataclasses import fields

    from clover.train.objective import MaskingConfig

    if not isinstance(over, dict) or set(over) - {"train", "model", "data"}:
        raise SystemExit(f"clover: {where}: expected an object with 'train', 'model' and/or 'data' sections")
    for section, v in over.items():
        if not isinstance(v, dict):
            raise SystemExit(f"clover: {where}: section {section!r} must be an object of fields, got {v!r}")
    data = recipe.data_fields()
    for k, v in over.get("data", {}).items():
        if k not in data:
            raise SystemExit(f"clover: {where}: unknown data field {k!r}; known: {sorted(data)}")
        setattr(recipe, k, _typed(v, data[k], f"{where}: data field {k!r}"))
    known = {f.name for f in fields(recipe.train)}
    for k, v in over.get("train", {}).items():
        if k not in known:
            raise SystemExit(f"clover: {where}: unknown train field {k!r}; known: {sorted(known)}")
        if k == "masking":
            masking = {f.name for f in fields(MaskingConfig)}
            if not isinstance(v, dict):
                raise SystemExit(f"clover: {where}: train field 'masking' must be an object, got {v!r}")
            if set(v) - masking:
                bad = sorted(set(v) - masking)
                raise SystemExit(f"clover: {where}: unknown masking field(s) {bad}; known: {sorted(masking)}")
            try:
                v = MaskingConfig(**v)
            except (TypeError, ValueError) as e:
                raise SystemExit(f"clover: {where}: train field 'masking': {e}") from None
        elif getattr(recipe.train, k) is not None:  # a field without a default takes what it is given
            v = _typed(v, getattr(recipe.train, k), f"{where}: train field {k!r}")
        setattr(recipe.train, k, v)
    bad = sorted(set(over.get("model", {})) - set(recipe.model))
    if bad:
        raise SystemExit(f"clover: {where}: unknown model field(s) {bad}; known: {sorted(recipe.model)}")
    recipe.model.update(over.get("model", {}))


def _load_tokenizer(d: Path):
    from clover.data.tokenizer import CloverTokenizer

    try:
        return CloverTokenizer.load(d)
    except (FileNotFoundError, ValueError) as e:  # missing or corrupt tokenizer files
        raise SystemExit(f"clover train: {e}") from None


def _lines(lines: list) -> str:
    more = f" and {len(lines) - 5} more" if len(lines) > 5 else ""
    return ("line " if len(lines) == 1 else "lines ") + ", ".join(str(n) for n in lines[:5]) + more


def _fit_data(tok, examples: list[dict], path: str, max_len: int, rank: int) -> list[dict]:
    """The chats as training sees them (``recipes.fit_to_length``): an answer past ``max_len``
    tokens is never a target; what is left out or cut is said once, by line."""
    from clover.train.recipes import fit_to_length

    kept, dropped, cut = fit_to_length(tok, examples, max_len)
    hint = f'a --config file with {{"data": {{"max_len": N}}}} raises the limit of {max_len} tokens'
    if not kept:
        raise SystemExit(f"clover train: {path}: no example has an answer within its first {max_len} tokens; {hint}")
    if rank == 0 and (dropped or cut):
        said = []
        if dropped:
            said.append(f"{len(dropped)} left out (no answer within the first {max_len} tokens: {_lines(dropped)})")
        if cut:
            said.append(f"{len(cut)} with an answer cut at token {max_len} ({_lines(cut)})")
        print(f"clover train: warning: {path}: of {len(examples)} examples, {'; '.join(said)}; {hint}", file=sys.stderr)
    return kept


def _train_ar(args, recipe, tok, run: Path, device, rank: int, world: int, data, val_data, init_dir) -> int:
    """``clover train --recipe airspace-ar``: the autoregressive base, a Hugging Face
    ``Qwen3_5MoeForCausalLM`` trained with a next-token loss; checkpoints and ``--export`` are
    Hugging Face directories (``from_pretrained`` loads them; ``clover convert`` takes them)."""
    from clover.model.io import CheckpointError
    from clover.train.ar import ArTrainer, build_model, evaluate_ar
    from clover.train.checkpoint import gather_model_state
    from clover.train.hf import load_hf_state, save_hf
    from clover.train.recipes import airspace_source, chat_source
    from clover.train.trainer import shard_model

    if args.grow:
        raise SystemExit("clover train: --grow is for Clover models, not the autoregressive recipe")
    cfg = recipe.train
    try:
        config = recipe.hf_config(tok)
    except (TypeError, ValueError) as e:
        raise SystemExit(f"clover train: {e}") from None
    model = build_model(config)
    if init_dir:  # continue an AR base (same shape), with a fresh optimizer and schedule
        try:
            model.load_state_dict(load_hf_state(init_dir, model))
        except CheckpointError as e:
            raise SystemExit(f"clover train: --init-from: {e}") from None
    total = sum(p.numel() for p in model.parameters())
    model.to(device)
    if world > 1:
        model = shard_model(model)
    if data is not None:
        val_batches = [chat_source(tok, val_data, recipe, seed=99)(i) for i in range(4)]
        train_source = chat_source(tok, data, recipe, cfg.seed)
    else:
        val_source = airspace_source(tok, recipe, "validation", seed=99)
        val_batches = [val_source(recipe.curriculum_steps + i) for i in range(4)]
        train_source = airspace_source(tok, recipe, "train", seed=cfg.seed)

    def evaluate(m, step):
        res = evaluate_ar(m, val_batches, tok)
        if args.export:
            state = gather_model_state(m)
            if rank == 0:
                out = save_hf(m, tok, args.export, state=state)
                record = {"recipe": f"chat data {args.data}" if data is not None else args.recipe, "step": step,
                          **res, "total_params": total, "train": asdict(cfg), "data": recipe.data_fields()}  # fmt: skip
                if init_dir:
                    record["init_from"] = str(args.init_from)
                (out / "training.json").write_text(json.dumps(record, indent=1))
        return res

    trainer = ArTrainer(model, train_source, cfg, run, evaluate, tokenizer=tok)
    if args.resume and trainer.resume() and rank == 0:
        print(f"resumed from step {trainer.step}")
    if trainer.step >= cfg.steps and args.export:
        res = evaluate(model, trainer.step)
        if rank == 0:
            print(
                f"run already at step {trainer.step} of {cfg.steps}; exported to {args.export}: val_loss={res['val_loss']:.4g}"
            )
        return 0
    if rank == 0:
        print(f"model: {total:,} parameters (Qwen3.5-MoE, autoregressive); run dir {run}")
    model.train()
    budget = args.time_budget * 60 if args.time_budget is not None else None
    trainer.fit(progress=not args.no_progress, workers=args.workers, time_budget=budget)
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from clover.data.chat import render
    from clover.data.tokenizer import CloverTokenizer, build_default_tokenizer, default_added_tokens, train_tokenizer
    from clover.model import CloverConfig, CloverForBlockDiffusion
    from clover.model.config import ConfigError
    from clover.model.io import CheckpointError, load_config, resolve_dir
    from clover.train.ar import AirspaceArRecipe
    from clover.train.checkpoint import latest_checkpoint
    from clover.train.fsdp import DTYPES, apply_checkpointing, build_sharded, single_process_group
    from clover.train.objective import block_loss, build_batch, noisy_blocks
    from clover.train.recipes import RECIPES, airspace_source, chat_source, read_chat_jsonl
    from clover.train.trainer import KindCE, Trainer, setup_distributed, train_device
    from clover.train.warm_start import init_weights

    RECIPES = {**RECIPES, "airspace-ar": AirspaceArRecipe}

    if args.threads < 1:
        raise SystemExit(f"clover train: --threads must be >= 1, got {args.threads}")
    if args.workers < 0:
        raise SystemExit(f"clover train: --workers must be >= 0, got {args.workers}")
    if args.time_budget is not None and not args.time_budget > 0:
        raise SystemExit(f"clover train: --time-budget must be > 0 minutes, got {args.time_budget}")
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    try:
        device = train_device(args.device)
    except ValueError as e:
        raise SystemExit(f"clover train: --device: {e}") from None
    rank, world = setup_distributed(device)
    if device.type == "cuda":  # TF32 tensor cores for fp32 matmuls (10-bit mantissa inputs, fp32 sums)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if args.recipe not in RECIPES:
        raise SystemExit(f"clover: unknown recipe {args.recipe!r}; choose from {sorted(RECIPES)}")
    recipe = RECIPES[args.recipe]()
    if isinstance(recipe, AirspaceArRecipe):
        for flag, on in (
            ("--dtype bfloat16", args.dtype != "float32"),
            ("--activation-checkpointing", args.activation_checkpointing),
        ):
            if on:
                raise SystemExit(f"clover train: {flag} is for the Clover recipes; the autoregressive recipe "
                                 "trains its transformers model in float32 without it")  # fmt: skip
    over = {}
    if args.config:
        try:
            over = json.loads(Path(args.config).read_text())
        except OSError as e:
            raise SystemExit(f"clover train: --config {args.config}: {e.strerror}") from None
        except ValueError as e:
            raise SystemExit(f"clover train: --config {args.config}: not valid JSON ({e})") from None
        apply_overrides(recipe, over, args.config)
    if args.steps is not None:
        if args.steps < 0:
            raise SystemExit(f"clover train: --steps must be >= 0, got {args.steps}")
        recipe.train.steps = args.steps
    data = val_data = None
    if args.data:
        try:
            data = read_chat_jsonl(args.data)
            val_data = read_chat_jsonl(args.val_data) if args.val_data else None
        except (OSError, ValueError) as e:
            raise SystemExit(f"clover train: {e}") from None
    elif args.val_data:
        raise SystemExit("clover train: --val-data needs --data")
    if args.grow and not args.init_from:
        raise SystemExit("clover train: --grow needs --init-from")
    init_dir = resolve_dir(args.init_from) if args.init_from else None
    try:  # the source's config, read (and checked) once, before anything is written
        init_config = load_config(init_dir) if init_dir and not isinstance(recipe, AirspaceArRecipe) else None
    except CheckpointError as e:
        raise SystemExit(f"clover train: --init-from {args.init_from}: {e}") from None
    if init_config is not None and init_config.quantization is not None:
        raise SystemExit(f"clover train: --init-from {args.init_from} is a quantized checkpoint (inference only); "
                         "train from its full-precision source")  # fmt: skip
    for flag, d in (("--out", args.out), ("--export", args.export)):
        if d and Path(d).exists() and not Path(d).is_dir():
            raise SystemExit(f"clover train: {flag} {d}: exists and is not a directory")
    run = Path(args.out)
    if (run / "tokenizer.json").exists():
        tok = _load_tokenizer(run)  # a resumed run keeps its tokenizer
    elif init_dir:
        tok = _load_tokenizer(init_dir)  # the weights' own tokenizer
    elif data is not None:  # from scratch on your data: a byte-level BPE trained on it
        texts = [render(e["messages"], e["tools"]) for e in data]
        tok = CloverTokenizer(train_tokenizer(texts, recipe.tokenizer_vocab, default_added_tokens()))
    else:
        tok = build_default_tokenizer(recipe.tokenizer_vocab)
    if data is not None:  # checked against max_len before anything is written to --out
        data = _fit_data(tok, data, args.data, recipe.max_len, rank)
        val_data = _fit_data(tok, val_data, args.val_data, recipe.max_len, rank) if val_data is not None else None
        if val_data is None:  # hold out the last 5 % (at least one example) when there are 20+
            k = len(data) // 20 if len(data) >= 20 else 0
            data, val_data = (data[:-k], data[-k:]) if k else (data, data)
    try:
        run.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SystemExit(f"clover train: --out {args.out}: cannot create the run directory ({e.strerror})") from None
    if rank == 0 and not (run / "tokenizer.json").exists():
        tok.save(run)
    torch.manual_seed(recipe.train.seed)
    if isinstance(recipe, AirspaceArRecipe):
        return _train_ar(args, recipe, tok, run, device, rank, world, data, val_data, init_dir)
    ck = latest_checkpoint(run) if args.resume else None
    try:
        # a resumed run keeps its checkpoint's shape, a warm start its model's own; --config's
        # "model" fields apply on top (an ablation switch, more layers with --grow)
        base = CloverConfig.load(ck / "config.json") if ck is not None else init_config
        if base is not None:
            config = CloverConfig.from_dict({**base.to_dict(), **over.get("model", {})})
        else:
            config = recipe.model_config(tok)
    except (ConfigError, TypeError) as e:  # e.g. a --config model field of the wrong type
        raise SystemExit(f"clover train: {e}") from None
    # several processes, or bf16: FSDP2 from the meta device, each rank holding only its rows
    # (one process gets a process group of one); else the plain model of one process
    sharded = world > 1 or args.dtype != "float32"
    if sharded:
        if world == 1:
            single_process_group(device)
        dtype, fresh = DTYPES[args.dtype], init_dir is None or args.grow  # a warm start sets every weight
        model = build_sharded(config, device, dtype, args.activation_checkpointing, recipe.train.seed, init=fresh)
    else:
        model = CloverForBlockDiffusion(config)
        if args.activation_checkpointing:
            apply_checkpointing(model)
    grown = init_weights(model, init_dir, grow=args.grow) if init_dir else None  # streamed, rank by rank
    counts = model.num_parameters()  # global counts (a shard's numel is its whole parameter's)
    if not sharded:
        model.to(device)
    if data is not None:
        val_batches = [chat_source(tok, val_data, recipe, seed=99)(i) for i in range(4)]
    else:
        val_source = airspace_source(tok, recipe, "validation", seed=99)
        val_batches = [val_source(recipe.curriculum_steps + i) for i in range(4)]  # the full mix, past the curriculum
    cfg = recipe.train

    def evaluate(m, step):
        m.eval()
        tot, n = 0.0, 0
        kinds = KindCE(tok)  # mean cross-entropy of the masked tokens by kind
        with torch.no_grad():
            for i, vb in enumerate(val_batches):
                b = build_batch(
                    vb["x0"],
                    vb["target"],
                    vb["valid"],
                    m.config.mask_token_id,
                    cfg.block_size,
                    cfg.masking,
                    torch.Generator().manual_seed(i),
                )
                b = {k: v.to(device) for k, v in b.items()}
                loss, ce, _ = block_loss(m, b, cfg.block_size, cfg.masking)
                tot += float(loss)
                n += 1
                nb = noisy_blocks(b, cfg.block_size)
                kinds.add(nb["y"][nb["mask"]], ce)  # the same masked positions, in the same order as ce
        m.train()
        res = {"val_loss": tot / n, "val_ce": kinds.by_kind()}
        if args.export:
            record = {"recipe": f"chat data {args.data}" if data is not None else args.recipe, "step": step, "val_loss": res["val_loss"], "val_ce": res["val_ce"], **counts,
                      "train": asdict(cfg)}  # fmt: skip
            if data is None:  # the recipe's data fields (batch size, decision share, curriculum)
                record["data"] = recipe.data_fields()
            if args.init_from:
                record["init_from"] = str(args.init_from)
            if grown:  # layer i of this model started from layer grown[i] of --init-from (None: new)
                record["grown_layers"] = grown
            _export(m, tok, Path(args.export), record, rank)
        return res

    train_source = (
        chat_source(tok, data, recipe, cfg.seed)
        if data is not None
        else airspace_source(tok, recipe, "train", seed=cfg.seed)
    )
    trainer = Trainer(model, train_source, cfg, run, evaluate, tokenizer=tok)
    if args.resume and trainer.resume() and rank == 0:
        print(f"resumed from step {trainer.step}")
    if trainer.step >= cfg.steps and args.export:  # nothing to train (a finished run, --steps 0)
        if rank == 0:
            print(f"run already at step {trainer.step} of {cfg.steps}; exporting to {args.export}")
        res = evaluate(model, trainer.step)  # every rank: the export gathers a sharded model
        if rank == 0:
            print(f"step {trainer.step}: val_loss={res['val_loss']:.4g}")
        return 0
    if rank == 0 and counts:
        print(f"model: {counts['total_params']:,} parameters ({counts['active_params']:,} active); run dir {run}")
    model.train()
    budget = args.time_budget * 60 if args.time_budget is not None else None
    trainer.fit(progress=not args.no_progress, workers=args.workers, time_budget=budget)
    return 0


def register(sub) -> None:
    p = sub.add_parser("train", help="train a model with a recipe (one process, or torchrun + FSDP2)")
    p.add_argument(
        "--recipe",
        default="airspace",
        help="airspace: the block-diffusion model; airspace-ar: its autoregressive base (a Hugging Face "
        "Qwen3.5-MoE causal LM, next-token loss; checkpoints in Hugging Face format)",
    )
    p.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="auto: this process's GPU when there is one (torchrun: LOCAL_RANK's), else the CPU",
    )
    p.add_argument(
        "--out",
        default=str(Path.home() / ".cache" / "clover" / "runs" / "airspace"),
        help="run directory: checkpoints, tokenizer, train_log.jsonl",
    )
    p.add_argument(
        "--config", help="JSON file overriding recipe fields: {'train': {...}, 'model': {...}, 'data': {...}}"
    )
    p.add_argument("--steps", type=int, help="total optimiser steps")
    p.add_argument("--resume", action="store_true", help="continue from the run directory's latest checkpoint")
    p.add_argument("--init-from", help="start from this model directory's weights (fresh optimizer and schedule)")
    p.add_argument(
        "--grow",
        action="store_true",
        help="with --init-from: the run's model may add layers (set layer_types in --config); the source's "
        "layers are matched in order by type, new layers start as identity (zeroed output projections)",
    )
    p.add_argument(
        "--data",
        help="train on your chats instead of the recipe's corpus: JSONL in OpenAI's fine-tuning format, one "
        '{"messages": [...], "tools": [...]} per line (with --init-from: fine-tune that model, its own shape '
        "and tokenizer; else the recipe's model and a tokenizer trained on the data)",
    )
    p.add_argument("--val-data", help="validation chats (same format; default: the last 5 %% of --data)")
    p.add_argument("--export", help="also write the model + tokenizer here at every evaluation")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument(
        "--workers",
        type=int,
        default=0,
        help="processes that build the coming batches ahead (same batches; for a GPU that outpaces one CPU core)",
    )
    p.add_argument(
        "--time-budget",
        type=float,
        metavar="MINUTES",
        help="fit the run to this wall time: the schedule's length becomes the steps that fit (at most --steps), "
        "then the run ends with its final evaluation and checkpoint",
    )
    p.add_argument(
        "--dtype",
        default="float32",
        choices=["bfloat16", "float32"],
        help="bfloat16: FSDP2 mixed precision (bf16 compute, fp32 master weights, gradients and optimizer "
        "state); the model is built sharded from the meta device, also in one process",
    )
    p.add_argument(
        "--activation-checkpointing",
        action="store_true",
        help="recompute each decoder layer's activations in the backward pass (less memory, same losses)",
    )
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_train)
