"""The streaming conversion: plan (``plan.plan``), then one layer at a time read → assemble →
calibrate → write, then the config and the tokenizer files."""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from clover.convert.calibrate import ReadoutCalibration, calibration_tokens
from clover.convert.clover_hf import from_export, is_clover_export
from clover.convert.plan import Plan, Target, assemble, plan
from clover.convert.qwen import clover_config, family_of, text_config
from clover.convert.shards import ConversionError, ShardWriter, SourceCheckpoint, read_json
from clover.convert.tokens import TokenizerInfo, copy_tokenizer, pick_mask, special_ids
from clover.model.io import CheckpointError, resolve_dir

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclass
class ConversionReport:
    out: Path
    layout: str
    experts: str
    family: str
    source_tensors: int
    used: int
    skipped: dict[str, int]
    written: int
    new_params: int
    files: list[str]
    total_bytes: int
    largest_tensor_bytes: int
    mask_token_id: int
    mask_note: str
    tokenizer_files: list[str]
    rho: dict[int, list[float]]
    seconds: float

    def summary(self) -> str:
        lines = [
            f"converted {self.family} {self.layout} checkpoint ({self._ffn()}) → {self.out}",
            f"  source tensors: {self.source_tensors} = {self.used} used + {sum(self.skipped.values())} skipped",
            *[f"    skipped {n}: {why}" for why, n in self.skipped.items()],
            *[f"    {part}: none in the source" for part in self._absent()],
            f"  wrote {self.written} tensors ({self.new_params} new Clover parameters) in {len(self.files)} file(s),"
            f" {self.total_bytes / 2**30:.2f} GiB; largest tensor {self.largest_tensor_bytes / 2**20:.1f} MiB",
            f"  [MASK] = {self.mask_token_id}: {self.mask_note}",
            f"  tokenizer files: {', '.join(self.tokenizer_files) or 'none found'}",
        ]
        if self.rho:
            vals = [r for rs in self.rho.values() for r in rs]
            lines.append(f"  readout scale ρ over {len(self.rho)} GDN layers: {min(vals):.3g} … {max(vals):.3g}")
        lines.append(f"  {self.seconds:.1f} s")
        return "\n".join(lines)

    def _absent(self) -> list[str]:
        """What a Qwen checkpoint may carry and Clover leaves out, when this source has none of it."""
        parts = ("vision tower", "multi-token-prediction head")  # the starts of their SKIP reasons
        return [p for p in parts if not any(why.startswith(p) for why in self.skipped)]

    def _ffn(self) -> str:
        return "dense feed-forward" if self.experts == "none" else f"experts stored {self.experts}"


def convert(
    src: str | Path,
    out: str | Path,
    dtype: str | torch.dtype = "bf16",
    block_size: int = 32,
    max_shard_bytes: int = 2 << 30,
    calib_seqs: int = 4,
    calib_blocks: int = 8,
    seed: int = 0,
    progress: bool = True,
) -> ConversionReport:
    """Convert the Hugging Face checkpoint directory ``src`` into a Clover checkpoint ``out``.

    Streams tensor by tensor (a layer at a time), so memory stays near one layer's weights.
    ``calib_seqs`` random-token sequences of ``calib_blocks`` blocks calibrate the readout
    scale ρ (0 disables it: ρ = 1).
    """
    t0 = time.time()
    src, out = _source_dir(src), Path(out)
    dt = DTYPES[dtype] if isinstance(dtype, str) else dtype
    if calib_seqs > 0 and calib_blocks < 2:
        raise ConversionError("calibration needs at least 2 blocks per sequence (the readout of block 0 is empty)")
    if not (src / "config.json").exists():
        raise ConversionError(f"{src}: no config.json (is this a Hugging Face checkpoint directory?)")
    if out.resolve() == src.resolve():
        raise ConversionError("--out must differ from --from")
    if is_clover_export(src):  # a `clover export hf` folder: its weights go back as they are
        return from_export(src, out, max_shard_bytes)
    hf = read_json(src / "config.json")  # existence checked above
    family, tc = family_of(hf), text_config(hf)
    ckpt = SourceCheckpoint(src)
    tok = TokenizerInfo.read(src)
    mask = pick_mask(tok, int(tc.get("vocab_size", 248320)))
    config = clover_config(hf, mask.token_id, mask.vocab_size, block_size, special_ids(hf, tc, src))
    p = plan(config, ckpt, family, mask.grow)  # every error is raised before anything is written
    calib, n_ids = None, 0
    if calib_seqs > 0:
        n_ids = min(tok.size or config.vocab_size, config.vocab_size)
        ids = calibration_tokens(n_ids, calib_seqs, calib_blocks, block_size, seed, mask.token_id)
        calib = ReadoutCalibration(config, ids, block_size)
    how = {"seqs": calib_seqs, "blocks": calib_blocks, "block_size": block_size, "seed": seed, "ids_below": n_ids}
    config.extra = {"converted_from": _provenance(src, hf, p, family, dt, mask, how if calib is not None else None)}
    out.mkdir(parents=True, exist_ok=True)
    writer = ShardWriter(out, [(t.name, t.shape) for t in p.targets], dt, max_shard_bytes)
    try:
        rho = _stream(p, ckpt, writer, config, dt, calib, progress)
        files = writer.finish()
    except BaseException:
        writer.abort()
        raise
    config.save(out / "config.json")
    copied = copy_tokenizer(src, out, mask)
    return _report(out, p, family, ckpt, writer, files, dt, mask, copied, rho, time.time() - t0)


