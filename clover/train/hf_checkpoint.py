"""Hugging Face checkpoint directories for the autoregressive base: written and read back with
the same strict checks as Clover's own (safetensors only, config and every tensor checked)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from clover.data.chat import CLOVER_TEMPLATE as CHAT_TEMPLATE
from clover.data.tokenizer import CloverTokenizer
from clover.model.io import CheckpointError, _atomic_save


def save_hf(model, tok: CloverTokenizer, out: str | Path, state: dict | None = None) -> Path:
    """A Hugging Face checkpoint directory: ``config.json``, ``model.safetensors``,
    ``generation_config.json``, ``tokenizer.json`` + ``tokenizer_config.json`` and the chat
    template (``chat_template.jinja``: Clover's compact ChatML with ``<tool_call>`` markup), so
    ``AutoModelForCausalLM.from_pretrained`` / ``AutoTokenizer.from_pretrained`` load it and
    ``apply_chat_template`` renders what training saw. ``state``: full weights to write instead
    of the model's own (gathered from FSDP2 shards)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in (model.state_dict() if state is None else state).items()}
    _atomic_save(state, out / "model.safetensors")
    model.config.save_pretrained(out)
    gen = {"eos_token_id": tok.eos_token_ids, "pad_token_id": tok.pad_token_id, "do_sample": False}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=1))
    save_tokenizer(tok, out)
    return out


def save_tokenizer(tok: CloverTokenizer, out: Path) -> None:
    """The tokenizer files with the chat template, as Hugging Face tokenizers read them."""
    tok.save(out)
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE.read_text())


def load_hf_state(path: Path, model) -> dict[str, torch.Tensor]:
    """A checkpoint's weights for ``model``, refused when its config or tensors differ."""
    try:
        saved = json.loads((path / "config.json").read_text())
        state = load_file(str(path / "model.safetensors"))
    except Exception as e:
        raise CheckpointError(f"{path}: unreadable checkpoint ({e})") from None
    try:  # both configs through the same class: save_pretrained leaves out what equals the default
        saved = type(model.config).from_dict(saved).to_dict()
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: config.json does not describe this model ({e})") from None
    ours = model.config.to_dict()
    skip = {"transformers_version", "_name_or_path", "dtype", "torch_dtype"}
    diff = sorted(k for k in set(ours) | set(saved) if k not in skip and ours.get(k) != saved.get(k))
    if diff:
        raise CheckpointError(f"{path}: checkpoint config differs from the run's config in {diff}")
    want = model.state_dict()
    if set(state) != set(want) or any(state[k].shape != want[k].shape for k in want):
        raise CheckpointError(f"{path}: its tensors do not fit the run's model")
    return state
