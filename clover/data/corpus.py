"""Transitional: moved to ``clover.airspace.corpus`` (this name goes once every caller uses the new one)."""

import importlib


def __getattr__(name: str):
    return getattr(importlib.import_module("clover.airspace.corpus"), name)
