"""Prompt sources and the run directory (the unit of data everything downstream reads)."""
