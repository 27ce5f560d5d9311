"""Bound results on disk: an artifact directory (kind ``bound``) and reading it back, typed.

``lenpred bound`` writes ``OUT/`` atomically through :func:`lenpred.artifacts.write_artifact`::

    OUT/meta.json        kind "bound", schema version, config, card hash (scope "run"), source
    OUT/bound.json       every figure (:class:`~lenpred.stats.results.BoundSummary`)
    OUT/per_prompt.csv   one row per prompt and variant
    OUT/summary.md       the human-readable report, embedding the plots
    OUT/*.png            hist_grid, sd_vs_mu, hazard, mae_normal (unless --no-plots)

The writer lives with the presentation (:func:`lenpred.report.bound.write_bound`); reading needs
no plotting, so it is here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import pandas as pd

from lenpred.artifacts import load_artifact
from lenpred.stats.results import BoundSummary

KIND = "bound"
SCHEMA_VERSION = 1
BOUND_JSON = "bound.json"
PER_PROMPT_CSV = "per_prompt.csv"
SUMMARY_MD = "summary.md"

__all__ = ["KIND", "SCHEMA_VERSION", "load_bound", "load_per_prompt"]


def load_bound(path: str | os.PathLike[str], card: Mapping[str, Any] | None = None) -> BoundSummary:
    """The figures of a bound artifact; with ``card`` (a run's card.json), refuse one made for another run."""
    art = load_artifact(path, kind=KIND, schema_versions=(SCHEMA_VERSION,), card=card, what="bound result")
    return BoundSummary.from_json_dict(art.read_json(BOUND_JSON))


def load_per_prompt(path: str | os.PathLike[str]) -> pd.DataFrame:
    """per_prompt.csv of a bound artifact: one row per prompt and variant."""
    art = load_artifact(path, kind=KIND, schema_versions=(SCHEMA_VERSION,), what="bound result")
    return pd.read_csv(art.file(PER_PROMPT_CSV), dtype={"prompt_id": str})
