"""``clover quantize``: a full-precision checkpoint → a weight-only int8 or int4 one
(docs/quantization.md). The tokenizer and every other file of the directory are copied along;
every command that takes ``--model`` loads the result."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from clover.commands.common import int_at_least


def cmd_quantize(args: argparse.Namespace) -> int:
    import torch  # deferred: torch, not for clover --help

    from clover.model.io import CheckpointError, load_model, resolve_dir, save_model  # deferred: loads torch
    from clover.model.quant import DEFAULT_GROUP_SIZE, QuantError, quantize_model, weight_bytes  # deferred: loads torch

    src = resolve_dir(args.model)
    out = Path(args.out)
    if not src.is_dir():
        raise SystemExit(f"clover quantize: {src}: no such checkpoint directory")
    if out.exists() and (not out.is_dir() or out.resolve() == src.resolve()):
        raise SystemExit(f"clover quantize: --out {out}: must be a new directory, not the source or a file")
    try:
        model = load_model(src)
    except CheckpointError as e:
        raise SystemExit(f"clover quantize: {e}") from None
    if model.config.quantization is not None:
        raise SystemExit(f"clover quantize: {src} is already quantized ({model.config.quantization['bits']}-bit)")
    group = DEFAULT_GROUP_SIZE[args.bits] if args.group_size is None else args.group_size
    torch.set_num_threads(args.threads or torch.get_num_threads())
    try:
        quantize_model(model, args.bits, group)
    except QuantError as e:
        raise SystemExit(f"clover quantize: {e}") from None
    out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():  # tokenizer, training notes ...: everything but config and weights
        if f.is_file() and f.name != "config.json" and not f.name.startswith("model"):
            shutil.copy2(f, out / f.name)
    save_model(model, out)
    full = weight_bytes(model.config.replace(quantization=None))["total"]
    got = sum(p.stat().st_size for p in out.glob("model*.safetensors"))
    what = "one group per row" if group == 0 else f"groups of {group}"
    print(
        f"{out}: {args.bits}-bit weights ({what}), {len(model.config.quantization['modules'])} weights quantized; "
        f"weights file {got / 1e6:.1f} MB (fp32 {full / 1e6:.1f} MB, {got / full:.2f}x)"
    )
    return 0


def register(sub) -> None:
    s = sub.add_parser(
        "quantize",
        help="weight-only int8/int4 quantization of a checkpoint (docs/quantization.md)",
        description="Group-wise round-to-nearest quantization of the attention, GDN, shared-expert and "
        "expert projections; embeddings, norms, router, gates and Clover's small parameters stay in "
        "full precision. The result loads wherever --model is taken.",
    )
    s.add_argument("--model", required=True, help="a full-precision Clover checkpoint directory")
    s.add_argument("--out", required=True, help="directory to write the quantized checkpoint to")
    s.add_argument("--bits", type=int, choices=[8, 4], required=True, help="8: symmetric int8; 4: asymmetric int4")
    s.add_argument(
        "--group-size",
        type=int_at_least(0),
        help="inputs per scale; 0: one scale per output row (default: 0 for --bits 8, the int8 kernel's "
        "layout; 128 for --bits 4). Must divide every quantized layer's input dim longer than it; "
        "a shorter row is one group",
    )
    s.add_argument("--threads", type=int_at_least(1), help="torch CPU threads")
    s.set_defaults(func=cmd_quantize)
