"""``clover info``: a model's layer pattern and parameter counts: the bundled model (what
``clover serve`` and ``clover chat`` run by default), a checkpoint (``--model``) or a preset shape
(``--preset``)."""

from __future__ import annotations

import argparse
import json


def cmd_info(args: argparse.Namespace) -> int:
    import torch

    from clover.model import CloverForBlockDiffusion, preset
    from clover.model.config import ConfigError
    from clover.model.io import CheckpointError, load_config

    if args.preset and args.model:
        raise SystemExit("clover info: give --preset or --model, not both")
    model_dir = None
    try:
        if args.preset:
            config = preset(args.preset)
        else:
            from clover.data import default_model_dir

            model_dir = args.model or default_model_dir()
            config = load_config(model_dir)
    except (CheckpointError, ConfigError, TypeError, FileNotFoundError) as e:  # an unknown preset, no config.json
        raise SystemExit(f"clover info: {e}") from None
    with torch.device("meta"):  # no memory, even for 35B
        model = CloverForBlockDiffusion(config)
    counts = model.num_parameters()
    info = {
        "preset": args.preset,
        "model": None if model_dir is None else str(model_dir),
        **counts,
        "layer_types": config.layer_types,
        "hidden_size": config.hidden_size,
        "vocab_size": config.vocab_size,
        "num_experts": config.num_experts,
        "num_experts_per_tok": config.num_experts_per_tok,
        "shift_logits": config.shift_logits,
        "block_size": config.block_size,
    }
    if args.json:
        print(json.dumps(info))
        return 0
    from rich.console import Console
    from rich.table import Table

    what = f"preset {args.preset}" if args.preset else args.model or "the bundled model"
    t = Table(title=f"Clover model: {what}")
    t.add_column("field")
    t.add_column("value", justify="right")
    for key, label in (("total_params", "total parameters"), ("active_params", "active per token")):
        n = counts[key]
        t.add_row(label, f"{n:,} ({n / 1e9:.2f} B)" if n >= 1e9 else f"{n:,} ({n / 1e6:.1f} M)")
    pattern = "".join("A" if x == "full_attention" else "G" for x in config.layer_types)
    t.add_row("layers (G=GDN, A=attention)", pattern)
    for k in ("hidden_size", "vocab_size", "num_experts", "num_experts_per_tok", "block_size", "shift_logits"):
        t.add_row(k, str(info[k]))
    Console().print(t)
    return 0


def register(sub) -> None:
    s = sub.add_parser(
        "info", help="layer pattern and parameter counts of the bundled model, a checkpoint or a preset shape"
    )
    s.add_argument("--model", help="a checkpoint directory (default: the bundled model, which clover serve runs)")
    s.add_argument("--preset", help="a preset shape instead of a checkpoint: tiny, small, qwen3.6-35b-a3b")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_info)
