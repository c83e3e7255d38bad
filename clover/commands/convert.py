"""``clover convert --from HF_DIR --out DIR``: a Qwen3.5/3.6 (dense or MoE) or Qwen3-Next checkpoint → a
Clover checkpoint (docs/conversion.md)."""

from __future__ import annotations

import argparse
import json
import sys

from clover.commands.common import positive_int


def cmd_convert(args: argparse.Namespace) -> int:
    from clover.convert import ConversionError, convert  # deferred: loads torch, not for clover --help

    try:
        report = convert(
            args.source,
            args.out,
            dtype=args.dtype,
            block_size=args.block_size,
            max_shard_bytes=int(args.max_shard_gb * 2**30),
            calib_seqs=args.calib_seqs,
            calib_blocks=args.calib_blocks,
            seed=args.seed,
            progress=not args.quiet,
        )
    except ConversionError as e:
        print(f"clover convert: {e}", file=sys.stderr)
        return 2
    if args.json:
        d = {k: (str(v) if k == "out" else v) for k, v in vars(report).items()}
        print(json.dumps(d))
    else:
        print(report.summary())
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "convert",
        help="convert a Qwen3.5/3.6 (dense or MoE) or Qwen3-Next checkpoint (Hugging Face, safetensors) into a "
        "Clover checkpoint",
        description="Reads model_type qwen3_5_moe, qwen3_5 (dense) or qwen3_next. Streams the checkpoint tensor "
        "by tensor (one layer in memory at a time), maps every tensor through its family's name map (the vision "
        "tower is left out and the MTP head dropped, each reported), initialises Clover's new parameters as the "
        "design says, picks or adds the [MASK] token and copies the tokenizer files and chat template.",
    )
    p.add_argument("--from", dest="source", required=True, metavar="HF_DIR", help="Hugging Face checkpoint directory")
    p.add_argument("--out", required=True, metavar="DIR", help="output Clover checkpoint directory")
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16", help="weight dtype (default bf16)")
    p.add_argument("--block-size", type=positive_int, default=32, help="default decoding block size (default 32)")
    p.add_argument("--max-shard-gb", type=float, default=2.0, help="largest output shard in GiB (default 2)")
    p.add_argument(
        "--calib-seqs",
        type=int,
        default=4,
        help="random-token sequences that calibrate the readout scale rho (default 4; 0: rho = 1)",
    )
    p.add_argument("--calib-blocks", type=int, default=8, help="blocks per calibration sequence (default 8)")
    p.add_argument("--seed", type=int, default=0, help="seed of the calibration tokens")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_convert)
