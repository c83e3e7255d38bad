"""``export_hf``: a Clover checkpoint → a folder that Hugging Face transformers loads with
``AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)``.

The folder: ``config.json`` (Clover's fields, ``model_type: clover``, ``architectures`` and
``auto_map``), the weights under their Clover names in safetensors shards with an index,
``generation_config.json`` (the stop tokens), the tokenizer files with the chat template, the
modeling code (``hf_modeling/``: copied verbatim; it imports torch and transformers only) and a
model card (``README.md``, ``clover.export.card``).
"""

from __future__ import annotations

import ast
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from clover.convert.weights import copy_into
from clover.data.chat import CLOVER_TEMPLATE
from clover.data.tokenizer import CloverTokenizer
from clover.export.card import model_card
from clover.model.config import CloverConfig
from clover.model.io import CheckpointError, load_config, read_header, resolve_dir

HF_MODELING = Path(__file__).with_name("hf_modeling")
MODELING_FILES = (
    "configuration_clover.py",
    "modeling_clover.py",
    "layers_clover.py",
    "gdn_clover.py",
    "generation_clover.py",
)
AUTO_MAP = {
    "AutoConfig": "configuration_clover.CloverConfig",
    "AutoModel": "modeling_clover.CloverModel",
    "AutoModelForCausalLM": "modeling_clover.CloverForCausalLM",
}
ARCHITECTURE = "CloverForCausalLM"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


class ExportError(RuntimeError):
    """A checkpoint that cannot be exported, with the reason in one line."""


@dataclass
class ExportReport:
    out: Path
    files: list[str]
    tensors: int
    total_bytes: int
    seconds: float

    def summary(self) -> str:
        return (
            f"exported {self.tensors} tensors ({self.total_bytes / 2**20:.1f} MiB) → {self.out}\n"
            f"  files: {', '.join(self.files)}\n"
            f"  load: AutoModelForCausalLM.from_pretrained({str(self.out)!r}, trust_remote_code=True)\n"
            f"  {self.seconds:.1f} s"
        )


def modeling_literal(name: str):
    """A module-level literal of configuration_clover.py (``FIELDS``, ``GDN_BLOCK_MIXINGS``), read
    from its source, so exporting needs no transformers."""
    tree = ast.parse((HF_MODELING / "configuration_clover.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise ExportError(f"internal: configuration_clover.py has no {name}")


def export_problems(config: CloverConfig) -> list[str]:
    """Why the modeling code cannot run this model (empty when it can)."""
    fields, mixings = modeling_literal("FIELDS"), modeling_literal("GDN_BLOCK_MIXINGS")
    problems = []
    if config.quantization is not None:
        problems.append(
            f"a quantized checkpoint (int{config.quantization['bits']}) cannot be exported: the modeling code "
            "runs full-precision weights; export the checkpoint it was quantized from"
        )
    unknown = sorted(k for k in config.to_dict() if k not in fields and k != "model_type")
    if unknown:
        problems.append(f"the exported modeling code does not implement config fields {unknown}")
    if config.gdn_block_mixing not in mixings:
        problems.append(f"the exported modeling code does not implement gdn_block_mixing={config.gdn_block_mixing!r}")
    return problems


def checked_source(model_dir: str | Path, problems) -> tuple[Path, CloverConfig]:
    """The checkpoint to export and its config, or an ExportError: an unreadable checkpoint, or what
    ``problems(config)`` finds the target cannot take (every problem named)."""
    try:
        src = resolve_dir(model_dir)
        config = load_config(src)
    except CheckpointError as e:
        raise ExportError(str(e)) from None
    if found := problems(config):
        raise ExportError(f"{src}: " + "; ".join(found))
    return src, config


def export_hf(model_dir: str | Path, out: str | Path, max_shard_bytes: int = 2 << 30) -> ExportReport:
    """Export the Clover checkpoint ``model_dir`` (a directory or a cached repo id) into ``out``."""
    t0 = time.time()
    src, config = checked_source(model_dir, export_problems)
    out = Path(out)
    files = copy_into(src, out, config, max_shard_bytes, True, ExportError)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    dtypes = {str(d).removeprefix("torch.") for _, d, _ in read_header(out).values()}
    hf = {**config.to_dict(), "model_type": "clover", "architectures": [ARCHITECTURE], "auto_map": AUTO_MAP}
    if len(dtypes) == 1:
        hf["dtype"] = dtypes.pop()
    (out / "config.json").write_text(json.dumps(hf, indent=2) + "\n")
    stops = stop_ids(config, src)
    gen = {"eos_token_id": stops, "pad_token_id": config.pad_token_id, "do_sample": False, "max_new_tokens": 256}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    files += ["model.safetensors.index.json", "config.json", "generation_config.json"]
    files += copy_tokenizer(src, out)
    for name in MODELING_FILES:
        shutil.copyfile(HF_MODELING / name, out / name)
    files += list(MODELING_FILES)
    (out / "README.md").write_text(model_card(config, src, stops))
    files.append("README.md")
    return ExportReport(out, files, len(index["weight_map"]), index["metadata"]["total_size"], time.time() - t0)


def stop_ids(config: CloverConfig, src: Path) -> list[int]:
    """The tokens Clover's engine stops at for this checkpoint: the config's EOS ids and those its
    tokenizer declares."""
    ids = set(config.eos_ids)
    if (src / "tokenizer.json").exists():
        ids |= set(CloverTokenizer.load(src).eos_token_ids)
    return sorted(ids)


def copy_tokenizer(src: Path, out: Path) -> list[str]:
    """The tokenizer files, and the chat template as ``chat_template.jinja`` (Clover's own
    ChatML template when the checkpoint carries none). Returns the names written."""
    names = []
    for name in TOKENIZER_FILES:
        if (src / name).exists():
            shutil.copyfile(src / name, out / name)
            names.append(name)
    if not (src / "tokenizer.json").exists():
        return names
    config = json.loads((src / "tokenizer_config.json").read_text()) if (src / "tokenizer_config.json").exists() else {}
    if "chat_template.jinja" not in names and not config.get("chat_template"):
        shutil.copyfile(CLOVER_TEMPLATE, out / "chat_template.jinja")
        names.append("chat_template.jinja")
    return names
