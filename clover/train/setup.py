"""A training run's setup: what ``clover train`` asks for (``RunSpec``) → a ``Run`` ready to fit,
with the recipe and its ``--config`` overrides, the data and its validation split, the tokenizer,
the device and (under torchrun) the process group. ``clover.train.run`` builds the model and fits.

Everything that cannot start as asked is a ``SetupError`` whose message says why, raised before
anything is written to the run directory where it can be; the command line prints it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

from clover.data.chat import render
from clover.data.task import DEFAULT_TASK, all_recipes
from clover.data.tokenizer import CloverTokenizer, train_tokenizer
from clover.model import CloverConfig
from clover.model.io import CheckpointError, load_config, resolve_dir
from clover.train.objective import MaskingConfig
from clover.train.recipes import Recipe, chat_source, fit_to_length, read_chat_jsonl
from clover.train.trainer import setup_distributed, train_device


class SetupError(ValueError):
    """A run that cannot start as asked; the message names the flag or file and the reason."""


@dataclass
class RunSpec:
    """One run, as ``clover train``'s flags give it (docs/training.md lists them)."""

    out: str
    recipe: str = DEFAULT_TASK  # the bundled model's recipe is named as its task
    config: str | None = None  # JSON overrides: {"train": {...}, "model": {...}, "data": {...}}
    steps: int | None = None
    resume: bool = False
    init_from: str | None = None
    grow: bool = False
    data: str | None = None  # chats in OpenAI's fine-tuning JSONL instead of the recipe's corpus
    val_data: str | None = None
    export: str | None = None
    threads: int = 1
    workers: int = 0
    time_budget: float | None = None  # minutes
    dtype: str = "float32"
    activation_checkpointing: bool = False
    progress: bool = True
    device: str = "auto"


@dataclass
class Run:
    """What the setup decided, handed to the model's fit."""

    spec: RunSpec
    recipe: Recipe
    over: dict  # the --config overrides
    tok: CloverTokenizer
    dir: Path
    device: torch.device
    rank: int
    world: int
    data: list[dict] | None
    val_data: list[dict] | None
    init_dir: Path | None
    init_config: CloverConfig | None

    def source(self, validation: bool = False) -> Callable[[int], dict] | list[dict]:
        """The training batches (step → batch), or with ``validation`` the fixed validation batches."""
        r, tok = self.recipe, self.tok
        if self.data is None:
            return r.validation_batches(tok) if validation else r.source(tok, "train", seed=r.train.seed)
        if validation:
            return [chat_source(tok, self.val_data, r, seed=99)(i) for i in range(4)]
        return chat_source(tok, self.data, r, r.train.seed)

    def record(self, step: int, figures: dict) -> dict:
        """``training.json`` of an export: the recipe or data, the step, the figures, the settings."""
        spec = self.spec
        rec = {
            "recipe": f"chat data {spec.data}" if self.data is not None else spec.recipe,
            "step": step,
            **figures,
            "train": asdict(self.recipe.train),
        }
        if self.data is None:  # the recipe's data fields (batch size, decision share, curriculum)
            rec["data"] = self.recipe.data_fields()
        if spec.init_from:
            rec["init_from"] = str(spec.init_from)
        return rec


def setup(spec: RunSpec) -> Run:
    """Check the flags, pick the recipe, read the data, choose the tokenizer and make the run
    directory; torch's threads, the device and (under torchrun) the process group."""
    _check_flags(spec)
    torch.set_num_threads(spec.threads)
    torch.set_flush_denormal(True)
    try:
        device = train_device(spec.device)
    except ValueError as e:
        raise SetupError(f"--device: {e}") from None
    rank, world = setup_distributed(device)
    if device.type == "cuda":  # TF32 tensor cores for fp32 matmuls (10-bit mantissa inputs, fp32 sums)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    recipe, over = _recipe(spec)
    data, val_data = _read_data(spec)
    init_dir = resolve_dir(spec.init_from) if spec.init_from else None
    init_config = _init_config(spec, init_dir) if init_dir and not recipe.autoregressive else None
    run_dir = Path(spec.out)
    tok = _tokenizer(run_dir, init_dir, recipe, data)
    if data is not None:  # checked against max_len before anything is written to --out
        data, val_data = _split_validation(tok, data, val_data, spec, recipe.max_len, rank)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SetupError(f"--out {spec.out}: cannot create the run directory ({e.strerror})") from None
    if rank == 0 and not (run_dir / "tokenizer.json").exists():
        tok.save(run_dir)
    torch.manual_seed(recipe.train.seed)
    return Run(spec, recipe, over, tok, run_dir, device, rank, world, data, val_data, init_dir, init_config)


