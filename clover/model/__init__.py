"""The Clover model: config, layers, caches, the block-diffusion LM and its checkpoint format."""

from clover.model.cache import ModelCache
from clover.model.config import ATTN, GDN, CloverConfig, ConfigError, preset
from clover.model.model import CloverForBlockDiffusion, TrainOutput

__all__ = [
    "ATTN",
    "GDN",
    "CloverConfig",
    "ConfigError",
    "CloverForBlockDiffusion",
    "ModelCache",
    "TrainOutput",
    "preset",
]
