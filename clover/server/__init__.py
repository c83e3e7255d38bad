"""OpenAI-compatible HTTP server over the engine (design §5): a thin async layer, the engine in its own thread."""

from clover.server.app import create_app, load_engine
from clover.server.async_engine import AsyncEngine, EngineFailure, QueueFull

__all__ = ["AsyncEngine", "EngineFailure", "QueueFull", "create_app", "load_engine"]
