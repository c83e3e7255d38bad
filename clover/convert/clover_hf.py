"""A folder written by ``clover export hf`` (or saved by transformers from one) converted back into
a Clover checkpoint: the config without the Hugging Face keys, the weights copied tensor for
tensor under the names they already have (bit-exact, whatever ``--dtype`` says), the tokenizer
files and chat template."""

from __future__ import annotations

import dataclasses
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from clover.convert.shards import ConversionError, read_json
from clover.convert.weights import copy_into, expected_tensors
from clover.model.config import CloverConfig, ConfigError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


@dataclass
class ExportConversionReport:
    out: Path
    files: list[str]
    tensors: int
    tokenizer_files: list[str]
    seconds: float

    def summary(self) -> str:
        return (
            f"converted a Clover export (Hugging Face folder) → {self.out}: {self.tensors} tensors copied as they are "
            f"in {len(self.files)} file(s)\n  tokenizer files: {', '.join(self.tokenizer_files) or 'none found'}\n"
            f"  {self.seconds:.1f} s"
        )


def is_clover_export(src: Path) -> bool:
    """Whether ``src`` holds a Hugging Face folder of a Clover model (``model_type: clover`` with
    the keys transformers needs to find its modeling code)."""
    hf = read_json(src / "config.json") or {}
    return hf.get("model_type") == "clover" and ("auto_map" in hf or "architectures" in hf)


def from_export(src: Path, out: Path, max_shard_bytes: int = 2 << 30) -> ExportConversionReport:
    """Convert the exported folder ``src`` into the Clover checkpoint ``out``."""
    t0 = time.time()
    fields = {f.name for f in dataclasses.fields(CloverConfig)}
    hf = read_json(src / "config.json") or {}
    d = {k: v for k, v in hf.items() if k in fields}  # Clover's own keys; transformers' are dropped
    d["extra"] = d.get("extra") or {}
    try:
        config = CloverConfig.from_dict(d)
    except (ConfigError, TypeError) as e:
        raise ConversionError(f"{src / 'config.json'}: {e}") from None
    files = copy_into(src, out, config, max_shard_bytes, False, ConversionError)
    config.save(out / "config.json")
    copied = [n for n in TOKENIZER_FILES if (src / n).exists()]
    for name in copied:
        shutil.copyfile(src / name, out / name)
    return ExportConversionReport(out, files, len(expected_tensors(config)), copied, time.time() - t0)
