"""Export Clover checkpoints for other libraries: ``export_hf`` writes a folder that Hugging Face
transformers loads with its own modeling code (``hf_modeling/``, torch and transformers only)."""

from clover.export.hf_folder import ExportError, ExportReport, export_hf, export_problems

__all__ = ["ExportError", "ExportReport", "export_hf", "export_problems"]
