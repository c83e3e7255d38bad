"""``clover train --init-from DIR [--grow]``: a trained model's weights streamed into the run's
model, tensor by tensor, each rank reading only its own rows.

The checks run on the run's model (which may still be all shards, or on the meta device) and the
source's safetensors headers, before any weight is read. Then every tensor is read with
``safe_open(...).get_slice(name)[rows]`` straight into this rank's part of the parameter
(``fsdp.local_rows``): no rank ever holds the whole source or the whole model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors import safe_open

from clover.model.io import INDEX, WEIGHTS, CheckpointError, load_config
from clover.train.fsdp import local_rows

# a new layer's residual writers: zeroed, the layer adds nothing until training moves them
_WRITERS = ("o_proj.weight", "out_proj.weight", "down_proj.weight", "experts.down_proj")


def layer_map(src: list[str], dst: list[str]) -> list[int | None]:
    """For each layer of ``dst``, the ``src`` layer it starts from (None: a new layer). The source
    layers are matched in order and by type, so ``src`` must be a subsequence of ``dst``."""
    out, j = [], 0
    for t in dst:
        if j < len(src) and src[j] == t:
            out.append(j)
            j += 1
        else:
            out.append(None)
    if j < len(src):
        raise ValueError(f"the layers {src} are not an in-order subsequence of {dst}")
    return out


def weight_files(src_dir: Path) -> dict[str, Path]:
    """Tensor name → the safetensors file holding it (one file, or an index of shards)."""
    if (src_dir / INDEX).exists():
        try:
            wm = json.loads((src_dir / INDEX).read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise CheckpointError(f"{src_dir / INDEX}: unreadable shard index ({e})") from None
        return {k: src_dir / f for k, f in wm.items()}
    f = src_dir / WEIGHTS
    if not f.exists():
        raise CheckpointError(f"missing weights file {f}")
    try:
        with safe_open(str(f), framework="pt") as h:
            return dict.fromkeys(h.keys(), f)
    except Exception as e:
        raise CheckpointError(f"{f}: corrupt or truncated safetensors file ({e})") from None


def _shapes(files: dict[str, Path]) -> dict[str, tuple[int, ...]]:
    out = {}
    for f in sorted(set(files.values())):
        if not f.exists():
            raise CheckpointError(f"missing weights file {f}")
        try:
            with safe_open(str(f), framework="pt") as h:
                out.update({k: tuple(h.get_slice(k).get_shape()) for k in h.keys() if files.get(k) == f})
        except Exception as e:
            raise CheckpointError(f"{f}: corrupt or truncated safetensors file ({e})") from None
    return out


def _source_names(model, mapping: list[int | None] | None) -> dict[str, str | None]:
    """Each of the run's tensor names → the source tensor it starts from (None: keeps its init,
    a new layer of --grow)."""
    out = {}
    for k in model.state_dict():
        if mapping is not None and k.startswith("model.layers."):
            i, rest = k[len("model.layers.") :].split(".", 1)
            j = mapping[int(i)]
            out[k] = None if j is None else f"model.layers.{j}.{rest}"
        else:
            out[k] = k
    return out


def init_weights(model, src_dir: Path, grow: bool = False) -> list[int | None] | None:
    """Start from a trained model's weights, with a fresh optimizer and schedule. Every tensor
    must match in name and shape; config fields that change no shape (RoPE settings, say) may
    differ: they are listed, and the run's own config is what gets trained and saved.

    ``model`` may be plain or FSDP2-sharded (each rank then reads only its rows of each tensor).

    ``grow``: the run's model may have more layers (``layer_types`` with the source's layers as an
    in-order subsequence). Matched layers take the source's weights; each new layer keeps its
    fresh init but with zeroed output projections, so the grown model starts as exactly the
    source's function (tested). Returns the layer map when growing."""
    try:
        src_config = load_config(src_dir)
        files = weight_files(Path(src_dir))
        shapes = _shapes(files)
    except (CheckpointError, FileNotFoundError) as e:
        raise SystemExit(f"clover: --init-from: {e}") from None
    if src_config.quantization is not None:
        raise SystemExit(
            f"clover: --init-from: {src_dir} is a quantized checkpoint (inference only); "
            "train from its full-precision source"
        )
    if src_config.tie_word_embeddings and "model.embed_tokens.weight" in shapes:
        files["lm_head.weight"] = files["model.embed_tokens.weight"]  # stored once, read as both
        shapes["lm_head.weight"] = shapes["model.embed_tokens.weight"]
    a, b = src_config.to_dict(), model.config.to_dict()
    diff = sorted(k for k in set(a) | set(b) if k != "extra" and a.get(k) != b.get(k))
    mapping = None
    if grow:
        try:
            mapping = layer_map(src_config.layer_types, model.config.layer_types)
        except ValueError as e:
            raise SystemExit(f"clover: --grow: {e}") from None
        diff = [k for k in diff if k not in ("num_hidden_layers", "layer_types")]
    ours = model.state_dict()
    names = _source_names(model, mapping)
    read = {names[k] for k in ours if names[k] is not None}  # --grow maps every source layer (layer_map)
    if read != set(shapes) or any(names[k] is not None and tuple(v.shape) != shapes[names[k]] for k, v in ours.items()):
        raise SystemExit(f"clover: --init-from {src_dir}: its config differs from the recipe's in {diff}")
    if diff and _rank() == 0:
        print(f"clover: --init-from {src_dir}: same tensors, but these config fields change: {diff}", file=sys.stderr)
    with torch.no_grad():
        for k, t in ours.items():
            local, start = local_rows(t)
            if names[k] is None:  # a new layer: its own init, residual writers zeroed
                if k.endswith(_WRITERS):
                    local.zero_()
                continue
            if local.dim() and not local.shape[0]:
                continue
            # one file opening per tensor: the mapped pages of the rows read are let go at once
            with safe_open(str(files[names[k]]), framework="pt") as h:
                rows = h.get_slice(names[k])[start : start + local.shape[0]] if local.dim() else h.get_tensor(names[k])
                local.copy_(rows)
    return mapping


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
