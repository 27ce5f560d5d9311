"""Baselines for remaining-length prediction at the positions of a trajectory artifact.

Every baseline answers the question the ``outlets`` head answers -- how many more tokens will this
sample generate, having generated ``t`` -- for the same rows, as a :class:`Remaining` (q10 / q50 /
q90 of the remaining length per row). A prefill prediction is carried along the trajectory by
conditioning on survival (L > t), never by subtracting t.

* **Carried prefill head** (:func:`carry_prefill`): the input is a predictions table (``lenpred
  predict``), which holds each prompt's q10 / q50 / q90 (and spread). The full length distribution
  is rebuilt from them as the *quantile-matched two-piece normal*: F(x) = Phi((x - q50) / s1) below
  q50 and Phi((x - q50) / s2) above, s1 = (q50 - q10) / z90, s2 = (q90 - q50) / z90, clipped to
  [0, cap] (the mass above the cap sits at the cap: a server stops there). For the zoo's
  affine-spread heads (a clipped normal) this is their own distribution exactly (s1 = s2); for the
  histogram heads (softlabel, probe, egtp) it is a smooth approximation through their quantiles. A
  table with only a spread uses N(pred, spread); one with only a point, a 1-token spread (then the
  carried prediction is essentially max(pred - t, 0): said in :attr:`Remaining.note`). The carried
  p-quantile is that of L - t given L > t: Q(F(t) + p (1 - F(t))) - t, computed in the upper tail
  with log-probabilities so that far in the tail it tends to 0, not to the cap. At t = 0 nothing is
  conditioned on (every sample has a t = 0 row, an empty response too): the quantiles are the table's.
* **TRAIL-style probe**: the ``probe`` variant of the ``outlets`` head (an MLP classifier over
  equal-width bins on one target layer) with TRAIL's Bayesian refinement across steps,
  :func:`refine_sequence`: prior at a position = the posterior at the previous position times the
  transition matrix :func:`transition_matrix` (mass moves down by the tokens generated in between:
  for equal-width bins of width w and delta tokens, a share delta / w of each bin moves one bin down),
  posterior = prior times the classifier's output, normalised. The classifier's probabilities are
  used as likelihoods as in TRAIL (no division by the class prior). Refinement runs over the
  positions the artifact holds (TRAIL refines at every token; the transition over a gap is the same
  matrix for the whole gap).
* **Carried prefill oracle** (:func:`carried_oracle`): per test row (prompt p, sample k, position t),
  the median of {L_j - t : L_j > t} over prompt p's *other* samples -- the best a prefill predictor
  can do at t (leave-one-out, so the error of an oracle that saw K - 1 samples; at t = 0 it is the
  LOO prompt median of the bench: at t = 0 every other sample counts). Its q10 / q90 are the same
  set's 10/90% quantiles (of K - 1 values: a rough interval). Where no other
  sample survives to t the set is empty; such rows take the carried constant's values instead
  (counted in :attr:`Remaining.fallback_rows` and reported).
* **Carried constant** (:class:`CarriedConstant`): the training samples' lengths (each prompt weighted
  once, as the ``constant`` head), conditioned on survival the same way: the weighted quantiles of
  {L - t : L > t}. A row where no training length exceeds t gets 1 token.

Lengths are the generated counts as served (a truncated sample counts as max_new_tokens).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import special

from lenpred.errors import DataError
from lenpred.outlets.spec import sample_rows
from lenpred.predictors.dist import weighted_quantile
from lenpred.stats.quantiles import Z90

__all__ = [
    "Remaining", "transition_matrix", "refine_sequence", "refine_trajectories", "two_piece_carry", "carry_prefill",
    "carried_oracle", "CarriedConstant", "PROBS",
]

PROBS = (0.1, 0.5, 0.9)
MIN_SCALE = 1.0  # tokens: a carried distribution never collapses to a point


@dataclass
class Remaining:
    """Predicted remaining tokens per trajectory row: the 10/50/90% quantiles, each (n,)."""

    q10: np.ndarray
    q50: np.ndarray
    q90: np.ndarray
    note: str = ""
    fallback_rows: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.q10, self.q50, self.q90 = (np.asarray(v, dtype=np.float64) for v in (self.q10, self.q50, self.q90))
        if not (self.q10.shape == self.q50.shape == self.q90.shape):
            raise ValueError("q10, q50, q90 must have the same shape")

    def take(self, rows: np.ndarray) -> Remaining:
        return Remaining(self.q10[rows], self.q50[rows], self.q90[rows], self.note, self.fallback_rows, self.extra)


# ---------------------------------------------------------------- TRAIL's Bayesian refinement
def transition_matrix(edges: np.ndarray, delta: float, absorb: bool = True) -> np.ndarray:
    """(B, B) matrix M[i, j]: the chance that a remaining length in bin i is in bin j after ``delta``
    more tokens (mass uniform within a bin, shifted down by ``delta``). Mass shifted below 0 stays in
    bin 0 with ``absorb`` (TRAIL's matrix), else it leaves (rows then sum to less than 1)."""
    e = np.asarray(edges, dtype=np.float64)
    lo, hi = e[:-1], e[1:]  # (B,)
    w = hi - lo
    a, b = lo - delta, hi - delta  # (B,) each source bin's interval after the shift
    overlap = np.clip(np.minimum(b[:, None], hi[None, :]) - np.maximum(a[:, None], lo[None, :]), 0.0, None)
    m = overlap / w[:, None]
    if absorb:
        m[:, 0] += np.clip(np.minimum(b, lo[0]) - a, 0.0, None) / w  # the part below edges[0]
    return m


def refine_sequence(lik: np.ndarray, t: np.ndarray, edges: np.ndarray, absorb: bool = True,
                    cache: dict[float, np.ndarray] | None = None) -> np.ndarray:
    """Posteriors (m, B) at one sample's positions ``t`` (m,), increasing, from the classifier's
    outputs ``lik`` (m, B): post_0 = lik_0; post_i = lik_i * (post_{i-1} @ M(t_i - t_{i-1})), normalised."""
    cache = {} if cache is None else cache
    out = np.empty_like(lik, dtype=np.float64)
    prev = None
    for i in range(lik.shape[0]):
        cur = np.asarray(lik[i], dtype=np.float64)
        if prev is not None:
            d = float(t[i] - t[i - 1])
            if d not in cache:
                cache[d] = transition_matrix(edges, d, absorb)
            post = cur * (prev @ cache[d])
            s = post.sum()
            cur = post / s if s > 1e-300 else cur  # the two disagree completely: trust the new evidence
        s = cur.sum()
        out[i] = prev = cur / s if s > 0 else np.full_like(cur, 1.0 / cur.size)
    return out


def refine_trajectories(probs: np.ndarray, index: pd.DataFrame, edges: np.ndarray, absorb: bool = True) -> np.ndarray:
    """:func:`refine_sequence` over every sample of a trajectory index (rows in any order)."""
    t = index["t"].to_numpy(dtype=np.float64)
    out = np.empty_like(probs, dtype=np.float64)
    cache: dict[float, np.ndarray] = {}
    for rows in sample_rows(index):
        out[rows] = refine_sequence(probs[rows], t[rows], edges, absorb, cache)
    return out


# ---------------------------------------------------------------- carrying a prefill distribution
def two_piece_carry(q10: np.ndarray, q50: np.ndarray, q90: np.ndarray, t: np.ndarray, cap: float | None,
                    probs: Sequence[float] = PROBS) -> list[np.ndarray]:
    """Quantiles ``probs`` of L - t given L > t, for L the quantile-matched two-piece normal through
    (q10, q50, q90), clipped to [0, cap] (see the module docstring). All arrays (n,); returns one (n,)
    array per probability, each in [0, cap - t]."""
    m = np.asarray(q50, dtype=np.float64)
    s1 = np.maximum((m - np.asarray(q10, dtype=np.float64)) / Z90, MIN_SCALE)
    s2 = np.maximum((np.asarray(q90, dtype=np.float64) - m) / Z90, MIN_SCALE)
    t = np.asarray(t, dtype=np.float64)
    hi = np.inf if cap is None else float(cap)
    below = t < m
    start = t <= 0  # at t = 0 nothing is known yet (an empty response is possible): no conditioning
    # survival S(t) = P(L > t): below the median from the lower piece, above it from the upper one (in logs)
    log_s = np.where(start, 0.0, special.log_ndtr(-(t - m) / np.where(below, s1, s2)))  # 1 - Phi(z) = Phi(-z)
    f_t = np.where(start, 0.0, np.where(below, special.ndtr((t - m) / s1), 0.5))  # only used below the median
    out = []
    for p in probs:
        # u = F(t) + p S(t); below 0.5 invert the lower piece, else the upper piece through log(1 - u)
        u = f_t + p * np.exp(log_s)
        lower = below & (u < 0.5)
        log_tail = np.log1p(-p) + log_s  # log(1 - u)
        with np.errstate(over="ignore", invalid="ignore"):
            q_lower = m + s1 * special.ndtri(np.clip(u, 1e-300, 0.5))
            q_upper = m - s2 * special.ndtri_exp(np.minimum(log_tail, np.log(0.5)))
        q = np.where(lower, q_lower, q_upper)
        q = np.where(np.isfinite(q), q, hi)
        out.append(np.clip(np.minimum(q, hi) - t, 0.0, None))
    return out


def carry_prefill(preds: Any, index: pd.DataFrame, cap: float | None, what: str = "predictions") -> Remaining:
    """A prefill predictions table (:class:`lenpred.predictions.Predictions`) carried to the rows of a
    trajectory index by survival conditioning. Every row's sample must have a prediction."""
    a = preds.for_samples(index[["prompt_id", "sample_idx"]], what=what)
    pred = a["pred_tokens"].to_numpy(dtype=np.float64)
    q = a[["q10", "q50", "q90"]].to_numpy(dtype=np.float64)
    spread = a["spread"].to_numpy(dtype=np.float64)
    has_q = np.isfinite(q).all(axis=1)
    has_s = np.isfinite(spread) & ~has_q
    point = ~has_q & ~has_s
    q10 = np.where(has_q, q[:, 0], np.where(has_s, pred - Z90 * np.nan_to_num(spread), pred))
    q50 = np.where(has_q, q[:, 1], pred)
    q90 = np.where(has_q, q[:, 2], np.where(has_s, pred + Z90 * np.nan_to_num(spread), pred))
    t = index["t"].to_numpy(dtype=np.float64)
    r10, r50, r90 = two_piece_carry(q10, q50, q90, t, cap)
    kinds = [k for k, m in (("quantiles", has_q), ("spread", has_s), ("point only", point)) if m.any()]
    note = "carried by survival conditioning from the table's " + " / ".join(kinds)
    if point.any():
        note += f" ({int(point.sum())} row(s) with a point only: a 1-token spread, i.e. about max(pred - t, 0))"
    return Remaining(r10, r50, r90, note, extra={"made_by": preds.made_by})


# ---------------------------------------------------------------- the carried oracle and constant
def _quantiles_of_sets(vals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Row-wise 10/50/90% quantiles of NaN-padded (r, K) sets, and which rows are empty."""
    empty = ~np.isfinite(vals).any(axis=1)
    safe = vals.copy()
    safe[empty] = 0.0  # placeholders (replaced by the fallback): keeps nanquantile quiet
    q10, q90 = (np.nanquantile(safe, p, axis=1) for p in (PROBS[0], PROBS[2]))
    return q10, np.nanmedian(safe, axis=1), q90, empty


def carried_oracle(index: pd.DataFrame, lengths: pd.DataFrame, fallback: Remaining | None = None) -> Remaining:
    """The carried prefill oracle at every row of ``index`` (see the module docstring).

    ``lengths``: one row per sample of the prompts in ``index`` (``prompt_id``, ``sample_idx``,
    ``n_tokens`` as served). ``fallback``: the values for rows whose prompt has no other sample longer
    than t (the carried constant; without it such rows get 1 token)."""
    n = len(index)
    out = np.full((3, n), np.nan)
    empty = np.zeros(n, dtype=bool)
    pid = index["prompt_id"].astype(str).to_numpy()
    sid = index["sample_idx"].to_numpy(dtype=np.int64)
    t = index["t"].to_numpy(dtype=np.float64)
    ln = lengths.assign(prompt_id=lengths["prompt_id"].astype(str))
    groups = {p: g for p, g in ln.groupby("prompt_id", sort=False)}
    codes, uniq = pd.factorize(pid)
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    for rows in np.split(order, bounds):
        if rows.size == 0:
            continue
        p = uniq[codes[rows[0]]]
        g = groups.get(p)
        if g is None:
            raise DataError(f"the run has no samples of prompt {p!r}, which the trajectory holds",
                            "use the trajectory features of this run")
        lj = g["n_tokens"].to_numpy(dtype=np.float64)  # (K,)
        sj = g["sample_idx"].to_numpy(dtype=np.int64)
        tr = t[rows][:, None]
        # (r, K): the other samples still running at t (at t = 0: all of them, an empty response included)
        keep = ((lj[None, :] > tr) | (tr <= 0)) & (sj[None, :] != sid[rows][:, None])
        vals = np.where(keep, lj[None, :] - tr, np.nan)
        q10, q50, q90, e = _quantiles_of_sets(vals)
        out[:, rows] = np.vstack([q10, q50, q90])
        empty[rows] = e
    if empty.any():
        if fallback is not None:
            for i, v in enumerate((fallback.q10, fallback.q50, fallback.q90)):
                out[i, empty] = v[empty]
        else:
            out[:, empty] = 1.0
    note = ("median of {L_j - t : L_j > t} over the prompt's other samples; rows where none survives take "
            + ("the carried constant" if fallback is not None else "1 token"))
    return Remaining(out[0], out[1], out[2], note, int(empty.sum()))


class CarriedConstant:
    """The training lengths (each prompt weighted once), conditioned on survival to t."""

    def __init__(self, lengths: np.ndarray, weights: np.ndarray | None = None) -> None:
        v = np.asarray(lengths, dtype=np.float64)
        w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=np.float64)
        if v.size == 0:
            raise DataError("the carried constant needs training lengths", "train on a split with training prompts")
        order = np.argsort(v, kind="stable")
        self.values, self.weights = v[order], w[order]
        self._cache: dict[float, tuple[float, float, float]] = {}

    @classmethod
    def from_samples(cls, samples: pd.DataFrame) -> CarriedConstant:
        """From sample rows (``prompt_id``, ``n_tokens``): weights 1 / K_i."""
        k = samples.groupby("prompt_id")["n_tokens"].transform("size").to_numpy(dtype=np.float64)
        return cls(samples["n_tokens"].to_numpy(dtype=np.float64), 1.0 / k)

    def at(self, t: float) -> tuple[float, float, float]:
        t = float(t)
        if t not in self._cache:
            i = 0 if t <= 0 else int(np.searchsorted(self.values, t, side="right"))  # first value > t
            if i >= self.values.size:
                self._cache[t] = (1.0, 1.0, 1.0)
            else:
                q = weighted_quantile(self.values[i:] - t, self.weights[i:], np.array(PROBS))
                self._cache[t] = (float(q[0]), float(q[1]), float(q[2]))
        return self._cache[t]

    def predict(self, t: np.ndarray) -> Remaining:
        t = np.asarray(t, dtype=np.float64)
        uniq, inv = np.unique(t, return_inverse=True)
        table = np.array([self.at(x) for x in uniq]).reshape(-1, 3)  # (U, 3)
        q = table[inv]
        return Remaining(q[:, 0], q[:, 1], q[:, 2], "training lengths (prompts weighted once) conditioned on L > t")

    def to_json(self) -> Mapping[str, Any]:
        return {"n_values": int(self.values.size)}
