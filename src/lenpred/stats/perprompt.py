"""Per-prompt descriptive statistics of decode lengths.

Functions take an array ``x`` of shape (M, P, K) (M imputations, P prompts, K samples per prompt)
and return (P,) arrays, averaging over the imputations. :func:`describe_variant` assembles them into
one row per prompt for every group of a variant.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy import special, stats

from lenpred.stats.lengths import Variant
from lenpred.stats.oracle import mae_estimates

QUANTILES = (0.1, 0.25, 0.75, 0.9)


def c4(k: int | np.ndarray) -> np.ndarray:
    """E[s] / sigma for a normal sample of size k (s with ddof=1): s / c4 is unbiased for sigma."""
    k = np.asarray(k, dtype=float)
    return np.sqrt(2.0 / (k - 1.0)) * np.exp(special.gammaln(k / 2.0) - special.gammaln((k - 1.0) / 2.0))


def describe(x: np.ndarray) -> dict[str, np.ndarray]:
    """Mean, median, sd, quantiles, shape and within-sample checks for each prompt. x: (M, P, K)."""
    k = x.shape[-1]
    mean = x.mean(-1)  # (M, P)
    sd = x.std(-1, ddof=1)  # (M, P)
    med = np.median(x, -1)
    out: dict[str, np.ndarray] = {
        "mean": mean.mean(0),
        "median": med.mean(0),
        "sd": sd.mean(0),
        # s / c4(K) is unbiased for sigma under normality; the affine law and the normal-law MAE use it
        "sd_unbiased": (sd / c4(k)).mean(0),
        "var": x.var(-1, ddof=1).mean(0),  # unbiased for the per-prompt variance whatever the law
        "mad_median": np.abs(x - med[..., None]).mean(-1).mean(0),
    }
    for q in QUANTILES:
        out[f"q{round(q * 100):02d}"] = np.quantile(x, q, axis=-1).mean(0)
    # bias=False: the adjusted Fisher-Pearson estimators (unbiased under normality). Prompts whose
    # samples are all equal have no shape; they give NaN and are skipped in summaries.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        nan = np.full(x.shape[1], np.nan)
        out["skew"] = np.nanmean(stats.skew(x, axis=-1, bias=False), 0) if k >= 3 else nan
        out["excess_kurtosis"] = np.nanmean(stats.kurtosis(x, axis=-1, bias=False), 0) if k >= 4 else nan
    # share of samples within one (in-sample) sd of the mean: 68.3% for a normal law in the limit
    within = np.abs(x - mean[..., None]) <= sd[..., None]
    out["central_mass"] = within.mean(-1).mean(0)
    out["shapiro_reject"] = _shapiro_reject(x)
    return out


def _shapiro_reject(x: np.ndarray, level: float = 0.05) -> np.ndarray:
    """Share of imputations in which Shapiro-Wilk rejects normality at ``level``, per prompt (P,).

    NaN where the test is undefined (K < 3, or all samples of the prompt equal).
    """
    if x.shape[-1] < 3:
        return np.full(x.shape[1], np.nan)
    constant = np.ptp(x, axis=-1) == 0  # (M, P)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant rows warn; they are masked below
        p = stats.shapiro(x, axis=-1).pvalue  # (M, P)
    rej = np.where(constant, np.nan, (p < level).astype(float))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN prompts stay NaN
        return np.nanmean(rej, 0)


def describe_variant(variant: Variant) -> pd.DataFrame:
    """One row per kept prompt: descriptive statistics and the per-prompt MAE estimates."""
    frames = []
    for g in variant.groups:
        cols: dict[str, np.ndarray] = {"prompt_id": g.prompt_ids, "k": np.full(len(g.prompt_ids), g.k)}
        cols["n_truncated"] = g.n_truncated
        cols["trunc_share"] = g.n_truncated / g.n_total
        cols.update(describe(g.x))
        cols.update(mae_estimates(g.x))
        frames.append(pd.DataFrame(cols))
    return pd.concat(frames, ignore_index=True)
