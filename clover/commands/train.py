"""``clover train``: the flags of a training run; ``clover.train.run`` runs it (one process, or
under ``torchrun`` with FSDP2)."""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path

from clover.data.task import deprecated


def cmd_train(args: argparse.Namespace) -> int:
    from clover.train.run import train  # deferred: torch and the model, not for --help
    from clover.train.setup import RunSpec, SetupError

    args.recipe = deprecated(args.recipe, "clover train")  # airspace2: the task's former name
    spec = RunSpec(
        **{f.name: getattr(args, f.name) for f in fields(RunSpec) if f.name != "progress"},
        progress=not args.no_progress,
    )
    try:
        return train(spec)
    except SetupError as e:
        raise SystemExit(f"clover train: {e}") from None


def register(sub) -> None:
    p = sub.add_parser("train", help="train a model with a recipe (one process, or torchrun + FSDP2)")
    p.add_argument(
        "--recipe",
        default="airspace",
        help="airspace (default): the bundled block-diffusion model's recipe; airspace-ar: its autoregressive "
        "twin (a Hugging Face Qwen3.5-MoE causal LM, next-token loss; checkpoints in Hugging Face format); "
        "airspace2: the former name of airspace",
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
