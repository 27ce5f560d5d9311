"""Bootstrap over prompts: the unit of sampling in a run is the prompt, so intervals resample prompts.

Resampling whole prompts keeps each prompt's within-prompt noise in its per-prompt estimate, which is
what makes the interval cover both sources of error (which prompts were drawn, and which samples).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

# scipy draws resamples in batches of this many, to bound memory on large runs (B x N index cells).
_BATCH_CELLS = 1 << 20


@dataclass(frozen=True)
class Bootstrap:
    """How an interval over prompts is drawn: ``n_boot`` resamples at level ``ci``, from ``default_rng(seed)``."""

    n_boot: int = 1000
    ci: float = 0.95
    seed: int = 0


def _batch(n: int) -> int:
    return max(1, _BATCH_CELLS // max(n, 1))


def _interval(res: object) -> tuple[float, float]:
    ci = res.confidence_interval  # type: ignore[attr-defined]
    return (float(ci.low), float(ci.high))


def percentile_ci(draws: np.ndarray, ci: float) -> tuple[float, float]:
    """Percentile interval of bootstrap draws (NaNs, from degenerate resamples, are ignored)."""
    d = np.asarray(draws, dtype=float)
    d = d[np.isfinite(d)]
    if d.size == 0:
        return (float("nan"), float("nan"))
    lo, hi = np.quantile(d, [(1 - ci) / 2, (1 + ci) / 2])
    return (float(lo), float(hi))


def mean_ci(x: np.ndarray, n_boot: int, ci: float, rng: np.random.Generator) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``x`` (non-finite values dropped; NaNs for fewer
    than two values). :func:`scipy.stats.bootstrap`, batched."""
    from scipy.stats import bootstrap

    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    if x.size < 2:
        return (float("nan"), float("nan"))
    res = bootstrap((x,), np.mean, n_resamples=n_boot, confidence_level=ci, method="percentile",
                    vectorized=True, batch=_batch(x.size), rng=rng)
    return _interval(res)


def _sum_ratio(num: np.ndarray, den: np.ndarray, axis: int = -1) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sum(num, axis=axis) / np.sum(den, axis=axis)


def ratio_ci(
    num: np.ndarray, den: np.ndarray, n_boot: int, ci: float, rng: np.random.Generator
) -> tuple[float, float]:
    """Percentile bootstrap interval of sum(num) / sum(den), resampling (num, den) pairs together
    (:func:`scipy.stats.bootstrap` with ``paired=True``, batched)."""
    from scipy.stats import bootstrap

    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    ok = np.isfinite(num) & np.isfinite(den)
    if ok.sum() < 2:
        return (float("nan"), float("nan"))
    res = bootstrap((num[ok], den[ok]), _sum_ratio, paired=True, n_resamples=n_boot, confidence_level=ci,
                    method="percentile", vectorized=True, batch=_batch(int(ok.sum())), rng=rng)
    return _interval(res)


def resample_indices(n: int, n_boot: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Index arrays of B bootstrap resamples of n rows (for statistics that need a refit)."""
    for _ in range(n_boot):
        yield rng.integers(0, n, n)
