"""OpenAI-compatible HTTP server over the engine (docs/architecture.md, Serving): a thin async layer,
the engine in its own thread.

Names are imported on first use, so the other sub-commands (``clover train`` on a GPU box without
the server's web stack, say) never import FastAPI."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    "create_app": "clover.server.app",
    "load_engine": "clover.api.loading",
    "AsyncEngine": "clover.server.async_engine",
    "EngineFailure": "clover.server.async_engine",
    "QueueFull": "clover.server.async_engine",
}
__all__ = ["AsyncEngine", "EngineFailure", "QueueFull", "create_app", "load_engine"]

if TYPE_CHECKING:
    from clover.api.loading import load_engine
    from clover.server.app import create_app
    from clover.server.async_engine import AsyncEngine, EngineFailure, QueueFull


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'clover.server' has no attribute {name!r}")
