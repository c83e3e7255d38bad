"""Transitional: moved to ``clover.api.llm`` (this name goes once every caller uses the new one)."""

import importlib


def __getattr__(name: str):
    mod = importlib.import_module("clover.api.llm")
    return getattr(mod, "load_model_dir" if name == "load_checkpoint" else name)