def _check_flags(spec: RunSpec) -> None:
    if spec.threads < 1:
        raise SetupError(f"--threads must be >= 1, got {spec.threads}")
    if spec.workers < 0:
        raise SetupError(f"--workers must be >= 0, got {spec.workers}")
    if spec.time_budget is not None and not spec.time_budget > 0:
        raise SetupError(f"--time-budget must be > 0 minutes, got {spec.time_budget}")
    if spec.steps is not None and spec.steps < 0:
        raise SetupError(f"--steps must be >= 0, got {spec.steps}")
    if spec.val_data and not spec.data:
        raise SetupError("--val-data needs --data")
    if spec.grow and not spec.init_from:
        raise SetupError("--grow needs --init-from")
    for flag, d in (("--out", spec.out), ("--export", spec.export)):
        if d and Path(d).exists() and not Path(d).is_dir():
            raise SetupError(f"{flag} {d}: exists and is not a directory")


def _recipe(spec: RunSpec) -> tuple[Recipe, dict]:
    """The recipe named by ``--recipe``, with ``--config`` and ``--steps`` applied."""
    recipes = all_recipes()
    if spec.recipe not in recipes:
        raise SetupError(f"unknown recipe {spec.recipe!r}; choose from {sorted(recipes)}")
    recipe = recipes[spec.recipe]()
    if recipe.autoregressive:
        for flag, on in (
            ("--dtype bfloat16", spec.dtype != "float32"),
            ("--activation-checkpointing", spec.activation_checkpointing),
        ):
            if on:
                raise SetupError(
                    f"{flag} is for the Clover recipes; the autoregressive recipe "
                    "trains its transformers model in float32 without it"
                )
        if spec.grow:
            raise SetupError("--grow is for Clover models, not the autoregressive recipe")
    over = {}
    if spec.config:
        try:
            over = json.loads(Path(spec.config).read_text())
        except OSError as e:
            raise SetupError(f"--config {spec.config}: {e.strerror}") from None
        except ValueError as e:
            raise SetupError(f"--config {spec.config}: not valid JSON ({e})") from None
        apply_overrides(recipe, over, spec.config)
    if spec.steps is not None:
        recipe.train.steps = spec.steps
    return recipe, over


def _typed(v, current, what: str):
    """``v`` as the type of the field's ``current`` value (an int where a float is due is fine; a
    bool only where a bool is due); else refused by name."""
    want = type(current)
    if isinstance(v, bool) != (want is bool) or not isinstance(v, (int, float) if want is float else want):
        raise SetupError(f"{what} must be {want.__name__}, got {v!r}")
    return want(v)


def apply_overrides(recipe: Recipe, over: dict, where: str) -> None:
    """``{"train": {...}, "model": {...}, "data": {...}}`` onto a recipe; unknown fields are refused
    by name. ``data`` holds the recipe's own scalar fields (batch size, decision share, curriculum)."""
    if not isinstance(over, dict) or set(over) - {"train", "model", "data"}:
        raise SetupError(f"{where}: expected an object with 'train', 'model' and/or 'data' sections")
    for section, v in over.items():
        if not isinstance(v, dict):
            raise SetupError(f"{where}: section {section!r} must be an object of fields, got {v!r}")
    data = recipe.data_fields()
    for k, v in over.get("data", {}).items():
        if k not in data:
            raise SetupError(f"{where}: unknown data field {k!r}; known: {sorted(data)}")
        setattr(recipe, k, _typed(v, data[k], f"{where}: data field {k!r}"))
    known = {f.name for f in fields(recipe.train)}
    optional = {f.name for f in fields(recipe.train) if f.default is None}  # None means "off" for these
    for k, v in over.get("train", {}).items():
        if k not in known:
            raise SetupError(f"{where}: unknown train field {k!r}; known: {sorted(known)}")
        if k == "masking":
            v = _masking(v, recipe.train.masking, where)
        elif v is None and k in optional:  # an optional field turned off (e.g. block_size_range)
            pass
        elif getattr(recipe.train, k) is not None:  # a field without a default takes what it is given
            v = _typed(v, getattr(recipe.train, k), f"{where}: train field {k!r}")
        setattr(recipe.train, k, v)
    bad = sorted(set(over.get("model", {})) - set(recipe.model))
    if bad:
        raise SetupError(f"{where}: unknown model field(s) {bad}; known: {sorted(recipe.model)}")
    recipe.model.update(over.get("model", {}))


