"""Transitional: moved to ``clover.airspace``."""
