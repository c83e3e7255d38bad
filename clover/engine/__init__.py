"""The block-diffusion inference engine (docs/architecture.md, The engine contract; API in docs/engine-api.md).

Names are imported on first use, so ``clover --help`` does not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# prompt tokens prefilled per engine step by default (chunked prefill, clover.engine.scheduler);
# here, so the server's flags can name it without importing torch
PREFILL_CHUNK = 512

_EXPORTS = {
    "Engine": "clover.engine.engine",
    "Event": "clover.engine.outputs",
    "Finished": "clover.engine.outputs",
    "RequestOutput": "clover.engine.outputs",
    "StepEvent": "clover.engine.outputs",
    "TextDelta": "clover.engine.outputs",
    "TokenLogprob": "clover.engine.outputs",
    "SamplingParams": "clover.engine.params",
    "ParamError": "clover.engine.params",
    "POLICIES": "clover.engine.policies",
    "Policy": "clover.engine.policies",
    "register": "clover.engine.policies",
}
__all__ = [
    "POLICIES",
    "PREFILL_CHUNK",
    "Engine",
    "Event",
    "Finished",
    "ParamError",
    "Policy",
    "RequestOutput",
    "SamplingParams",
    "StepEvent",
    "TextDelta",
    "TokenLogprob",
    "register",
]

if TYPE_CHECKING:
    from clover.engine.engine import Engine
    from clover.engine.outputs import Event, Finished, RequestOutput, StepEvent, TextDelta, TokenLogprob
    from clover.engine.params import ParamError, SamplingParams
    from clover.engine.policies import POLICIES, Policy, register


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'clover.engine' has no attribute {name!r}")
