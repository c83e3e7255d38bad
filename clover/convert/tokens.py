"""Tokenizer side of a conversion: pick or add the ``[MASK]`` token, collect the special ids,
copy the tokenizer files and chat template into the Clover checkpoint."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from clover.convert.shards import ConversionError, read_json

MASK_NAMES = ("<|mask|>", "[MASK]", "<mask>", "<|MASK|>", "<|mask_token|>")  # first found wins
NEW_MASK = "<|mask|>"  # the name clover.data.tokenizer.CloverTokenizer looks for first
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
)


@dataclass
class MaskChoice:
    token_id: int
    vocab_size: int  # the Clover vocabulary (source vocab_size, + 1 if a row was added)
    grow: int  # rows added to embeddings and head (0 or 1)
    added: bool  # the token was added to the tokenizer files
    note: str


@dataclass
class TokenizerInfo:
    """What the source tokenizer files say: ids in use, special tokens by name."""

    size: int | None = None  # 1 + the largest id any tokenizer file uses (None: no tokenizer)
    by_name: dict[str, int] = field(default_factory=dict)  # special / added tokens
    mask_field: str | None = None  # tokenizer_config's ``mask_token``

    @classmethod
    def read(cls, src: Path) -> TokenizerInfo:
        info = cls()
        ids: list[int] = []
        tj = read_json(src / "tokenizer.json")
        if tj is not None:
            vocab = (tj.get("model") or {}).get("vocab")
            if isinstance(vocab, dict):
                ids += [int(i) for i in vocab.values()]
            elif isinstance(vocab, list):  # Unigram: [[piece, score], ...]
                ids.append(len(vocab) - 1)
            for t in tj.get("added_tokens") or []:
                ids.append(int(t["id"]))
                info.by_name[t["content"]] = int(t["id"])
        tc = read_json(src / "tokenizer_config.json")
        if tc is not None:
            for i, t in (tc.get("added_tokens_decoder") or {}).items():
                ids.append(int(i))
                info.by_name.setdefault(t["content"], int(i))
            m = tc.get("mask_token")
            info.mask_field = m.get("content") if isinstance(m, dict) else m
        if tj is not None and not ids:
            raise ConversionError(f"{src / 'tokenizer.json'}: no vocabulary found")
        info.size = max(ids) + 1 if ids else None
        return info


def pick_mask(info: TokenizerInfo, vocab_size: int) -> MaskChoice:
    """An existing mask-like special token; else the first row no token uses; else one new row."""
    names = ([info.mask_field] if info.mask_field else []) + list(MASK_NAMES)
    for n in names:
        if n in info.by_name:
            i = info.by_name[n]
            if i >= vocab_size:
                raise ConversionError(f"mask token {n!r} has id {i}, outside the model's vocabulary of {vocab_size}")
            return MaskChoice(i, vocab_size, 0, False, f"existing token {n!r} (id {i})")
    if info.size is not None and info.size > vocab_size:
        raise ConversionError(f"the tokenizer uses ids up to {info.size - 1} but the model has only {vocab_size} rows")
    if info.size is not None and info.size < vocab_size:
        i = info.size
        return MaskChoice(
            i, vocab_size, 0, True, f"added {NEW_MASK!r} on spare embedding row {i} (unused by the tokenizer)"
        )
    why = "no tokenizer files, so no row is known to be free" if info.size is None else "no spare rows"
    return MaskChoice(
        vocab_size,
        vocab_size + 1,
        1,
        info.size is not None,
        f"added {NEW_MASK!r} as a new row {vocab_size} ({why}); embedding and head grown by one row (mean init)",
    )


def special_ids(src_config: dict, text_config: dict, src: Path) -> dict:
    """eos (generation_config first, then the config; a list when several), bos and pad."""
    gen = read_json(src / "generation_config.json") or {}

    def collect(key: str) -> list[int]:
        vals: list[int] = []
        for d in (gen, text_config, src_config):
            v = d.get(key)
            for x in [v] if isinstance(v, int) else (v or []):
                if int(x) not in vals:
                    vals.append(int(x))
        return vals

    eos = collect("eos_token_id")
    return {
        "eos_token_id": (eos[0] if len(eos) == 1 else eos) if eos else None,
        "bos_token_id": (collect("bos_token_id") or [None])[0],
        "pad_token_id": (collect("pad_token_id") or [None])[0],
    }


def copy_tokenizer(src: Path, out: Path, mask: MaskChoice) -> list[str]:
    """Copy the tokenizer files present (adding the mask token when it is new). Returns their names."""
    copied = []
    for name in TOKENIZER_FILES:
        if not (src / name).exists():
            continue
        if name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json") and mask.added:
            d = read_json(src / name)
            _add_mask(name, d, mask.token_id)
            (out / name).write_text(json.dumps(d, indent=2, ensure_ascii=False) + "\n")
        else:
            shutil.copyfile(src / name, out / name)
        copied.append(name)
    return copied


def _add_mask(name: str, d: dict, i: int) -> None:
    entry = {"content": NEW_MASK, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}
    if name == "tokenizer.json":
        d.setdefault("added_tokens", []).append({"id": i, **entry, "special": True})
    elif name == "tokenizer_config.json":
        d.setdefault("added_tokens_decoder", {})[str(i)] = {**entry, "special": True}
        d["mask_token"] = NEW_MASK
    else:
        d["mask_token"] = NEW_MASK
