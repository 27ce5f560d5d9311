"""Decode-length statistics and the prefill bound: pure numpy/scipy/pandas functions.

Modules, in the order the analysis uses them:

- :mod:`~lenpred.stats.lengths` reads a run and builds the three treatments of truncation
  (censoring-aware, EOS-only, capped); :mod:`~lenpred.stats.censoring` fits and imputes the tail.
- :mod:`~lenpred.stats.perprompt` per-prompt statistics; :mod:`~lenpred.stats.bound` the oracle MAE
  (bracketed by in-sample and leave-one-out estimates) and the squared-error oracle.
- :mod:`~lenpred.stats.normal` the normal law, :mod:`~lenpred.stats.affine` sd = alpha * mu + b,
  :mod:`~lenpred.stats.segments` the segment-count CV, :mod:`~lenpred.stats.hazard` the stopping hazard.
- :mod:`~lenpred.stats.simulate` synthetic generators with exact ground truth.
- :mod:`~lenpred.stats.report` runs it all (:func:`analyse_run`) and writes bound.json;
  :mod:`~lenpred.stats.verdicts` states which claims hold; :mod:`~lenpred.stats.summary_md` writes
  summary.md. Plots: :mod:`lenpred.report.bound_plots`.
"""

from lenpred.stats.config import BoundConfig
from lenpred.stats.report import BoundAnalysis, analyse_run

__all__ = ["BoundAnalysis", "BoundConfig", "analyse_run"]
