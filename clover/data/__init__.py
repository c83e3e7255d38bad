"""Data for Clover's default model: the airspace tool set, corpus, decisions, tokenizer, chat template."""

from pathlib import Path

DEFAULT_MODEL_DIR = Path(__file__).resolve().parents[1] / "assets" / "default"


def default_model_dir() -> Path:
    """The bundled default model (weights, config, tokenizer), shipped inside the package."""
    if not (DEFAULT_MODEL_DIR / "config.json").exists():
        raise FileNotFoundError(
            f"no bundled model at {DEFAULT_MODEL_DIR}: pass --model DIR or train one with "
            "`clover train --recipe airspace`"
        )
    return DEFAULT_MODEL_DIR
