"""Plots and human-readable reports built from lenpred's analyses."""
