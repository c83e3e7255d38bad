"""Checkpoints: ``config.json`` + safetensors (sharded above a size, HF index format).

Loading never executes code (safetensors only) and checks every key and shape strictly.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from clover.model.config import CloverConfig, ConfigError
from clover.model.model import CloverForBlockDiffusion

WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, corrupt, or does not fit its config."""


def _atomic_save(tensors: dict[str, torch.Tensor], path: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    save_file(tensors, tmp, metadata={"format": "pt"})
    os.chmod(tmp, 0o644)  # mkstemp makes 0600: a saved model must be readable like any other file
    os.replace(tmp, path)


def save_model(
    model: CloverForBlockDiffusion, out: str | Path, max_shard_bytes: int = 2 << 30, state: dict | None = None
) -> Path:
    """Write ``config.json`` and the weights (tied head stored once) into ``out``. ``state``: a
    full state dict to write instead of the model's own (e.g. gathered from FSDP2 shards)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in (model.state_dict() if state is None else state).items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for k, v in state.items():
        n = v.numel() * v.element_size()
        if shards[-1] and size + n > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][k] = v
        size += n
    for old in list(out.glob("model*.safetensors")) + [out / INDEX]:
        old.unlink(missing_ok=True)
    if len(shards) == 1:
        _atomic_save(shards[0], out / WEIGHTS)
    else:
        weight_map = {}
        for i, sh in enumerate(shards):
            name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            _atomic_save(sh, out / name)
            weight_map.update({k: name for k in sh})
        total = sum(v.numel() * v.element_size() for v in state.values())
        (out / INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
    model.config.save(out / "config.json")
    return out


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a checkpoint directory (single file or sharded), with clear errors."""
    path = Path(path)
    files = [path / WEIGHTS]
    if (path / INDEX).exists():
        try:
            idx = json.loads((path / INDEX).read_text())
            files = [path / f for f in sorted(set(idx["weight_map"].values()))]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise CheckpointError(f"{path / INDEX}: unreadable shard index ({e})") from None
    state: dict[str, torch.Tensor] = {}
    for f in files:
        if not f.exists():
            raise CheckpointError(f"missing weights file {f}")
        try:
            state.update(load_file(f))
        except (SafetensorError, OSError, ValueError) as e:
            raise CheckpointError(f"{f}: corrupt or truncated safetensors file ({e})") from None
    return state


def resolve_dir(path: str | Path) -> Path:
    """A local directory, or a Hugging Face repo id (``org/name``) already in the local Hugging
    Face cache (``HF_HUB_CACHE``, else ``HF_HOME``/hub, else ~/.cache/huggingface/hub). Nothing is
    downloaded: an id that is not cached is a CheckpointError that says how to fetch it."""
    p = Path(path)
    s = str(path)
    if p.exists() or s.count("/") != 1 or s.startswith((".", "/", "~")):
        return p
    cache = os.environ.get("HF_HUB_CACHE") or str(Path(os.environ.get("HF_HOME", "~/.cache/huggingface")) / "hub")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(s, local_files_only=True, cache_dir=Path(cache).expanduser()))
    except Exception:  # noqa: BLE001 - no huggingface_hub, not cached, or not a valid id: say how to get it
        pass
    raise CheckpointError(
        f"{s}: not a local directory, and not in the Hugging Face cache ({cache}). Clover never downloads at "
        f"run time: fetch it first (e.g. `hf download {s} --local-dir DIR`) and pass DIR"
    )


def load_config(path: str | Path) -> CloverConfig:
    """The config of a Clover checkpoint directory (or cached repo id); a missing or invalid
    ``config.json`` is a CheckpointError that names it."""
    path = resolve_dir(path)
    if not (path / "config.json").exists():
        raise CheckpointError(f"{path}: no config.json (is this a Clover checkpoint directory?)")
    try:
        return CloverConfig.load(path / "config.json")
    except (ConfigError, TypeError) as e:
        where = str(path / "config.json")
        raise CheckpointError(str(e) if str(e).startswith(where) else f"{where}: {e}") from None


def load_model(
    path: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype | None = None
) -> CloverForBlockDiffusion:
    """Load a Clover checkpoint directory (or a cached Hugging Face repo id, see ``resolve_dir``);
    every tensor must be present with the right shape."""
    path = resolve_dir(path)
    config = load_config(path)
    state = read_weights(path)
    with torch.device("meta"):
        model = CloverForBlockDiffusion(config)
    if config.quantization is not None:
        from clover.model.quant import QuantError, apply_structure

        try:
            apply_structure(model, config.quantization)
        except QuantError as e:
            raise CheckpointError(f"{path / 'config.json'}: bad quantization header: {e}") from None
    expected = {k: v for k, v in model.state_dict().items()}
    if config.tie_word_embeddings:
        expected.pop("lm_head.weight", None)
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    shapes = [
        f"{k}: checkpoint {tuple(state[k].shape)} {str(state[k].dtype)[6:]} vs config {tuple(v.shape)} {str(v.dtype)[6:]}"
        for k, v in expected.items()
        if k in state and (state[k].shape != v.shape or (not v.is_floating_point() or v.dtype == torch.bfloat16)
                           and state[k].dtype != v.dtype)
    ]  # fmt: skip
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} tensors (e.g. {missing[:3]})")
        if unexpected:
            parts.append(f"unexpected {len(unexpected)} tensors (e.g. {unexpected[:3]})")
        if shapes:
            parts.append(f"{len(shapes)} shape mismatches (e.g. {shapes[:3]})")
        what = "checkpoint does not fit its config"
        if config.quantization is not None:
            q = config.quantization
            what = f"checkpoint does not fit its config's quantization header (bits {q['bits']}, group_size {q['group_size']})"
        raise CheckpointError(f"{path}: {what}: " + "; ".join(parts))
    model.load_state_dict(state, strict=False, assign=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    if config.quantization is not None:
        from clover.model.quant import prepare_model

        prepare_model(model)
    # non-persistent buffers (rope frequencies) were on meta: rebuild them
    model.model.rotary_emb.__init__(config)
    model = model.to(device)
    if dtype is not None:
        model = model.to(dtype)  # a quantized model's integer weights and bf16 scales stay as stored
    return model.eval()
