"""Convert pretrained checkpoints into Clover models (design §2: Qwen3.5/3.6 hybrid MoE → Clover)."""

from clover.convert.pipeline import ConversionReport, convert
from clover.convert.qwen import NAME_MAP, NEW_PARAMS, SKIP
from clover.convert.shards import ConversionError

__all__ = ["NAME_MAP", "NEW_PARAMS", "SKIP", "ConversionError", "ConversionReport", "convert"]