def _provenance(src: Path, hf: dict, p: Plan, family: str, dt: torch.dtype, mask, calibration: dict | None) -> dict:
    """What ``config.json``'s ``extra.converted_from`` records: the source and how it was read."""
    return {
        "path": str(src),
        "model_type": hf.get("model_type"),
        "architectures": hf.get("architectures"),
        "layout": p.layout,
        "experts": p.experts,
        "family": family,
        "dtype": str(dt).removeprefix("torch."),
        "mask_token": mask.note,
        "readout_calibration": calibration or None,
    }


def _report(out, p: Plan, family, ckpt, writer, files, dt, mask, copied, rho, seconds) -> ConversionReport:
    used = len({key for t in p.targets for key in t.parts.values()})  # a fused tensor feeds two targets
    return ConversionReport(
        out=out,
        layout=p.layout,
        experts=p.experts,
        family=family,
        source_tensors=len(ckpt.keys()),
        used=used,
        skipped={why: len(ks) for why, ks in p.skipped.items()},
        written=len(p.targets),
        new_params=sum(t.new is not None for t in p.targets),
        files=files,
        total_bytes=writer.total_bytes,
        largest_tensor_bytes=max(_nbytes(t.shape, dt) for t in p.targets),
        mask_token_id=mask.token_id,
        mask_note=mask.note,
        tokenizer_files=copied,
        rho=rho,
        seconds=seconds,
    )


def _source_dir(src: str | Path) -> Path:
    """A local directory or a Hugging Face repo id already in the local cache (never downloaded)."""
    try:
        return resolve_dir(src)
    except CheckpointError as e:
        raise ConversionError(str(e)) from None


def _stream(p: Plan, ckpt, writer, config, dt, calib, progress) -> dict[int, list[float]]:
    """One layer at a time: read and assemble its tensors, calibrate, write, release the sources."""
    rho: dict[int, list[float]] = {}
    with tqdm(total=writer.total_bytes, unit="B", unit_scale=True, desc="clover convert", disable=not progress) as bar:
        for group in _groups(p.targets):
            tensors = {t.name: assemble(t, ckpt, config, dt, p.grow) for t in group}
            i = _layer_index(group[0].name)
            if calib is not None and "model.embed_tokens.weight" in tensors:
                calib.embed(tensors["model.embed_tokens.weight"])
            elif calib is not None and i is not None:
                r = calib.layer(i, tensors)
                if r is not None:
                    rho[i] = r
            for t in group:
                writer.write(t.name, tensors.pop(t.name))
                bar.update(_nbytes(t.shape, dt))
    return rho


def _groups(targets: list[Target]):
    """Targets in model order, one group per layer (the unit that is in memory at once)."""
    group: list[Target] = []
    for t in targets:
        if group and _layer_index(t.name) != _layer_index(group[0].name):
            yield group
            group = []
        group.append(t)
    if group:
        yield group


def _layer_index(name: str) -> int | None:
    m = re.match(r"model\.layers\.(\d+)\.", name)
    return int(m.group(1)) if m else None


def _nbytes(shape, dt) -> int:
    return math.prod(shape) * torch.empty((), dtype=dt).element_size()
