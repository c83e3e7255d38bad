"""``clover info``: a model's layer pattern and parameter counts: the bundled model (what
``clover serve`` and ``clover chat`` run by default), a checkpoint (``--model``) or a preset shape
(``--preset``). With ``--bits`` (or for a quantized checkpoint): weight bytes at that precision
and whether the weights plus one sequence's decoding cache at ``--context`` tokens fit a 16 GiB
and a 24 GiB GPU, and if not, what does not fit."""

from __future__ import annotations

import argparse
import json

from rich.table import Table

from clover.bench import table_console
from clover.data import default_model_dir


def cmd_info(args: argparse.Namespace) -> int:
    import torch  # deferred: torch, not for clover --help

    from clover.model import CloverForBlockDiffusion, preset  # deferred: loads torch, not for clover --help
    from clover.model.config import ConfigError  # deferred: loads torch, not for clover --help
    from clover.model.io import CheckpointError, load_config  # deferred: loads torch, not for clover --help

    if args.preset and args.model:
        raise SystemExit("clover info: give --preset or --model, not both")
    model_dir = None
    try:
        if args.preset:
            config = preset(args.preset)
        else:
            model_dir = args.model or default_model_dir()
            config = load_config(model_dir)
    except (CheckpointError, ConfigError, TypeError, FileNotFoundError) as e:  # an unknown preset, no config.json
        raise SystemExit(f"clover info: {e}") from None
    with torch.device("meta"):  # no memory, even for 35B
        model = CloverForBlockDiffusion(config.replace(quantization=None))
    from clover.convert.qwen import clover_only_numel  # deferred: loads torch, not for clover --help

    counts = model.num_parameters()
    # the GDN mixer's own parameters (memory slot, right-context conv, scales): what a converted
    # checkpoint has beyond its source model
    counts["clover_params"] = clover_only_numel(model)
    info = {
        "preset": args.preset,
        "model": None if model_dir is None else str(model_dir),
        **counts,
        "layer_types": config.layer_types,
        "hidden_size": config.hidden_size,
        "vocab_size": config.vocab_size,
        "num_experts": config.num_experts,
        "num_experts_per_tok": config.num_experts_per_tok if config.num_experts else 0,
        "intermediate_size": config.intermediate_size if not config.num_experts else None,
        "shift_logits": config.shift_logits,
        "block_size": config.block_size,
        "quantization": None
        if config.quantization is None
        else {k: v for k, v in config.quantization.items() if k != "modules"},
    }
    bits = args.bits or (config.quantization or {}).get("bits")
    if bits:
        group = args.group_size if args.group_size is not None else (config.quantization or {}).get("group_size")
        try:
            info["memory"] = memory_fit(config, bits, group, args.context)
        except ValueError as e:  # a group size that does not divide a layer
            raise SystemExit(f"clover info: {e}") from None
    if args.json:
        print(json.dumps(info))
        return 0

    what = f"preset {args.preset}" if args.preset else args.model or "the bundled model"
    t = Table(title=f"Clover model: {what}")
    t.add_column("field")
    t.add_column("value", justify="right")
    for key, label in (
        ("total_params", "total parameters"),
        ("active_params", "active per token"),
        ("clover_params", "  of which Clover's own (GDN memory, right conv)"),
    ):
        n = counts[key]
        t.add_row(label, f"{n:,} ({n / 1e9:.2f} B)" if n >= 1e9 else f"{n:,} ({n / 1e6:.1f} M)")
    t.add_row("layers (G=GDN, A=attention)", config.layer_pattern)
    ffn = ("num_experts", "num_experts_per_tok") if config.num_experts else ("intermediate_size",)
    if not config.num_experts:
        t.add_row("feed-forward", "dense (no experts)")
    for k in ("hidden_size", "vocab_size", *ffn, "block_size", "shift_logits"):
        t.add_row(k, str(info[k]))
    table_console().print(t)
    if "memory" in info:
        print_memory(info["memory"])
    return 0


GPUS_GIB = (16, 24)


