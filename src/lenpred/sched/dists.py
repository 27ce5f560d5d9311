"""Predictive length distributions as a scheduler reads them: equal-weight support points.

A request's predictive distribution of its *total* output length is carried as ``n`` sorted support
points of equal weight 1/n (:class:`LengthDist`). That one form holds both sources lenpred has:

* an empirical distribution: the prompt's other K-1 samples (the oracle distribution a perfect
  prefill predictor would give), or any predictor's own samples (the ``dist_tokens`` column of a
  predictions table);
* a parametric fit to a head's ``q10 / q50 / q90`` (or ``pred`` and ``spread``): a two-piece normal
  through the three quantiles (left scale from q50 - q10, right scale from q90 - q50; a q10 clipped at
  0 borrows the right scale), conditioned on L >= 1, read at the levels (i + 1/2) / n of that and
  clipped at the cap (:func:`from_quantiles`). For the heads' clipped-normal quantiles this is that
  same normal.

What a policy asks of it, at attained service ``a`` (tokens generated), always conditioned on
survival (L > a), never by subtracting ``a`` from a point:

* :meth:`LengthDist.rank` -- the Gittins rank (1 / index): ``inf_D E[min(L-a, D) | L > a] / P(L-a <= D | L > a)``.
  For equal-weight points with remaining ``r_1 <= ... <= r_m`` the infimum sits at a support point
  (between two, E[min] grows while P is flat), so ``rank = min_k (r_1 + ... + r_k + (m-k) r_k) / k``.
  Ranks are tabled once per distribution for every integer age 0..T (T = the largest point), so a
  policy reads one list entry per request. Past the largest point the distribution says nothing:
  the remaining length is then taken uniform on (a, cap] (rank (cap - a) / 2), or, without a cap,
  as long as what was already generated (rank a).
* :meth:`LengthDist.risk` -- TIE's ``E[R] + beta * CVaR_alpha[R]`` of the remaining length R.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import special

from lenpred.errors import DataError
from lenpred.stats.quantiles import Z90

__all__ = [
    "GRID", "LengthDist", "cvar", "from_quantiles", "from_spread", "gittins_ranks", "levels", "repredicted",
    "rescaled", "row_dist",
]

GRID = 16  # support points of a parametric fit (levels (i + 1/2) / 16: 3.1% .. 96.9%)


def gittins_ranks(x: np.ndarray, ages: np.ndarray) -> np.ndarray:
    """Gittins rank (tokens) of equal-weight support points ``x`` (sorted, (n,)) at each age in
    ``ages`` ((A,), every age below x[-1]). Vectorised: (A, n) candidate ratios, min over the row."""
    n = x.size
    prefix = np.concatenate([[0.0], np.cumsum(x)])  # (n+1,)
    a = ages[:, None].astype(np.float64)  # (A, 1)
    m = np.searchsorted(x, ages, side="right")[:, None]  # (A, 1) first point above a
    j = np.arange(n)[None, :]  # (1, n)
    k = j - m + 1  # (A, n) points counted: the k smallest remaining
    valid = k >= 1
    kk = np.where(valid, k, 1)
    s_k = prefix[j + 1] - prefix[m]  # (A, n) sum of the points m..j
    ratio = (s_k - kk * a + (n - 1 - j) * (x[None, :] - a)) / kk  # (A, n)
    return np.where(valid, ratio, np.inf).min(axis=1)


class LengthDist:
    """Equal-weight support points of a total output length distribution (tokens), with the Gittins
    ranks tabled by integer age. ``cap``: the largest length a request can reach (max_new_tokens)."""

    __slots__ = ("x", "cap", "ranks", "last", "_risk")

    def __init__(self, points: Sequence[float] | np.ndarray, cap: float | None = None) -> None:
        x = np.sort(np.asarray(points, dtype=np.float64))
        if x.size == 0 or not np.isfinite(x).all() or (x < 0).any():
            raise DataError("a predictive distribution needs at least one finite support point >= 0",
                            "give every request's dist_tokens as token counts (0 or more)")
        if cap is not None:
            x = np.minimum(x, cap)
        self.x = x
        self.cap = None if cap is None else float(cap)
        last = int(math.ceil(float(x[-1])))  # from this age on no point lies above a
        self.last = last
        self.ranks: list[float] = gittins_ranks(x, np.arange(last)).tolist() if last > 0 else []
        self._risk: dict[tuple[int, float, float], float] = {}

    def rank(self, a: int) -> float:
        """Gittins rank at attained service ``a`` (smaller = served first)."""
        if a < self.last:
            return self.ranks[a]
        if self.cap is not None:
            return max((self.cap - a) / 2.0, 0.5)
        return float(max(a, 1))

    def remaining(self, a: int) -> np.ndarray:
        """Support points of L - a given L > a (empty past the largest point)."""
        x = self.x
        return x[x > a] - a

    def risk(self, a: int, alpha: float, beta: float) -> float:
        """E[R] + beta * CVaR_alpha[R] of the remaining length R = L - a given L > a (CVaR: the mean
        of the worst 1 - alpha of the distribution, a split point weighted by its share)."""
        key = (a, alpha, beta)
        hit = self._risk.get(key)
        if hit is not None:
            return hit
        r = self.remaining(a)
        if r.size:
            val = float(r.mean() + beta * cvar(r, alpha))
        elif self.cap is not None and self.cap > a:  # past every point: uniform on (a, cap]
            val = (self.cap - a) / 2.0 * (1.0 + beta * (1.0 + alpha))
        else:
            val = (1.0 + beta) * max(a, 1)
        self._risk[key] = val
        return val


def cvar(r: np.ndarray, alpha: float) -> float:
    """Upper CVaR_alpha of equal-weight points ``r`` (sorted): the mean of the top 1 - alpha mass."""
    n = r.size
    tail = (1.0 - alpha) * n  # points' worth of mass in the tail
    full = int(math.floor(tail))
    part = tail - full
    top = r[n - full:] if full else r[:0]
    total = float(top.sum())
    if part > 1e-12 and full < n:
        total += part * float(r[n - full - 1])
    return total / tail


def levels(n: int = GRID) -> np.ndarray:
    """(n,) probability levels (i + 1/2) / n."""
    return (np.arange(n) + 0.5) / n


def from_quantiles(q10: float, q50: float, q90: float, cap: float | None, n: int = GRID) -> LengthDist:
    """A two-piece normal through (q10, q50, q90) conditioned on L >= 1, read at :func:`levels` of that
    conditional distribution and clipped at ``cap`` (the cap holds real mass: answers cut at
    max_new_tokens; mass below 1 token is the normal's artefact, so it is conditioned away, not piled
    on 1). A q10 of 0 (a clipped lower quantile says only that >= 10% lies below 0) borrows the upper
    half's scale."""
    hi = max(q90 - q50, 0.0) / Z90
    lo = max(q50 - q10, 0.0) / Z90 if q10 > 0.0 else hi
    return LengthDist(_two_piece(q50, lo, hi, cap, n), cap)


