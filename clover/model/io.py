"""Checkpoints: ``config.json`` + safetensors (sharded above a size, HF index format).

Loading never executes code (safetensors only) and checks every key and shape strictly.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from clover.model.config import CloverConfig, ConfigError
from clover.model.model import CloverForBlockDiffusion
from clover.model.quant import QuantError, apply_structure, prepare_model

WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"
# safetensors maps a file, and every page read through a handle stays resident in this process
# until the handle is dropped: a load reopens the file after this many bytes, so that the CPU
# holds a window of the file rather than all of it while the weights go to the device
READ_WINDOW = 64 << 20
# safetensors' dtype names: a tensor's dtype is known from the header, before it is read (the
# checkpoint loader here and the streaming shard reader of clover.convert share this table)
SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}


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


def weight_files(path: str | Path) -> list[Path]:
    """The safetensors files of a checkpoint directory: ``model.safetensors``, or the shards its
    index names."""
    path = Path(path)
    if not (path / INDEX).exists():
        return [path / WEIGHTS]
    try:
        idx = json.loads((path / INDEX).read_text())
        return [path / f for f in sorted(set(idx["weight_map"].values()))]
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{path / INDEX}: unreadable shard index ({e})") from None


def _open(f: Path, device: str = "cpu"):
    """A safetensors file opened for reading tensor by tensor (onto ``device``); safetensors checks
    the header and that the file covers every tensor when it opens it."""
    if not f.exists():
        raise CheckpointError(f"missing weights file {f}")
    try:
        return safe_open(f, framework="pt", device=device)
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{f}: corrupt or truncated safetensors file ({e})") from None


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a checkpoint directory (single file or sharded) at once, on the CPU, with
    clear errors (``load_model`` streams them instead)."""
    state: dict[str, torch.Tensor] = {}
    for f in weight_files(path):
        if not f.exists():
            raise CheckpointError(f"missing weights file {f}")
        try:
            state.update(load_file(f))
        except (SafetensorError, OSError, ValueError) as e:
            raise CheckpointError(f"{f}: corrupt or truncated safetensors file ({e})") from None
    return state


def read_header(path: str | Path) -> dict[str, tuple[tuple[int, ...], torch.dtype, Path]]:
    """Every tensor's shape, dtype and file, from the safetensors headers alone (nothing read)."""
    out = {}
    for f in weight_files(path):
        with _open(f) as h:
            for k in h.keys():
                sl = h.get_slice(k)
                name = sl.get_dtype()
                if name not in SAFETENSORS_DTYPES:
                    raise CheckpointError(f"{f}: tensor {k} has dtype {name}, which Clover does not load")
                out[k] = (tuple(sl.get_shape()), SAFETENSORS_DTYPES[name], f)
    return out


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
        from huggingface_hub import snapshot_download  # optional: huggingface_hub, for hub model names

        return Path(snapshot_download(s, local_files_only=True, cache_dir=Path(cache).expanduser()))
    except Exception:
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
    every tensor must be present with the right shape.

    The model is built on the meta device and each tensor is read straight onto ``device`` and
    converted to ``dtype`` (None: as stored) one at a time, so the CPU never holds a second copy
    of the weights (for a GPU: never the weights at all). A quantized checkpoint keeps its
    integer weights and bf16 scales whatever ``dtype`` is, and runs on the CPU only."""
    path = resolve_dir(path)
    config = load_config(path)
    device = torch.device(device)
    if config.quantization is not None and device.type != "cpu":
        raise CheckpointError(
            f"{path}: a quantized checkpoint (int{config.quantization['bits']}) runs on the CPU only: its "
            f"kernels are CPU int8/int4 ones; load it on cpu, or use a full-precision checkpoint on {device.type}"
        )
    header = read_header(path)
    with torch.device("meta"):
        model = CloverForBlockDiffusion(config)
    if config.quantization is not None:
        try:
            apply_structure(model, config.quantization)
        except QuantError as e:
            raise CheckpointError(f"{path / 'config.json'}: bad quantization header: {e}") from None
    expected = dict(model.state_dict())
    if config.tie_word_embeddings:
        expected.pop("lm_head.weight", None)
    _check_fit(path, config, expected, header)
    # integer weights and bf16 quantization scales are kept as stored; the float weights take dtype
    convert = {k for k, v in expected.items() if v.is_floating_point() and v.dtype != torch.bfloat16}
    by_file: dict[Path, list[str]] = {}
    for k, (_, _, f) in header.items():
        by_file.setdefault(f, []).append(k)
    for f, keys in by_file.items():
        h, read = None, 0
        for k in keys:
            if h is None or read >= READ_WINDOW:
                h = None  # the old handle's mapping, and the pages read through it, go first
                h, read = _open(f, str(device)), 0
            t = h.get_tensor(k)
            read += t.numel() * t.element_size()
            if dtype is not None and k in convert:
                t = t.to(dtype)
            _assign(model, k, t)
        h = None
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    if config.quantization is not None:
        prepare_model(model)
    # non-persistent buffers (rope frequencies) were on meta: rebuild them on the device, in at
    # least fp32 (bf16 frequencies would put long positions visibly off)
    with torch.device(device):
        model.model.rotary_emb.__init__(config)
    rope = model.model.rotary_emb
    rope.inv_freq = rope.inv_freq.to(torch.promote_types(torch.float32, dtype or torch.float32))
    return model.eval()


def _check_fit(path: Path, config: CloverConfig, expected: dict, header: dict) -> None:
    """Every tensor the model needs, none it does not, each of the right shape (and, for integer
    weights and bf16 quantization scales, the right dtype), before anything is read."""
    missing = sorted(set(expected) - set(header))
    unexpected = sorted(set(header) - set(expected))

    def fits(k: str, v: torch.Tensor) -> bool:
        shape, dtype, _ = header[k]
        if shape != tuple(v.shape):
            return False
        if not v.is_floating_point() or v.dtype == torch.bfloat16:  # integer weights, bf16 scales: as stored
            return dtype == v.dtype
        return dtype.is_floating_point  # a float weight may be stored in any float dtype, never an integer one

    shapes = [
        f"{k}: checkpoint {header[k][0]} {str(header[k][1])[6:]} vs config {tuple(v.shape)} {str(v.dtype)[6:]}"
        for k, v in expected.items()
        if k in header and not fits(k, v)
    ]
    if not (missing or unexpected or shapes):
        return
    parts = []
    if missing:
        parts.append(f"missing {len(missing)} tensors (e.g. {missing[:3]})")
    if unexpected:
        parts.append(f"unexpected {len(unexpected)} tensors (e.g. {unexpected[:3]})")
    if shapes:
        parts.append(f"{len(shapes)} shape or dtype mismatches (e.g. {shapes[:3]})")
    what = "checkpoint does not fit its config"
    if config.quantization is not None:
        q = config.quantization
        what = (
            f"checkpoint does not fit its config's quantization header (bits {q['bits']}, group_size {q['group_size']})"
        )
    raise CheckpointError(f"{path}: {what}: " + "; ".join(parts))


def _assign(model: torch.nn.Module, key: str, t: torch.Tensor) -> None:
    """Put one loaded tensor in place of the meta parameter or buffer ``key``."""
    owner, leaf = key.rsplit(".", 1)
    m = model.get_submodule(owner)
    if leaf in m._parameters:
        m._parameters[leaf] = torch.nn.Parameter(t, requires_grad=m._parameters[leaf].requires_grad)
    else:
        m._buffers[leaf] = t
