"""Transitional: moved to ``clover.api.loading`` (this name goes once every caller uses the new one)."""

import importlib


def __getattr__(name: str):
    mod = importlib.import_module("clover.api.loading")
    return getattr(mod, "load_model_dir" if name == "load_checkpoint" else name)
