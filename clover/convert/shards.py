"""Streaming safetensors I/O for conversion: read a (sharded) checkpoint one tensor at a time,
write one shard after another, one tensor at a time.

Both sides speak the safetensors format directly (an 8-byte header length, a JSON header of
dtype / shape / byte offsets, then raw little-endian bytes): a tensor is read with ``readinto``
straight into its destination (e.g. one expert's slice of a packed tensor), with no memory map,
so the bytes resident in memory are exactly the tensors in flight; the writer lays out each
shard's header up front so tensor bytes go straight to disk.
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

import torch

from clover.model.io import INDEX, SAFETENSORS_DTYPES, WEIGHTS

TORCH_DTYPES = SAFETENSORS_DTYPES  # a header's dtype name -> torch dtype
ST_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64"}  # written


class ConversionError(RuntimeError):
    """A source checkpoint that cannot be converted (unsupported, incomplete or inconsistent)."""


class SourceCheckpoint:
    """The tensors of a Hugging Face checkpoint directory, by name, read on demand.

    ``shapes[key]`` and ``dtypes[key]`` come from the headers only; every header is checked
    against its file's size, so a truncated shard fails here, before anything is written.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        index = self.path / INDEX
        if index.exists():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
                files = sorted(set(weight_map.values()))
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
                raise ConversionError(f"{index}: unreadable shard index ({e})") from None
            missing = [f for f in files if not (self.path / f).exists()]
            if missing:
                raise ConversionError(
                    f"{self.path}: {len(missing)} of {len(files)} shards listed in {INDEX} are missing: {missing[:5]}"
                )
        elif (self.path / WEIGHTS).exists():
            weight_map, files = None, [WEIGHTS]
        else:
            other = sorted(p.name for p in self.path.glob("*.bin")) + sorted(p.name for p in self.path.glob("*.pt"))
            hint = f" (found {other[:3]}: only safetensors checkpoints are supported)" if other else ""
            raise ConversionError(f"{self.path}: no {WEIGHTS} or {INDEX}{hint}")
        self.file_of: dict[str, str] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.dtypes: dict[str, torch.dtype] = {}
        self._offset: dict[str, int] = {}
        for name in files:
            self._read_header(name)
        if weight_map is not None:
            wrong = [k for k, f in weight_map.items() if self.file_of.get(k) != f]
            if wrong:
                raise ConversionError(
                    f"{index}: {len(wrong)} tensors are not in the shard the index names (e.g. {wrong[:3]})"
                )

    def _read_header(self, name: str) -> None:
        p = self.path / name
        size = p.stat().st_size
        bad = f"{p}: corrupt or truncated safetensors file"
        with open(p, "rb") as f:
            head = f.read(8)
            n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
            if not 0 < n <= size - 8:
                raise ConversionError(f"{bad} (header length)")
            try:
                meta = json.loads(f.read(n))
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise ConversionError(f"{bad} (header is not JSON)") from None
        meta.pop("__metadata__", None)
        for k, info in meta.items():
            try:
                dtype, shape, (start, end) = TORCH_DTYPES[info["dtype"]], tuple(info["shape"]), info["data_offsets"]
            except (KeyError, TypeError, ValueError):
                raise ConversionError(f"{bad} (entry {k}: {info})") from None
            nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
            if end - start != nbytes or 8 + n + end > size:
                raise ConversionError(f"{bad} ({k}: {nbytes} bytes expected at [{start}, {end}))")
            if k in self.file_of:
                raise ConversionError(f"{self.path}: tensor {k} appears in both {self.file_of[k]} and {name}")
            self.file_of[k], self.shapes[k], self.dtypes[k], self._offset[k] = name, shape, dtype, 8 + n + start

    def keys(self) -> list[str]:
        return list(self.file_of)

    def read_into(self, key: str, dst: torch.Tensor) -> torch.Tensor:
        """Read ``key`` into the contiguous tensor ``dst`` (same shape; cast if its dtype differs)."""
        if tuple(dst.shape) != self.shapes[key] or not dst.is_contiguous():
            raise ConversionError(f"internal: {key} {self.shapes[key]} read into {tuple(dst.shape)}")
        buf = dst if dst.dtype == self.dtypes[key] else torch.empty(dst.shape, dtype=self.dtypes[key])
        if buf.numel():
            view = buf.reshape(-1).view(torch.uint8).numpy()
            with open(self.path / self.file_of[key], "rb") as f:
                f.seek(self._offset[key])
                got = f.readinto(view)
            if got != view.nbytes:
                raise ConversionError(f"{self.path / self.file_of[key]}: truncated while reading {key}")
        if buf is not dst:
            dst.copy_(buf)
        return dst

    def get(self, key: str, dtype: torch.dtype) -> torch.Tensor:
        return self.read_into(key, torch.empty(self.shapes[key], dtype=dtype))


