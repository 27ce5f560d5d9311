"""Standard normal quantiles the package shares: a head's q10 / q90 are a normal's mean -/+ :data:`Z90`
standard deviations (predictors, OUTLETS), and a scheduler reads a spread back from them the same way
(:mod:`lenpred.sched.dists`, the router's estimators). numpy/scipy only: cheap to import."""

from __future__ import annotations

from scipy import special

__all__ = ["Z90"]

Z90 = float(special.ndtri(0.9))  # 1.2816: the 10/90% quantiles of N(0, 1) are -/+ this
