"""Bound results on disk: an artifact directory (kind ``bound``) and reading it back, typed.

``lenpred bound`` calls :func:`make_bound`: the overwrite rule, the analysis, then ``OUT/`` written
atomically through :func:`lenpred.io.artifacts.write_artifact`::

    OUT/meta.json        kind "bound", schema version, config, card hash (scope "run"), source
    OUT/bound.json       every figure (:class:`~lenpred.stats.results.BoundSummary`)
    OUT/per_prompt.csv   one row per prompt and variant
    OUT/summary.md       the human-readable report, embedding the plots
    OUT/*.png            hist_grid, sd_vs_mu, hazard, mae_normal (unless --no-plots)

:func:`write_bound` writes the figures and the per-prompt table; the rendered files (summary.md and the
plots) come from the ``render`` given (``lenpred bound`` gives :func:`lenpred.report.bound.rendered_files`),
so nothing here plots or formats.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from lenpred.io.artifacts import Artifact, ArtifactHeader, check_out, load_artifact, write_artifact
from lenpred.stats.analysis import BoundAnalysis, analyse_path
from lenpred.stats.config import BoundConfig
from lenpred.stats.results import BoundSummary

KIND = "bound"
SCHEMA_VERSION = 1
BOUND_JSON = "bound.json"
PER_PROMPT_CSV = "per_prompt.csv"
SUMMARY_MD = "summary.md"

__all__ = ["KIND", "SCHEMA_VERSION", "BoundRun", "default_out", "load_bound", "load_per_prompt", "make_bound",
           "write_bound"]

Render = Callable[[BoundAnalysis], Mapping[str, bytes]]
"""What turns an analysis into the files written beside the figures (summary.md, plots), by file name."""


@dataclass(frozen=True)
class BoundRun:
    """What :func:`make_bound` did: the analysis, the artifact it wrote, where, and how long it took."""

    analysis: BoundAnalysis
    artifact: Artifact
    out: Path
    elapsed_s: float



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


def default_out(source: str | os.PathLike[str]) -> Path:
    """out/bound/<run or table name>: where a bound goes when no ``--out`` is given."""
    src = Path(source)
    return Path("out/bound") / (src.stem if src.is_file() else src.resolve().name)


def check_bound_out(source: str | os.PathLike[str], out: str | os.PathLike[str]) -> None:
    """The overwrite rule before the analysis: a run's bound may replace only that run's bound."""
    from lenpred.data.rundir import CARD, RunDir

    src = Path(source)
    card = RunDir.open(src).card if (src / CARD).is_file() else None
    check_out(Path(out), kind=KIND, card=card, inputs={"RUN_OR_TABLE": src})


def make_bound(
    source: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    config: BoundConfig | None = None,
    *,
    max_new_tokens: int | None = None,
    render: Render | None = None,
) -> BoundRun:
    """The bound of a run directory or a length table, written as an artifact at ``out`` (default
    :func:`default_out`): the overwrite rule first, then the analysis, then the figures, the
    per-prompt table and what ``render`` makes of the analysis (nothing when ``None``)."""
    dest = Path(out) if out is not None else default_out(source)
    check_bound_out(source, dest)
    t0 = time.perf_counter()
    analysis = analyse_path(source, config, max_new_tokens=max_new_tokens)
    art = write_bound(analysis, dest, render(analysis) if render is not None else None)
    return BoundRun(analysis, art, dest, time.perf_counter() - t0)
