"""Bootstrap over prompts: the unit of sampling in a run is the prompt, so intervals resample prompts.

Resampling whole prompts keeps each prompt's within-prompt noise in its per-prompt estimate, which is
what makes the interval cover both sources of error (which prompts were drawn, and which samples).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

# Resamples are drawn in blocks of about this many index cells, to bound memory on large runs.
_BLOCK_CELLS = 1 << 20


def resampled_sums(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(B, Q) column sums of ``values`` (N, Q) over B bootstrap resamples of its N rows."""
    v = np.asarray(values, dtype=float)
    if v.ndim == 1:
        v = v[:, None]
    n = v.shape[0]
    out = np.empty((n_boot, v.shape[1]))
    block = max(1, _BLOCK_CELLS // max(n, 1))
    for start in range(0, n_boot, block):
        b = min(block, n_boot - start)
        idx = rng.integers(0, n, (b, n))  # (b, N) rows drawn with replacement
        out[start : start + b] = v[idx].sum(1)
    return out


def percentile_ci(draws: np.ndarray, ci: float) -> tuple[float, float]:
    """Percentile interval of bootstrap draws (NaNs, from degenerate resamples, are ignored)."""
    d = np.asarray(draws, dtype=float)
    d = d[np.isfinite(d)]
    if d.size == 0:
        return (float("nan"), float("nan"))
    lo, hi = np.quantile(d, [(1 - ci) / 2, (1 + ci) / 2])
    return (float(lo), float(hi))


def mean_ci(x: np.ndarray, n_boot: int, ci: float, rng: np.random.Generator) -> tuple[float, float]:
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    if x.size < 2:
        return (float("nan"), float("nan"))
    return percentile_ci(resampled_sums(x, n_boot, rng)[:, 0] / x.size, ci)


def ratio_ci(
    num: np.ndarray, den: np.ndarray, n_boot: int, ci: float, rng: np.random.Generator
) -> tuple[float, float]:
    """Interval of sum(num) / sum(den), resampling (num, den) pairs together."""
    ok = np.isfinite(num) & np.isfinite(den)
    if ok.sum() < 2:
        return (float("nan"), float("nan"))
    s = resampled_sums(np.column_stack([num[ok], den[ok]]), n_boot, rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        return percentile_ci(s[:, 0] / s[:, 1], ci)


def resample_indices(n: int, n_boot: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Index arrays of B bootstrap resamples of n rows (for statistics that need a refit)."""
    for _ in range(n_boot):
        yield rng.integers(0, n, n)
