"""Decode-length statistics and the prefill bound: pure numpy/scipy/pandas computations, typed results.

Entry points (``lenpred bound`` calls :func:`make_bound`)::

    from lenpred.stats import BoundConfig, analyse_run, analyse_lengths, load_bound, make_bound

    a = analyse_run("data/runs/smollm2-sharegpt", BoundConfig(n_boot=500))
    a.summary.headline_bound.oracle_mae          # tokens; .oracle_mae_ci, .relative_mae, ...
    a.summary.verdicts["normal_law"].status      # "HOLDS", "DOES NOT HOLD", ...
    a.per_prompt                                 # one row per prompt (DataFrame)
    analyse_lengths("vllm_lengths.csv")          # prompt_id, n_tokens[, stop_reason, max_new_tokens]

Modules, in the order the analysis uses them:

- :mod:`~lenpred.stats.lengths` the lengths of a run (read through :mod:`lenpred.data.lengths`) in
  three treatments of truncation; :mod:`~lenpred.stats.table` the same from a plain CSV / Parquet
  table; :mod:`~lenpred.stats.censoring` fits and imputes the tail beyond the cap.
- :mod:`~lenpred.stats.perprompt` per-prompt statistics; :mod:`~lenpred.stats.oracle` the oracle MAE
  (bracketed by in-sample and leave-one-out estimates) and the squared-error oracle.
- :mod:`~lenpred.stats.normal` the normal law, :mod:`~lenpred.stats.affine` sd = alpha * mu + b,
  :mod:`~lenpred.stats.segments` the segment-count CV, :mod:`~lenpred.stats.hazard` the stopping hazard.
- :mod:`~lenpred.stats.verdicts` states which claims hold; :mod:`~lenpred.stats.analysis` runs it
  all; :mod:`~lenpred.stats.results` the typed results (bound.json); :mod:`~lenpred.stats.artifact`
  the bound artifact: :func:`make_bound` (analyse a source and write it, what ``lenpred bound`` calls)
  and reading a written result back.
- :mod:`~lenpred.stats.portable` exp / expm1 with the same bits on every CPU (where a value decides an
  event order).
- :mod:`~lenpred.stats.synthetic` synthetic runs with exact ground truth (for tests and docs).
- :mod:`~lenpred.stats.quantiles` standard normal quantiles the whole package shares (:data:`Z90`):
  predictors, OUTLETS, the scheduling policies and the router read them from here.

Presentation (console tables, summary.md, plots) is :mod:`lenpred.report.bound`. The names below are
imported lazily (the scheduling policies read :data:`Z90` without pandas).
"""

from __future__ import annotations

from lenpred.lazy import lazy_exports

_LAZY = {
    "BoundAnalysis": "analysis", "analyse": "analysis", "analyse_lengths": "analysis", "analyse_path": "analysis",
    "analyse_run": "analysis", "load_bound": "artifact", "load_per_prompt": "artifact", "make_bound": "artifact",
    "BoundConfig": "config", "BoundSummary": "results", "VariantBound": "results", "Verdict": "results",
    "read_length_table": "table", "Z90": "quantiles",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, {name: f"{__name__}.{mod}" for name, mod in _LAZY.items()})
