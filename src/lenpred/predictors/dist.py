"""Predictive distributions of a head: mean, spread and the 10/50/90% quantiles, per prompt.

Two shapes cover every head:

* :func:`clipped_normal` -- a normal N(mu, sd) whose mass below 0 sits at 0 and above the cap at the
  cap (the generated count is min(L, cap) >= 0). Clipping, not truncation, keeps the median at mu,
  so a head's point prediction and its q50 agree. Heads without a spread of their own use it with
  the affine law sd = alpha * mu + b (:class:`AffineSpread`).
* :func:`binned` -- a histogram over length bins (soft-label, probe heads), uniform inside each bin.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import special

from lenpred.stats.quantiles import Z90

__all__ = ["Dist", "clipped_normal", "binned", "binned_cdf", "weighted_quantile"]


@dataclass(frozen=True)
class Dist:
    """Per-prompt predictive summaries, each (n,) in tokens."""

    mean: np.ndarray
    spread: np.ndarray  # predictive standard deviation
    q10: np.ndarray
    q50: np.ndarray
    q90: np.ndarray

    def frame(self, prompt_ids: np.ndarray, point: np.ndarray) -> pd.DataFrame:
        """Rows of the predictions table (one per prompt, ``sample_idx`` -1)."""
        return pd.DataFrame({
            "prompt_id": np.asarray(prompt_ids).astype(str), "sample_idx": -1,
            "pred_tokens": point, "spread": self.spread, "q10": self.q10, "q50": self.q50, "q90": self.q90,
        })


def _phi(z: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * z * z) / np.sqrt(2.0 * np.pi)


def clipped_normal(mu: np.ndarray, sd: np.ndarray, cap: float | None) -> Dist:
    """Y = clip(X, 0, cap) with X ~ N(mu, sd): exact mean and sd, quantiles clip(mu + sd z_p)."""
    mu = np.asarray(mu, dtype=np.float64)
    sd = np.maximum(np.asarray(sd, dtype=np.float64), 1e-9)
    hi = np.inf if cap is None else float(cap)
    a = (0.0 - mu) / sd
    b = (hi - mu) / sd  # +inf without a cap
    pa, pb = special.ndtr(a), special.ndtr(b)
    fa, fb = _phi(a), (0.0 if cap is None else _phi(b))
    bfb = 0.0 if cap is None else b * fb
    inside = pb - pa
    # E[X; 0 < X < hi] and E[X^2; 0 < X < hi] for X = mu + sd Z (moments of a normal over an interval)
    m1 = mu * inside + sd * (fa - fb)
    m2 = mu**2 * inside + 2 * mu * sd * (fa - fb) + sd**2 * (inside + a * fa - bfb)
    top = 0.0 if cap is None else hi * (1.0 - pb)
    mean = m1 + top
    ex2 = m2 + (0.0 if cap is None else hi**2 * (1.0 - pb))
    spread = np.sqrt(np.maximum(ex2 - mean**2, 0.0))

    def q(z: float) -> np.ndarray:
        return np.clip(mu + sd * z, 0.0, hi)

    return Dist(mean, spread, q(-Z90), q(0.0), q(Z90))


def binned_quantile(probs: np.ndarray, edges: np.ndarray, p: float) -> np.ndarray:
    """The p-quantile of each row's histogram (probs (n, B) over ``edges`` (B+1,)), uniform within bins."""
    cum = np.cumsum(probs, axis=1)  # (n, B) mass up to each bin's right edge
    j = np.minimum((cum < p).sum(axis=1), probs.shape[1] - 1)  # (n,) first bin reaching p
    rows = np.arange(probs.shape[0])
    before = cum[rows, j] - probs[rows, j]
    frac = np.clip((p - before) / np.maximum(probs[rows, j], 1e-12), 0.0, 1.0)
    return edges[j] + frac * (edges[j + 1] - edges[j])


def binned_cdf(probs: np.ndarray, edges: np.ndarray, y: np.ndarray) -> np.ndarray:
    """F_i(y_i): each row's histogram CDF (uniform within bins) at its own value ``y`` (n,) -- the PIT."""
    probs = np.asarray(probs, dtype=np.float64)
    probs = probs / probs.sum(axis=1, keepdims=True)
    y = np.asarray(y, dtype=np.float64)
    n_bins = probs.shape[1]
    j = np.clip(np.searchsorted(edges, y, side="right") - 1, 0, n_bins - 1)  # (n,) the bin holding y
    rows = np.arange(probs.shape[0])
    before = np.cumsum(probs, axis=1)[rows, j] - probs[rows, j]
    frac = np.clip((y - edges[j]) / (edges[j + 1] - edges[j]), 0.0, 1.0)
    return np.clip(before + frac * probs[rows, j], 0.0, 1.0)


def binned(probs: np.ndarray, edges: np.ndarray, levels: tuple[float, float] = (0.1, 0.9)) -> Dist:
    """Summaries of histograms ``probs`` (n, B) over bins ``edges`` (B+1,); q10 / q90 are the
    histogram's quantiles at ``levels`` (the nominal 0.1 / 0.9 unless recalibrated on validation)."""
    probs = np.asarray(probs, dtype=np.float64)
    probs = probs / probs.sum(axis=1, keepdims=True)
    mid = 0.5 * (edges[1:] + edges[:-1])  # (B,)
    w = edges[1:] - edges[:-1]
    mean = probs @ mid
    ex2 = probs @ (mid**2 + w**2 / 12.0)  # second moment of a uniform on each bin
    spread = np.sqrt(np.maximum(ex2 - mean**2, 0.0))
    return Dist(mean, spread, binned_quantile(probs, edges, levels[0]), binned_quantile(probs, edges, 0.5),
                binned_quantile(probs, edges, levels[1]))


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float | np.ndarray) -> np.ndarray:
    """Quantile(s) of weighted values (midpoint rule on the cumulative weights, linear in between)."""
    v = np.asarray(values, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    c = (np.cumsum(w) - 0.5 * w) / w.sum()
    return np.interp(q, c, v)
