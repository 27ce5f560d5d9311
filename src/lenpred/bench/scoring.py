"""Scoring length predictions against sampled lengths (MAE, pinball, short labels), prompts as the unit.

Every average here is an average over prompts of a per-prompt mean over that prompt's samples, the
way the oracle bound is (:mod:`lenpred.stats.oracle`): a prompt with 24 samples weighs as much as one
with 8, so "MAE / bound" compares like with like. Intervals resample prompts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import kendalltau

from lenpred.stats.bootstrap import Bootstrap, mean_ci

__all__ = ["Bootstrap", "per_prompt_mean", "pinball", "PointMetrics", "Quantiles", "point_metrics",
           "short_label_metrics"]

Quantiles = tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]  # q10, q50, q90 per sample (or None)


def per_prompt_mean(values: np.ndarray, prompt_ids: np.ndarray) -> np.ndarray:
    """(P,) mean of ``values`` within each prompt, prompts in order of first appearance."""
    codes, _ = pd.factorize(np.asarray(prompt_ids))
    sums = np.bincount(codes, weights=np.asarray(values, dtype=float))
    counts = np.bincount(codes)
    return sums / counts


def pinball(y: np.ndarray, q: np.ndarray, tau: float) -> np.ndarray:
    """Per-sample pinball (quantile) loss of quantile ``tau`` predictions ``q`` for outcomes ``y``."""
    d = np.asarray(y, float) - np.asarray(q, float)
    return np.maximum(tau * d, (tau - 1.0) * d)


@dataclass(frozen=True)
class PointMetrics:
    """Metrics of one predictor on one set of samples (averages over prompts)."""

    n_prompts: int
    n_samples: int
    mae: float
    mae_ci: tuple[float, float]
    relative_mae: float  # MAE / mean length (ratio of prompt averages)
    rmse: float
    kendall_tau: float  # between predicted and true, over samples
    r2: float  # 1 - SSE / SST over samples
    coverage80: float | None  # share of samples inside [q10, q90]
    pinball: float | None  # mean pinball loss over q10, q50, q90 (tokens)


def point_metrics(
    y: np.ndarray,
    pred: np.ndarray,
    prompt_ids: np.ndarray,
    quantiles: Quantiles = (None, None, None),
    boot: Bootstrap | None = None,
) -> PointMetrics:
    """``y``, ``pred`` (n,) per sample; ``quantiles`` q10, q50, q90 (n,) each or None; ``boot``: the MAE's
    interval (default ``Bootstrap()``)."""
    q10, q50, q90 = quantiles
    boot = boot or Bootstrap()
    y = np.asarray(y, float)
    pred = np.asarray(pred, float)
    err = np.abs(y - pred)
    mae_p = per_prompt_mean(err, prompt_ids)
    len_p = per_prompt_mean(y, prompt_ids)
    mse_p = per_prompt_mean((y - pred) ** 2, prompt_ids)
    rng = np.random.default_rng(boot.seed)
    tau = float(kendalltau(pred, y).statistic) if len(y) > 1 and np.ptp(pred) > 0 else float("nan")
    sst = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(((y - pred) ** 2).sum()) / sst if sst > 0 else float("nan")
    cov = pin = None
    if q10 is not None and q90 is not None and np.isfinite(q10).all() and np.isfinite(q90).all():
        inside = ((y >= np.asarray(q10)) & (y <= np.asarray(q90))).astype(float)
        cov = float(per_prompt_mean(inside, prompt_ids).mean())
        if q50 is not None and np.isfinite(q50).all():
            loss = (pinball(y, q10, 0.1) + pinball(y, q50, 0.5) + pinball(y, q90, 0.9)) / 3.0
            pin = float(per_prompt_mean(loss, prompt_ids).mean())
    return PointMetrics(
        n_prompts=int(mae_p.size),
        n_samples=int(y.size),
        mae=float(mae_p.mean()),
        mae_ci=mean_ci(mae_p, boot.n_boot, boot.ci, rng) if mae_p.size > 1 else (float("nan"), float("nan")),
        relative_mae=float(mae_p.sum() / len_p.sum()),
        rmse=float(np.sqrt(mse_p.mean())),
        kendall_tau=tau,
        r2=r2,
        coverage80=cov,
        pinball=pin,
    )


def short_label_metrics(remaining: np.ndarray, predicted: np.ndarray, t: np.ndarray, threshold: float
                        ) -> tuple[float | None, float | None]:
    """Precision and recall of the label "short" on rows at positions ``t``: a row is truly short when
    t + remaining < ``threshold`` and labelled short when t + predicted < ``threshold`` (None: no row
    labelled, or none truly, short)."""
    true_s, pred_s = t + remaining < threshold, t + predicted < threshold
    both = float((true_s & pred_s).sum())
    prec = both / float(pred_s.sum()) if pred_s.any() else None
    rec = both / float(true_s.sum()) if true_s.any() else None
    return prec, rec
