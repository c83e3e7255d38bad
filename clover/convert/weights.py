"""A checkpoint's weights copied tensor for tensor into safetensors shards: a Clover checkpoint
converted back from an exported folder (``clover_hf``), and the weights ``clover export hf``
writes. Nothing is cast or renamed, so a copy is bit-exact."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from clover.model.config import CloverConfig
from clover.model.io import INDEX, WEIGHTS, CheckpointError, read_header
from clover.model.model import CloverForBlockDiffusion


def expected_tensors(config: CloverConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a full-precision checkpoint of ``config`` holds, in model order, with its
    shape (the tied head is stored once, as the embedding)."""
    with torch.device("meta"):
        model = CloverForBlockDiffusion(config.replace(quantization=None))
    state = model.state_dict()
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    return {k: tuple(v.shape) for k, v in state.items()}


def check_fit(path: Path, config: CloverConfig) -> dict[str, tuple[tuple[int, ...], torch.dtype, Path]]:
    """The checkpoint's header, refused unless it holds exactly the tensors ``config`` needs."""
    header = read_header(path)
    want = expected_tensors(config)
    missing = sorted(set(want) - set(header))
    unexpected = sorted(set(header) - set(want))
    shapes = sorted(k for k in want if k in header and header[k][0] != want[k])
    if missing or unexpected or shapes:
        raise CheckpointError(
            f"{path}: weights do not fit config.json (missing {missing[:3]}, unexpected {unexpected[:3]}, "
            f"wrong shape {shapes[:3]})"
        )
    return header


def copy_weights(src: Path, out: Path, config: CloverConfig, max_shard_bytes: int, always_index: bool) -> list[str]:
    """Copy the weights of the checkpoint directory ``src`` into ``out``: shards of at most
    ``max_shard_bytes`` (a bigger tensor alone in its shard), named ``model-0000i-of-0000N.safetensors``
    with ``model.safetensors.index.json``, or one ``model.safetensors`` when a single shard does
    and ``always_index`` is False. One shard is in memory at a time. Returns the file names."""
    header = check_fit(src, config)
    order = list(expected_tensors(config))
    groups: list[list[str]] = [[]]
    size = 0
    for k in order:
        shape, dtype, _ = header[k]
        n = torch.empty((), dtype=dtype).element_size() * int(torch.Size(shape).numel())
        if groups[-1] and size + n > max_shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(k)
        size += n
    single = len(groups) == 1 and not always_index
    names = [WEIGHTS] if single else [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
    for old in list(out.glob("model*.safetensors")) + [out / INDEX]:
        old.unlink(missing_ok=True)
    total = 0
    for name, keys in zip(names, groups):
        tensors = {}
        for f in sorted({header[k][2] for k in keys}):
            with safe_open(f, framework="pt") as h:
                tensors.update({k: h.get_tensor(k) for k in keys if header[k][2] == f})
        total += sum(t.numel() * t.element_size() for t in tensors.values())
        save_file({k: tensors[k] for k in keys}, str(out / name), metadata={"format": "pt"})
        os.chmod(out / name, 0o644)  # safetensors writes 0600: readable like the folder's other files
    if not single:
        weight_map = {k: name for name, keys in zip(names, groups) for k in keys}
        (out / INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
    return names


def copy_into(
    src: Path, out: Path, config: CloverConfig, max_shard_bytes: int, always_index: bool, error: type[Exception]
) -> list[str]:
    """``copy_weights`` into ``out``, created if need be and never ``src`` itself; every problem is
    raised as ``error`` (the caller's one-line error type)."""
    if out.exists() and out.resolve() == src.resolve():
        raise error("the output folder must differ from the source folder")
    out.mkdir(parents=True, exist_ok=True)
    try:
        return copy_weights(src, out, config, max_shard_bytes, always_index)
    except CheckpointError as e:
        raise error(str(e)) from None