def memory_fit(config, bits: int, group_size: int | None, context: int) -> dict:
    """Weight bytes at ``bits`` (16: bf16 throughout; 8/4: the quantized weights, the rest bf16)
    plus one sequence's decoding cache at ``context`` tokens, against 16 and 24 GiB GPUs."""
    from clover.model.quant import DEFAULT_GROUP_SIZE, cache_bytes, weight_bytes  # deferred: loads torch

    if bits == 16:
        w, group_size = weight_bytes(config, None, float_bytes=2), None
    else:
        group_size = DEFAULT_GROUP_SIZE[bits] if group_size is None else group_size
        w = weight_bytes(config, bits, group_size, float_bytes=2)
    cache = cache_bytes(config, context, 1, dtype_bytes=2)
    need = w["total"] + cache
    per_layer_experts = w["experts"] / config.num_hidden_layers
    gpus = {}
    for gib in GPUS_GIB:
        cap = gib * 2**30
        fits = need <= cap
        g = {"capacity_bytes": cap, "fits": fits, "headroom_bytes": cap - need}
        if not fits:
            over = need - cap
            g["over_bytes"] = over
            rest = w["total"] - w["experts"]
            # routed experts kept in host memory, in whole layers (None: no experts, or not enough)
            g["host_layers"] = int(-(-over // per_layer_experts)) if 0 < over < w["experts"] else None
            g["not_fitting"] = (
                f"{over / 2**30:.1f} GiB over (a dense model: no routed experts to keep in host memory)"
                if not w["experts"]
                else f"{over / 2**30:.1f} GiB over: the routed experts alone are {w['experts'] / 2**30:.1f} GiB; "
                + (
                    f"the rest of the weights ({rest / 2**30:.1f} GiB) and the cache fit, so "
                    f"{g['host_layers']} of {config.num_hidden_layers} layers' experts would have to "
                    "stay in host memory"
                    if over < w["experts"]
                    else "even without any routed expert the rest does not fit"
                )
            )
        gpus[f"{gib}GiB"] = g
    return {
        "bits": bits,
        "group_size": group_size,
        "context": context,
        "weight_bytes": w["total"],
        "quantized_bytes": w["quantized"],
        "full_precision_bytes": w["float"],
        "expert_bytes": w["experts"],
        "cache_bytes": cache,
        "total_bytes": need,
        "gpus": gpus,
    }


def print_memory(m: dict) -> None:
    gib = lambda n: f"{n / 2**30:.2f} GiB"
    prec = "bf16" if m["bits"] == 16 else f"int{m['bits']}"
    grp = "" if m["bits"] == 16 else f", group {m['group_size'] or 'per row'}"
    t = Table(title=f"memory at {prec}{grp}, {m['context']} tokens of context, batch 1")
    t.add_column("what")
    t.add_column("bytes", justify="right")
    t.add_row("weights", gib(m["weight_bytes"]))
    if m["bits"] != 16:
        t.add_row(f"  quantized (int{m['bits']} + scales)", gib(m["quantized_bytes"]))
        t.add_row("  full precision (bf16: embeddings, head, norms, router, gates)", gib(m["full_precision_bytes"]))
    if m["expert_bytes"]:
        t.add_row("  of which routed experts", gib(m["expert_bytes"]))
    t.add_row("cache (attention KV bf16, GDN state fp32 + conv tail)", gib(m["cache_bytes"]))
    t.add_row("weights + cache", gib(m["total_bytes"]))
    for name, g in m["gpus"].items():
        t.add_row(f"fits a {name[:-3]} GiB GPU", "yes" if g["fits"] else "no")
    console = table_console()
    console.print(t)
    for name, g in m["gpus"].items():
        if not g["fits"]:
            console.print(f"{name[:-3]} GiB: {g['not_fitting']}")
    console.print("[dim]activations, the CUDA context and framework overhead are not counted[/]")


def register(sub) -> None:
    s = sub.add_parser(
        "info", help="layer pattern and parameter counts of the bundled model, a checkpoint or a preset shape"
    )
    s.add_argument("--model", help="a checkpoint directory (default: the bundled model, which clover serve runs)")
    s.add_argument(
        "--preset",
        help="a preset shape instead of a checkpoint: tiny, small, medium, qwen3.6-35b-a3b, qwen3.5-0.8b / 2b / 4b "
        "/ 9b / 27b (dense), qwen3-next-80b-a3b",
    )
    s.add_argument(
        "--bits",
        type=int,
        choices=[16, 8, 4],
        help="weight bytes at this precision (16: bf16; 8/4: weight-only int8/int4, see clover quantize) and "
        "whether weights + cache fit a 16 GiB and a 24 GiB GPU (default: a quantized checkpoint's own)",
    )
    s.add_argument("--group-size", type=int, help="quantization group size for --bits (default: clover quantize's)")
    s.add_argument("--context", type=int, default=8192, help="tokens of context for the cache size with --bits")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_info)
