"""``clover export hf --model DIR --out HF_DIR``: a Clover checkpoint → a folder that Hugging Face
transformers loads with ``trust_remote_code`` (``clover.export``; docs/hf-export.md).
``clover export gguf --model DIR --out FILE.gguf [--type …]``: one GGUF file for Clover's llama.cpp
back end (``clover.export.gguf``; docs/llama-cpp.md)."""

from __future__ import annotations

import argparse
import json
import sys

from clover.data import default_model_dir


def _export(args: argparse.Namespace, write, import_hint: str | None = None) -> int:
    """``write(model_dir)`` → a report (``summary()``, fields for --json); a problem is one line, exit 2
    (a missing optional package too, when ``import_hint`` says how to install it)."""
    from clover.export import ExportError  # deferred: loads torch, not for clover --help

    model_dir = args.model
    if model_dir is None:
        model_dir = default_model_dir()
    try:
        report = write(model_dir)
    except ImportError as e:
        if import_hint is None:
            raise
        print(f"clover export: {e}; {import_hint}", file=sys.stderr)
        return 2
    except ExportError as e:
        print(f"clover export: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({k: (str(v) if k == "out" else v) for k, v in vars(report).items()}))
    else:
        print(report.summary())
    return 0


def cmd_export_hf(args: argparse.Namespace) -> int:
    from clover.export import export_hf  # deferred: loads torch, not for clover --help

    return _export(args, lambda d: export_hf(d, args.out, max_shard_bytes=int(args.max_shard_gb * 2**30)))


def cmd_export_gguf(args: argparse.Namespace) -> int:
    from clover.export.gguf import export_gguf  # deferred: loads torch, not for clover --help

    hint = "install the gguf package (pip install 'clover[llamacpp]')"
    return _export(args, lambda d: export_gguf(d, args.out, args.type), hint)


def register(sub) -> None:
    p = sub.add_parser(
        "export",
        help="export a Clover checkpoint for other libraries (hf: Hugging Face transformers; gguf: llama.cpp)",
        description="Write a Clover checkpoint in another library's format.",
    )
    formats = p.add_subparsers(dest="format", required=True)
    hf = formats.add_parser(
        "hf",
        help="a folder that transformers loads with AutoModelForCausalLM.from_pretrained(..., trust_remote_code=True)",
        description="Writes config.json (model_type clover, auto_map), the weights in safetensors shards with an "
        "index, generation_config.json, the tokenizer files with the chat template, the modeling code (torch and "
        "transformers only) and a model card. A quantized checkpoint, or one using a config feature the modeling "
        "code does not implement, is refused with the reason (exit 2).",
        formatter_class=p.formatter_class,
    )
    hf.add_argument("--model", metavar="DIR", help="Clover checkpoint directory (default: the bundled model)")
    hf.add_argument("--out", required=True, metavar="HF_DIR", help="output folder")
    hf.add_argument("--max-shard-gb", type=float, default=2.0, help="largest weight shard in GiB")
    hf.add_argument("--json", action="store_true", help="print the report as JSON")
    hf.set_defaults(func=cmd_export_hf)
    gg = formats.add_parser(
        "gguf",
        help="one GGUF file for Clover's llama.cpp back end (make llama-cpp)",
        description="Writes the architecture 'clover' with every hyper-parameter, the tokenizer (token list, merges "
        "and tokenizer.json) and chat template, and the weights under llama.cpp-style names. --type sets the weight "
        "matrices' type (norms, gates and Clover's per-head parameters stay f32); q4_k is quantized by the built "
        "llama.cpp back end. A checkpoint the llama.cpp graph cannot run is refused with the reason (exit 2).",
        formatter_class=p.formatter_class,
    )
    gg.add_argument("--model", metavar="DIR", help="Clover checkpoint directory (default: the bundled model)")
    gg.add_argument("--out", required=True, metavar="FILE.gguf", help="output file")
    gg.add_argument("--type", default="f32", choices=["f32", "f16", "q8_0", "q4_k"], help="weight matrix type")
    gg.add_argument("--json", action="store_true", help="print the report as JSON")
    gg.set_defaults(func=cmd_export_gguf)