def shard_names(n: int) -> list[str]:
    return [WEIGHTS] if n == 1 else [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]


class ShardWriter:
    """Writes planned tensors ``[(name, shape)]`` in order into safetensors shards of at most
    ``max_shard_bytes`` (a bigger tensor gets a shard of its own), one tensor at a time.

    Same files as ``clover.model.io.save_model``: ``model.safetensors``, or
    ``model-0000i-of-0000N.safetensors`` plus ``model.safetensors.index.json``.
    """

    def __init__(self, out: Path, specs: list[tuple[str, tuple[int, ...]]], dtype: torch.dtype, max_shard_bytes: int):
        self.out, self.dtype = Path(out), dtype
        itemsize = torch.empty((), dtype=dtype).element_size()
        groups: list[list[tuple[str, tuple[int, ...], int]]] = [[]]
        size = 0
        for name, shape in specs:
            n = itemsize * math.prod(shape)
            if groups[-1] and size + n > max_shard_bytes:
                groups.append([])
                size = 0
            groups[-1].append((name, tuple(shape), n))
            size += n
        self.files = shard_names(len(groups))
        self.groups = groups
        self.total_bytes = sum(n for g in groups for _, _, n in g)
        self._order = [(i, name, shape, n) for i, g in enumerate(groups) for name, shape, n in g]
        self._next = 0
        self._fh = None

    def _header(self, group) -> bytes:
        meta: dict = {"__metadata__": {"format": "pt"}}
        off = 0
        for name, shape, n in group:
            meta[name] = {"dtype": ST_DTYPES[self.dtype], "shape": list(shape), "data_offsets": [off, off + n]}
            off += n
        h = json.dumps(meta, separators=(",", ":")).encode()
        h += b" " * (-len(h) % 8)  # data starts 8-byte aligned
        return struct.pack("<Q", len(h)) + h

    def write(self, name: str, t: torch.Tensor) -> None:
        if self._next >= len(self._order):
            raise ConversionError(f"internal: {name} written after the last planned tensor")
        i, want, shape, n = self._order[self._next]
        if name != want or tuple(t.shape) != shape or t.dtype != self.dtype:
            raise ConversionError(
                f"internal: expected {want} {shape} {self.dtype}, got {name} {tuple(t.shape)} {t.dtype}"
            )
        if self._fh is None:
            self._fh = open(self.out / (self.files[i] + ".tmp"), "wb")
            self._fh.write(self._header(self.groups[i]))
        if n:
            self._fh.write(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy())
        self._next += 1
        if self._next == len(self._order) or self._order[self._next][0] != i:
            self._fh.close()
            self._fh = None

    def finish(self) -> list[str]:
        """Move the finished shards into place (removing older weights) and write the index."""
        if self._next != len(self._order):
            raise ConversionError(f"internal: only {self._next} of {len(self._order)} tensors were written")
        for old in list(self.out.glob("model*.safetensors")) + [self.out / INDEX]:
            old.unlink(missing_ok=True)
        for f in self.files:
            os.replace(self.out / (f + ".tmp"), self.out / f)
        if len(self.files) > 1:
            weight_map = {name: self.files[i] for i, name, _, _ in self._order}
            index = {"metadata": {"total_size": self.total_bytes}, "weight_map": weight_map}
            (self.out / INDEX).write_text(json.dumps(index, indent=1))
        return self.files

    def abort(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        for f in self.files:
            (self.out / (f + ".tmp")).unlink(missing_ok=True)


def read_json(p: Path) -> dict | None:
    """A JSON object file, or None when absent; anything else is a ConversionError."""
    if not p.exists():
        return None
    try:
        d = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ConversionError(f"{p}: not valid JSON ({e})") from None
    if not isinstance(d, dict):
        raise ConversionError(f"{p}: expected a JSON object")
    return d
