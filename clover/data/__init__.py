"""Text as the model sees it, for any task: the chat template and tool-call markup (``chat``), the
tokenizer (``tokenizer``), joint decisions as chat text (``decision_chat``), the task seam (``task``)
and where the bundled model lives. A task's own data (the airspace corpus) is its package's."""

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
