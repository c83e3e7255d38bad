"""The modeling code ``clover export hf`` copies beside exported weights (torch and transformers only)."""
