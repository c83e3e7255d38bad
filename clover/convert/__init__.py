"""Convert pretrained checkpoints into Clover models: the Qwen3.5/3.6 hybrid models (dense and
MoE) and Qwen3-Next (docs/conversion.md)."""

from clover.convert.pipeline import ConversionReport, convert
from clover.convert.qwen import NAME_MAP, NAME_MAPS, NEW_PARAMS, SKIP
from clover.convert.shards import ConversionError

__all__ = ["NAME_MAP", "NAME_MAPS", "NEW_PARAMS", "SKIP", "ConversionError", "ConversionReport", "convert"]
