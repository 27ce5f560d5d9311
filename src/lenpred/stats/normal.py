"""The normal law: are per-prompt lengths close to normal, as a ramping hazard predicts?

For a normal law E|L - median| = sqrt(2/pi) * sigma, so the per-prompt oracle MAE_i can be compared
with sqrt(2/pi) * sd_i. With K = 8 samples both sides are noisy, and even exactly normal lengths
would agree "within 5%" on only a minority of prompts. Every check is therefore reported next to
what it gives on *exactly normal* samples with the same K distribution and the same estimators
(simulated here), which is the only fair yardstick; the aggregate ratio sum(MAE_i) / sum(normal-law
MAE_i), whose noise averages out over prompts, is the sharpest single figure (1 for normal lengths;
ln 2 / sqrt(2/pi) = 0.87 for geometric ones).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from lenpred.stats.bootstrap import ratio_ci
from lenpred.stats.oracle import mae_estimates
from lenpred.stats.perprompt import describe
from lenpred.stats.results import NormalLaw, NormalLawUnavailable, NormalMetrics

NORMAL_MAE_FACTOR = float(np.sqrt(2.0 / np.pi))
NORMAL_CENTRAL_MASS = 0.6826894921370859  # P(|Z| <= 1)
MIN_K = 3  # samples a prompt needs for the normal-law checks


def add_normal_columns(pp: pd.DataFrame) -> pd.DataFrame:
    """Per-prompt normal-law MAE and the ratio of the empirical MAE to it."""
    pp = pp.copy()
    pp["mae_normal"] = NORMAL_MAE_FACTOR * pp["sd_unbiased"]
    with np.errstate(divide="ignore", invalid="ignore"):
        pp["mae_ratio"] = np.where(pp["mae_normal"] > 0, pp["mae_oracle"] / pp["mae_normal"], np.nan)
    return pp


def _nan_stat(fn: Any, x: Any) -> float:
    """``fn`` over the finite values of ``x``; NaN when there are none (shape needs K >= 3 or 4)."""
    v = np.asarray(x, dtype=float)
    v = v[np.isfinite(v)]
    return float(fn(v)) if v.size else float("nan")


def _metrics(pp: pd.DataFrame) -> NormalMetrics:
    ratio = pp["mae_ratio"].to_numpy(float)
    ok = np.isfinite(ratio)
    dev = np.abs(ratio[ok] - 1.0)
    den = float(pp["mae_normal"][ok].sum())
    return NormalMetrics(
        n_prompts=int(ok.sum()),
        mae_ratio_aggregate=float(pp["mae_oracle"][ok].sum()) / den if den > 0 else float("nan"),
        mae_ratio_median=_nan_stat(np.median, ratio),
        share_within_5pct=_nan_stat(np.mean, dev <= 0.05),
        share_within_10pct=_nan_stat(np.mean, dev <= 0.10),
        skew_mean=_nan_stat(np.mean, pp["skew"]),
        skew_median=_nan_stat(np.median, pp["skew"]),
        excess_kurtosis_mean=_nan_stat(np.mean, pp["excess_kurtosis"]),
        excess_kurtosis_median=_nan_stat(np.median, pp["excess_kurtosis"]),
        central_mass=_nan_stat(np.mean, pp["central_mass"]),
        shapiro_reject_share=_nan_stat(np.mean, pp["shapiro_reject"]),
        n_prompts_shape=int(np.isfinite(pp["shapiro_reject"].to_numpy(float)).sum()),
    )


def normal_reference(k_counts: dict[int, int], n_prompts: int, rng: np.random.Generator) -> NormalMetrics:
    """The same metrics on simulated exactly-normal prompts with the run's mix of sample counts K."""
    total = sum(k_counts.values())
    frames = []
    for k, count in sorted(k_counts.items()):
        # at least a few hundred prompts per K so that rare K values still give stable figures
        p = max(200, round(n_prompts * count / total))
        x = rng.standard_normal((1, p, k))
        cols = {"k": np.full(p, k)}
        cols.update(describe(x))
        cols.update(mae_estimates(x))
        frames.append(pd.DataFrame(cols))
    return _metrics(add_normal_columns(pd.concat(frames, ignore_index=True)))


def normal_law(
    pp: pd.DataFrame, n_reference: int, n_boot: int, ci: float, rng: np.random.Generator
) -> NormalLaw | NormalLawUnavailable:
    """Normal-law checks on per-prompt statistics (with ``mae_ratio``) against an exact-normal yardstick.

    Prompts with fewer than 3 samples are left out: with K = 2 the MAE-to-sd ratio is 1 by construction
    (|L1 - L2| / sqrt(2) both ways), so they would only pull the figures towards the normal law.
    """
    n_small = int((pp["k"] < MIN_K).sum())
    pp = pp[pp["k"] >= MIN_K]
    if pp.empty:
        return NormalLawUnavailable(reason=f"no prompt has {MIN_K} or more samples", prompts_left_out=n_small)
    ok = np.isfinite(pp["mae_ratio"].to_numpy(float))
    obs = _metrics(pp).with_ci(
        ratio_ci(pp["mae_oracle"].to_numpy(float)[ok], pp["mae_normal"].to_numpy(float)[ok], n_boot, ci, rng)
    )
    k_counts = {int(k): int(n) for k, n in pp["k"].value_counts().items()}
    ref = normal_reference(k_counts, n_reference, rng)
    # Imputed tails are normal by construction and pull every check towards normality; the same
    # checks on the prompts that needed no imputation show how much that matters (they are biased the
    # other way: prompts with long tails are the ones that hit the cap).
    clean = pp[pp["n_truncated"] == 0]
    uncensored = _metrics(clean) if pp["n_truncated"].any() and len(clean) >= 10 else None
    return NormalLaw(
        prompts_left_out=n_small,
        observed=obs,
        observed_uncensored_prompts=uncensored,
        if_normal=ref,
        central_mass_limit=NORMAL_CENTRAL_MASS,
        note="if_normal: the same estimators on simulated exactly-normal prompts with the run's K",
    )