def from_spread(mean: float, spread: float, cap: float | None, n: int = GRID) -> LengthDist:
    """A normal N(mean, spread) read the same way (a table with a spread and no quantiles)."""
    return LengthDist(normal_points(mean, spread, cap, n), cap)


def normal_points(mean: float, spread: float, cap: float | None = None, n: int = GRID) -> np.ndarray:
    """The (n,) support points of :func:`from_spread`'s distribution, without building it."""
    sd = max(spread, 0.0)
    return _two_piece(mean, sd, sd, cap, n)


def _two_piece(mid: float, lo: float, hi: float, cap: float | None, n: int) -> np.ndarray:
    """(n,) points of a two-piece normal (scale lo below ``mid``, hi above) given L >= 1, at levels
    (i + 1/2) / n of that conditional distribution, clipped to [1, cap]."""
    if lo <= 0.0 and hi <= 0.0:
        return _clip(np.full(n, mid), cap)
    below = 1.0 - mid
    s = lo if below < 0 else hi
    u1 = float(special.ndtr(below / s)) if s > 0 else (0.0 if below < 0 else 1.0)
    if u1 >= 1.0 - 1e-12:  # (almost) all the mass below 1 token: the shortest possible answer
        return np.ones(n)
    z = special.ndtri(u1 + levels(n) * (1.0 - u1))
    return _clip(mid + np.where(z < 0, lo, hi) * z, cap)


def _clip(pts: np.ndarray, cap: float | None) -> np.ndarray:
    return np.clip(pts, 1.0, np.inf if cap is None else cap)


def row_dist(row: dict, cap: float | None) -> LengthDist | None:
    """The distribution one aligned predictions row carries (``dist_tokens``, else the quantiles,
    else pred and spread), or None when it carries none."""
    pts = row.get("dist_tokens")
    if pts is not None and len(pts):
        return LengthDist(pts, cap)
    q = (row.get("q10"), row.get("q50"), row.get("q90"))
    if all(v is not None and v == v for v in q):
        return from_quantiles(float(q[0]), float(q[1]), float(q[2]), cap)  # type: ignore[arg-type]
    s = row.get("spread")
    if s is not None and s == s:
        return from_spread(float(row["pred_tokens"]), float(s), cap)
    return None


def repredicted(gen: int, q10: float, q50: float, q90: float, cap: float | None) -> LengthDist:
    """The distribution a re-prediction with its own quantiles says: the remaining tokens' two-piece
    normal through q10 / q50 / q90 (conditioned on at least 1 more token, clipped at the room left to
    ``cap``), counted from ``gen``."""
    room = None if cap is None else max(cap - gen, 1.0)
    rem = from_quantiles(q10, max(q50, 1.0), max(q90, q50, 1.0), room)
    return LengthDist(gen + rem.x, cap)


def rescaled(base: LengthDist, gen: int, remaining: float) -> LengthDist:
    """The distribution after a re-prediction of ``remaining`` tokens at ``gen`` generated: the base
    distribution's shape (points over their median) scaled to that median, counted from ``gen``."""
    med = float(np.median(base.x))
    shape = base.x / med if med > 0 else np.ones_like(base.x)
    pts = gen + np.maximum(remaining, 0.5) * shape
    return LengthDist(np.maximum(pts, gen + 0.5), base.cap)
