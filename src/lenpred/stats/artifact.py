"""Bound results on disk: an artifact directory (kind ``bound``) and reading it back, typed.

``lenpred bound`` writes ``OUT/`` atomically through :func:`lenpred.io.artifacts.write_artifact`::

    OUT/meta.json        kind "bound", schema version, config, card hash (scope "run"), source
    OUT/bound.json       every figure (:class:`~lenpred.stats.results.BoundSummary`)
    OUT/per_prompt.csv   one row per prompt and variant
    OUT/summary.md       the human-readable report, embedding the plots
    OUT/*.png            hist_grid, sd_vs_mu, hazard, mae_normal (unless --no-plots)

:func:`write_bound` writes the figures and the per-prompt table; the rendered files (summary.md and the
plots, :func:`lenpred.report.bound.rendered_files`) are handed to it, so nothing here plots or formats.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from lenpred.io.artifacts import Artifact, ArtifactHeader, load_artifact, write_artifact
from lenpred.stats.results import BoundSummary

if TYPE_CHECKING:
    from lenpred.stats.analysis import BoundAnalysis

KIND = "bound"
SCHEMA_VERSION = 1
BOUND_JSON = "bound.json"
PER_PROMPT_CSV = "per_prompt.csv"
SUMMARY_MD = "summary.md"

__all__ = ["KIND", "SCHEMA_VERSION", "load_bound", "load_per_prompt", "write_bound"]


def load_bound(path: str | os.PathLike[str], card: Mapping[str, Any] | None = None) -> BoundSummary:
    """The figures of a bound artifact; with ``card`` (a run's card.json), refuse one made for another run."""
    art = load_artifact(path, kind=KIND, schema_versions=(SCHEMA_VERSION,), card=card, what="bound result")
    return BoundSummary.from_json_dict(art.read_json(BOUND_JSON))


def load_per_prompt(path: str | os.PathLike[str]) -> pd.DataFrame:
    """per_prompt.csv of a bound artifact: one row per prompt and variant."""
    art = load_artifact(path, kind=KIND, schema_versions=(SCHEMA_VERSION,), what="bound result")
    return pd.read_csv(art.file(PER_PROMPT_CSV), dtype={"prompt_id": str})


def write_bound(analysis: BoundAnalysis, out: str | os.PathLike[str], files: Mapping[str, bytes] | None = None) -> Artifact:
    """Write bound.json, per_prompt.csv and ``files`` (the rendered summary.md and plots, by file name)
    as one artifact directory (atomic); meta.json records the source (a run directory or a length table)."""
    s = analysis.summary
    table = analysis.per_prompt_table()
    header = ArtifactHeader(kind=KIND, schema_version=SCHEMA_VERSION, config=s.config, card=analysis.lengths.card,
                            card_scope="run", meta={"source": analysis.lengths.source, "run": s.run})
    return write_artifact(
        Path(out),
        header,
        json_files={BOUND_JSON: s.to_json_dict()},
        files={PER_PROMPT_CSV: table.to_csv(index=False, float_format="%.6g").encode(), **(files or {})},
    )
