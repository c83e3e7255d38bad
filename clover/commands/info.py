"""``clover info``: a model's layer pattern and parameter counts (a preset or a checkpoint)."""

from __future__ import annotations

import argparse
import json


def cmd_info(args: argparse.Namespace) -> int:
    import torch

    from clover.model import CloverForBlockDiffusion, preset
    from clover.model.config import ConfigError
    from clover.model.io import CheckpointError, load_config

    try:
        config = load_config(args.model) if args.model else preset(args.preset)
    except (CheckpointError, ConfigError, TypeError) as e:  # an unknown preset, or a missing or invalid config.json
        raise SystemExit(f"clover info: {e}") from None
    with torch.device("meta"):  # no memory, even for 35B
        model = CloverForBlockDiffusion(config)
    counts = model.num_parameters()
    info = {
        "preset": args.preset if not args.model else None,
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

    t = Table(title=f"Clover model: {args.model or args.preset}")
    t.add_column("field")
    t.add_column("value", justify="right")
    t.add_row("total parameters", f"{counts['total_params']:,} ({counts['total_params'] / 1e9:.2f} B)")
    t.add_row("active per token", f"{counts['active_params']:,} ({counts['active_params'] / 1e9:.2f} B)")
    pattern = "".join("A" if x == "full_attention" else "G" for x in config.layer_types)
    t.add_row("layers (G=GDN, A=attention)", pattern)
    for k in ("hidden_size", "vocab_size", "num_experts", "num_experts_per_tok", "block_size", "shift_logits"):
        t.add_row(k, str(info[k]))
    Console().print(t)
    return 0


def register(sub) -> None:
    s = sub.add_parser("info", help="layer pattern and parameter counts of a preset or checkpoint")
    s.add_argument("--preset", default="small", help="tiny, small, qwen3.6-35b-a3b")
    s.add_argument("--model", help="a checkpoint directory instead of a preset")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_info)
