"""The conversion plan: every source tensor mapped through its family's name map (or skipped by a
named rule) to the Clover tensor it fills, checked for completeness and shapes before anything is
written; and how one planned tensor is assembled from its sources."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import torch

from clover.convert.qwen import (
    DOWN,
    GATE,
    HEAD,
    NAME_MAPS,
    NEW_PARAMS,
    SKIP,
    SPLIT_PARTS,
    TEXT_PREFIXES,
    UP,
    WHOLE,
    split_rows,
    targets_of,
)
from clover.convert.shards import ConversionError, SourceCheckpoint
from clover.model.config import CloverConfig
from clover.model.model import CloverForBlockDiffusion


def _compile(template: str) -> re.Pattern:
    pat = re.escape(template).replace(r"\{i\}", r"(?P<i>\d+)").replace(r"\{e\}", r"(?P<e>\d+)")
    return re.compile(pat + "$")


_RULES = {fam: [(_compile(s), targets_of(v)) for s, v in m.items()] for fam, m in NAME_MAPS.items()}
_SKIPS = [(re.compile(p), why) for p, why in SKIP.items()]


@dataclass
class Target:
    """One Clover tensor and where it comes from: ``parts[(expert or None, part)] = source key``."""

    name: str
    shape: tuple[int, ...]
    parts: dict[tuple[int | None, str], str] = field(default_factory=dict)
    new: str | None = None  # a Clover-only parameter: its leaf name in NEW_PARAMS


@dataclass
class Plan:
    targets: list[Target]
    skipped: dict[str, list[str]]  # reason → source keys
    layout: str
    experts: str  # how the source stores experts: "packed" | "per-expert" | "none" (dense)
    family: str = "qwen3_5_moe"
    grow: int = 0


def plan(config: CloverConfig, src: SourceCheckpoint, family: str = "qwen3_5_moe", grow: int = 0) -> Plan:
    """Map every source tensor to its Clover tensor (or a skip rule) and check completeness and shapes."""
    with torch.device("meta"):
        model = CloverForBlockDiffusion(config)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if config.tie_word_embeddings:
        shapes.pop(HEAD)
    targets = {k: Target(k, s) for k, s in shapes.items()}
    prefix = "model.language_model." if any(k.startswith("model.language_model.") for k in src.keys()) else "model."
    skipped: dict[str, list[str]] = {}
    unmapped, unknown, dup = [], [], []
    experts = set()
    for key in src.keys():
        why = next((w for p, w in _SKIPS if p.search(key)), None)
        if why is None and key == HEAD and config.tie_word_embeddings:
            why = "lm_head tied to embed_tokens (tie_word_embeddings)"
        if why is not None:
            skipped.setdefault(why, []).append(key)
            continue
        rel = key[len(prefix) :] if key.startswith(prefix) else None
        hits = [(HEAD, WHOLE, None)] if key == HEAD else _match(family, rel) if rel is not None else None
        if hits is None:
            unmapped.append(key)
            continue
        for name, part, e in hits:
            if name not in targets:
                unknown.append(f"{key} → {name}")
                continue
            if (e, part) in targets[name].parts:
                dup.append(key)
            targets[name].parts[(e, part)] = key
            if ".mlp.experts." in name:
                experts.add("packed" if part == WHOLE else "per-expert")
    problems = []
    if unmapped:
        problems.append(f"{len(unmapped)} source tensors match no rule of the {family} name map: {unmapped[:6]}")
    if unknown:
        problems.append(
            f"{len(unknown)} source tensors map to tensors this config does not have "
            f"(layer_types / num_hidden_layers disagree with the weights?): {unknown[:4]}"
        )
    if dup:
        problems.append(f"{len(dup)} source tensors map to an already-filled place: {dup[:4]}")
    for t in targets.values():
        leaf = t.name.rsplit(".", 1)[-1]
        if leaf in NEW_PARAMS and ".linear_attn." in t.name:
            t.new = leaf
            continue
        problems += _check(t, src, config, grow)
    if problems:
        raise ConversionError(f"{src.path}: " + "\n  ".join(["cannot convert:", *problems]))
    layout = TEXT_PREFIXES[prefix]
    return Plan(list(targets.values()), skipped, layout, "/".join(sorted(experts)) or "none", family, grow)


def _match(family: str, rel: str) -> list[tuple[str, str, int | None]] | None:
    for pat, dsts in _RULES[family]:
        m = pat.match(rel)
        if m:
            g = m.groupdict()
            e = int(g["e"]) if "e" in g else None
            return [(dst.format(i=g.get("i")), part, e) for dst, part in dsts]
    return None


def _check(t: Target, src: SourceCheckpoint, config: CloverConfig, grow: int) -> list[str]:
    """Missing parts and shape mismatches of one target."""
    if not t.parts:
        return [f"no source tensor for {t.name}"]
    (_, first_part), key = next(iter(t.parts.items()))
    per_expert = any(e is not None for e, _ in t.parts)
    if first_part in (WHOLE, *SPLIT_PARTS) or not per_expert:
        if len(t.parts) > 1:
            what = "both a packed tensor and per-expert tensors" if per_expert else "more than one source tensor"
            return [f"{t.name}: {what} in the source ({sorted(t.parts.values())[:3]})"]
        want = t.shape
        if grow and t.name in ("model.embed_tokens.weight", HEAD):
            want = (t.shape[0] - grow, *t.shape[1:])
        if first_part in SPLIT_PARTS:  # the fused tensor it is cut from
            want = (split_rows(first_part, config)[0], *t.shape[1:])
        got = src.shapes[key]
        return [] if got == want else [f"shape mismatch: {key} is {got}, the config implies {want} ({t.name})"]
    if (None, WHOLE) in t.parts:
        return [f"{t.name}: both a packed tensor and per-expert tensors in the source"]
    E, rows = t.shape[0], t.shape[1]
    need = (GATE, UP) if t.name.endswith("gate_up_proj") else (DOWN,)
    want = (rows // len(need), *t.shape[2:])
    missing = [f"{p}_proj of expert {e}" for e in range(E) for p in need if (e, p) not in t.parts]
    extra = sorted({e for e, _ in t.parts if e is not None and e >= E})
    out = []
    if missing:
        out.append(f"{t.name}: missing {len(missing)} per-expert tensors ({missing[:3]})")
    if extra:
        out.append(f"{t.name}: experts {extra[:4]} beyond num_experts={E}")
    bad = [(k, src.shapes[k]) for k in t.parts.values() if src.shapes[k] != want]
    if bad:
        out.append(f"shape mismatch: {bad[0][0]} is {bad[0][1]}, the config implies {want} ({len(bad)} such)")
    return out


def assemble(t: Target, ckpt: SourceCheckpoint, config: CloverConfig, dt: torch.dtype, grow: int) -> torch.Tensor:
    """The Clover tensor ``t`` in dtype ``dt``: a new parameter at its starting value, a source
    tensor as it is (grown by the [MASK] row for embeddings and head), a fused tensor's rows, or
    packed experts read one expert at a time into their slices."""
    if t.new is not None:
        if t.new == "attn_scale":
            return torch.full(t.shape, math.sqrt(config.linear_key_head_dim), dtype=dt)
        return (torch.ones if t.new in ("mem_gamma", "mem_scale") else torch.zeros)(t.shape, dtype=dt)
    ((_, part), key), *_ = t.parts.items()
    if part == WHOLE:
        x = ckpt.get(key, dt)
        if grow and t.name in ("model.embed_tokens.weight", HEAD):  # the new [MASK] row: mean init
            x = torch.cat([x, x.mean(0, keepdim=True, dtype=torch.float32).to(dt).expand(grow, -1)])
        return x
    if part in SPLIT_PARTS:
        return ckpt.get(key, dt)[split_rows(part, config)[1]]
    packed = torch.empty(t.shape, dtype=dt)
    half = t.shape[1] // 2
    for (e, part), key in t.parts.items():
        dst = {GATE: packed[e, :half], UP: packed[e, half:], DOWN: packed[e]}[part]
        ckpt.read_into(key, dst)
    return packed
