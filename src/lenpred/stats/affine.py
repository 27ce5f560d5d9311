"""The affine variance law sd = alpha * mu + b across prompts: OLS and Theil-Sen fits with intervals.

Both axes are per-prompt estimates from K samples, which biases a naive fit in two known ways:

* the sample sd s_i is biased low (E[s] = c4(K) * sigma, c4(8) = 0.965), which scales both alpha and
  b down by ~3.5% at K = 8. We use s_i / c4(K_i), unbiased under normality.
* the sample mean carries noise of variance sigma_i^2 / K_i. Noise in the regressor attenuates the
  slope by the reliability ratio lambda = 1 - mean(sigma_i^2 / K_i) / var(mu_hat) (errors in
  variables); at K = 8 this is 5-15% for lengths like those of an instruction model. For skewed
  lengths the noise of mean_i and sd_i is also correlated (cov = mu3 / (2 sigma K)), which pushes
  the slope the other way. The fit is slope = (cov(mu, sd) - mean noise cov) / (var(mu) - mean noise
  var), the method-of-moments errors-in-variables estimator, with the intercept refitted; Theil-Sen
  gets the same first-order correction. Without it alpha came out ~10% low on synthetic runs.

R^2 is reported raw and "denoised": the share of the variance of the *true* sd_i that the line
explains, after removing the sampling variance of s_i (sigma_i^2 (1/c4^2 - 1) under normality). With
K = 8 the raw R^2 cannot approach 1 even when the law is exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lenpred.stats.bootstrap import percentile_ci, resample_indices
from lenpred.stats.config import BoundConfig
from lenpred.stats.perprompt import c4
from lenpred.stats.results import AffineFit, AffineUnavailable, Line, RobustFit

MIN_RELIABILITY = 0.5
MAX_PAIRS = 200_000


@dataclass(frozen=True)
class _Noise:
    """Sampling-noise moments of (mean_i, sd_i) that a fit of sd on mean has to remove."""

    var_mean: float  # mean_i Var(mean_i) = mean_i sigma_i^2 / K_i
    cov_mean_sd: float  # mean_i Cov(mean_i, sd_i) ~ mean_i skew_i sigma_i^2 / (2 K_i)

    @classmethod
    def of(cls, s: np.ndarray, k: np.ndarray, skew: np.ndarray) -> _Noise:
        # s^2 (ddof=1) is unbiased for sigma^2; cov(mean, s) = mu3 / (2 sigma K) to first order (delta
        # method), zero for symmetric laws and positive for right-skewed ones, where it offsets part
        # of the attenuation. The estimate of sd is s / c4, hence the last factor.
        g = np.nan_to_num(skew, nan=0.0)
        return cls(float(np.mean(s**2 / k)), float(np.mean(g * s**2 / (2 * k) / c4(k))))


def _denominator(mu: np.ndarray, noise: _Noise) -> tuple[float, float]:
    """var(mu_hat) - noise, floored; and the reliability ratio it implies."""
    var_mu = float(np.var(mu, ddof=1))
    lam = 1.0 - noise.var_mean / var_mu if var_mu > 0 else float("nan")
    # Below 0.5 the correction would more than double the slope and amplify noise more than it removes
    # bias (prompts differ little in mean length compared with their spread / sqrt(K)); it is flagged.
    lam = max(lam, MIN_RELIABILITY)
    return lam * var_mu, lam


def _ols(mu: np.ndarray, sd: np.ndarray, noise: _Noise | None) -> tuple[float, float]:
    cov = float(np.cov(mu, sd, ddof=1)[0, 1])
    if noise is None:
        slope = cov / float(np.var(mu, ddof=1))
    else:
        slope = (cov - noise.cov_mean_sd) / _denominator(mu, noise)[0]
    return slope, float(sd.mean() - slope * mu.mean())


def theil_sen_slope(x: np.ndarray, y: np.ndarray, max_pairs: int = MAX_PAIRS, seed: int = 0) -> float:
    """Median of pairwise slopes; over a random subset of pairs when there are more than ``max_pairs``.

    All n(n-1)/2 pairs cost O(n^2) memory (10,000 prompts: 50M slopes); a random subset of pairs
    gives the same estimator up to noise far below its sampling error (randomised Theil-Sen).
    """
    n = len(x)
    if n * (n - 1) // 2 <= max_pairs:
        i, j = np.triu_indices(n, 1)
    else:
        rng = np.random.default_rng(seed)
        i, j = rng.integers(0, n, max_pairs), rng.integers(0, n, max_pairs)
    dx, dy = x[j] - x[i], y[j] - y[i]
    ok = dx != 0
    if not ok.any():  # every x equal (a bootstrap resample of a few prompts can draw one prompt only)
        return float("nan")
    return float(np.median(dy[ok] / dx[ok]))


def _theil_sen(mu: np.ndarray, sd: np.ndarray, noise: _Noise) -> tuple[float, float]:
    # the same first-order correction, applied to the robust slope as if it were cov / var
    raw = theil_sen_slope(mu, sd)
    slope = (raw * float(np.var(mu, ddof=1)) - noise.cov_mean_sd) / _denominator(mu, noise)[0]
    return slope, float(np.median(sd - slope * mu))


def fit_affine(
    mu: np.ndarray,
    s: np.ndarray,
    k: np.ndarray,
    skew: np.ndarray | None,
    config: BoundConfig,
    rng: np.random.Generator,
) -> AffineFit | AffineUnavailable:
    """Fit sd = alpha * mu + b over prompts.

    mu: sample means, s: sample sds (ddof=1), k: sample counts, skew: sample skewness (or None) per prompt;
    ``config``: its ``n_boot`` (the OLS fit's intervals), ``n_boot_robust`` (Theil-Sen's) and ``ci``.
    """
    n_boot, n_boot_robust, ci = config.n_boot, config.n_boot_robust, config.ci
    mu = np.asarray(mu, float)
    k = np.asarray(k, float)
    s = np.asarray(s, float)
    g = np.zeros_like(mu) if skew is None else np.asarray(skew, float)
    ok = np.isfinite(mu) & np.isfinite(s)
    mu, s, k, g = mu[ok], s[ok], k[ok], g[ok]
    sd = s / c4(k)
    n = mu.size
    if n < 3 or np.ptp(mu) == 0:
        return AffineUnavailable(n_prompts=int(n), reason="fewer than 3 prompts with distinct means")
    noise = _Noise.of(s, k, g)
    lam = _denominator(mu, noise)[1]
    alpha, b = _ols(mu, sd, noise)
    raw_alpha, raw_b = _ols(mu, sd, None)
    pred = raw_alpha * mu + raw_b
    ss_res = float(((sd - pred) ** 2).sum())
    ss_tot = float(((sd - sd.mean()) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")
    noise_var = float(np.mean(sd**2 * (1.0 / c4(k) ** 2 - 1.0)))  # sampling variance of s_i / c4
    true_var = ss_tot / (n - 1) - noise_var
    r2_denoised = (
        float(np.clip((ss_tot - ss_res) / (n - 1) / true_var, 0, 1)) if true_var > 0 else float("nan")
    )

    def noise_of(i: np.ndarray) -> _Noise:
        return _Noise.of(s[i], k[i], g[i])

    boot = np.array([_ols(mu[i], sd[i], noise_of(i)) for i in resample_indices(n, n_boot, rng)])
    ts_alpha, ts_b = _theil_sen(mu, sd, noise)
    ts_boot = np.array(
        [_theil_sen(mu[i], sd[i], noise_of(i)) for i in resample_indices(n, n_boot_robust, rng)]
    )
    return AffineFit(
        n_prompts=int(n),
        alpha=alpha,
        alpha_ci=percentile_ci(boot[:, 0], ci),
        b=b,
        b_ci=percentile_ci(boot[:, 1], ci),
        r2=float(r2),
        r2_denoised=r2_denoised,
        robust=RobustFit(
            method="Theil-Sen",
            alpha=ts_alpha,
            alpha_ci=percentile_ci(ts_boot[:, 0], ci),
            b=ts_b,
            b_ci=percentile_ci(ts_boot[:, 1], ci),
        ),
        # the naive fit of s on the sample means, for comparison with fits that ignore both biases
        uncorrected_ols=Line(**dict(zip(("alpha", "b"), _ols(mu, s, None), strict=True))),
        reliability=lam,
        reliability_floored=bool(lam <= MIN_RELIABILITY),
        sd_estimator="s / c4(K)",
    )