def _masking(v, current: MaskingConfig, where: str) -> MaskingConfig:
    """The recipe's ``current`` masking with the fields ``v`` names changed (the others kept:
    ``{"confidence": 1.0}`` keeps the recipe's ``samples`` and ``t_min``)."""
    masking = {f.name for f in fields(MaskingConfig)}
    if not isinstance(v, dict):
        raise SetupError(f"{where}: train field 'masking' must be an object, got {v!r}")
    if set(v) - masking:
        raise SetupError(f"{where}: unknown masking field(s) {sorted(set(v) - masking)}; known: {sorted(masking)}")
    try:
        return MaskingConfig(**{**asdict(current), **v})
    except (TypeError, ValueError) as e:
        raise SetupError(f"{where}: train field 'masking': {e}") from None


def _read_data(spec: RunSpec) -> tuple[list[dict] | None, list[dict] | None]:
    if not spec.data:
        return None, None
    try:
        return read_chat_jsonl(spec.data), read_chat_jsonl(spec.val_data) if spec.val_data else None
    except (OSError, ValueError) as e:
        raise SetupError(str(e)) from None


def _init_config(spec: RunSpec, init_dir: Path) -> CloverConfig:
    """The ``--init-from`` model's config, read (and checked) once, before anything is written."""
    try:
        config = load_config(init_dir)
    except CheckpointError as e:
        raise SetupError(f"--init-from {spec.init_from}: {e}") from None
    if config.quantization is not None:
        raise SetupError(
            f"--init-from {spec.init_from} is a quantized checkpoint (inference only); "
            "train from its full-precision source"
        )
    return config


def _load_tokenizer(d: Path) -> CloverTokenizer:
    try:
        return CloverTokenizer.load(d)
    except (FileNotFoundError, ValueError) as e:  # missing or corrupt tokenizer files
        raise SetupError(str(e)) from None


def _tokenizer(run_dir: Path, init_dir: Path | None, recipe: Recipe, data: list[dict] | None) -> CloverTokenizer:
    """A resumed run keeps its tokenizer, a warm start takes its weights' own; from scratch on
    ``--data`` a byte-level BPE is trained on it, else the recipe's corpus gives one."""
    if (run_dir / "tokenizer.json").exists():
        return _load_tokenizer(run_dir)
    if init_dir:
        return _load_tokenizer(init_dir)
    if data is not None:
        texts = [render(e["messages"], e["tools"]) for e in data]
        return CloverTokenizer(train_tokenizer(texts, recipe.tokenizer_vocab, recipe.added_tokens()))
    return recipe.tokenizer()


def _lines(lines: list) -> str:
    more = f" and {len(lines) - 5} more" if len(lines) > 5 else ""
    return ("line " if len(lines) == 1 else "lines ") + ", ".join(str(n) for n in lines[:5]) + more


def _fit_data(tok: CloverTokenizer, examples: list[dict], path: str, max_len: int, rank: int) -> list[dict]:
    """The chats as training sees them (``recipes.fit_to_length``): an answer past ``max_len``
    tokens is never a target; what is left out or cut is said once, by line."""
    kept, dropped, cut = fit_to_length(tok, examples, max_len)
    hint = f'a --config file with {{"data": {{"max_len": N}}}} raises the limit of {max_len} tokens'
    if not kept:
        raise SetupError(f"{path}: no example has an answer within its first {max_len} tokens; {hint}")
    if rank == 0 and (dropped or cut):
        said = []
        if dropped:
            said.append(f"{len(dropped)} left out (no answer within the first {max_len} tokens: {_lines(dropped)})")
        if cut:
            said.append(f"{len(cut)} with an answer cut at token {max_len} ({_lines(cut)})")
        print(f"clover train: warning: {path}: of {len(examples)} examples, {'; '.join(said)}; {hint}", file=sys.stderr)
    return kept


def _split_validation(tok, data, val_data, spec: RunSpec, max_len: int, rank: int):
    """The chats fitted to ``max_len``; without ``--val-data`` the last 5 % (at least one example)
    are held out when there are 20 or more, else validation reads the training chats."""
    data = _fit_data(tok, data, spec.data, max_len, rank)
    if val_data is not None:
        return data, _fit_data(tok, val_data, spec.val_data, max_len, rank)
    k = len(data) // 20 if len(data) >= 20 else 0
    return (data[:-k], data[-k:]) if k else (data, data)
