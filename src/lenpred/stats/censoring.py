"""Right-censoring at ``max_new_tokens``: a per-prompt normal fit and multiple imputation of the tail.

A sample that stopped at the cap C did not end: its length L is only known to exceed C. Every
censored sample of a run is censored at the same C, and that makes the problem easy below the cap:
the Kaplan-Meier estimator with one common censoring time reduces to the empirical distribution
function for t < C, so the per-prompt median (and every quantile below C) is known without any model
as long as fewer than half the samples are censored. That is why the censoring-aware variant keeps
exactly the prompts with a censored share below one half.

What the samples cannot tell is how far beyond C the censored ones would have gone, and the MAE,
the sd and the normal-law checks all depend on that. We fill it in with the model the theory
proposes and the normal-law check tests: a normal distribution per prompt, fitted by maximum
likelihood with right-censoring (a Tobit fit: density for the observed lengths, survival beyond C for
the censored ones). Each censored sample is then drawn from that normal truncated to (C, inf), M times
(multiple imputation), and every estimator is averaged over the M completed samples. Observed
lengths are never changed, so a prompt without censoring is analysed exactly as it was collected.
A sample cut before the cap (an engine's context limit, say) is handled the same way, censored at
its own length.
"""

from __future__ import annotations

import numpy as np
from scipy import optimize, special, stats

from lenpred.stats.results import TailCheck

# A sd below half a token is not resolvable with integer lengths; it also keeps log(sigma) finite.
MIN_SIGMA = 0.5
_HALF_LOG_2PI = 0.5 * float(np.log(2 * np.pi))
_LOG_SIGMA_MIN, _LOG_SIGMA_MAX = float(np.log(MIN_SIGMA)), float(np.log(1e7))


def fit_censored_normal(observed: np.ndarray, censored_at: np.ndarray) -> tuple[float, float]:
    """Maximum-likelihood (mu, sigma) of a normal from ``observed`` lengths and lengths censored at
    ``censored_at`` (known only to exceed those values; normally all equal to max_new_tokens).

    ``observed`` must hold at least one value. Without censoring this is the plain MLE (mean, sd with
    ddof=0); the caller applies small-sample corrections where it needs them.
    """
    obs = np.asarray(observed, dtype=float)
    cens = np.asarray(censored_at, dtype=float)
    if obs.size == 0:
        raise ValueError("a censored normal fit needs at least one observed length")
    mu0 = float(obs.mean())
    sd0 = max(float(obs.std()), MIN_SIGMA)
    if cens.size == 0:
        return mu0, sd0
    cap = float(cens.max())

    def nll(theta: np.ndarray) -> float:
        mu, log_sigma = theta
        log_sigma = float(np.clip(log_sigma, _LOG_SIGMA_MIN, _LOG_SIGMA_MAX))  # the simplex can wander far
        sigma = np.exp(log_sigma)
        z_obs, z_cens = (obs - mu) / sigma, (cens - mu) / sigma
        # normal log-density and log-survival written out: scipy.stats' wrappers cost 10x more per call
        ll = (
            -0.5 * float(z_obs @ z_obs)
            - obs.size * (log_sigma + _HALF_LOG_2PI)
            + float(special.log_ndtr(-z_cens).sum())
        )
        return -ll

    # Start above the observed mean: censored samples pull the mean up. Nelder-Mead is robust to the
    # flat likelihood that a prompt with few observed samples can have.
    start = np.array([max(mu0, float(cens.mean()) - sd0), np.log(sd0 * 1.5)])
    res = optimize.minimize(nll, start, method="Nelder-Mead", options={"xatol": 1e-3, "fatol": 1e-6})
    mu, log_sigma = res.x
    sigma = float(np.exp(log_sigma))
    # A degenerate fit (sigma exploding because only the cap is informative) would impute absurd
    # tails; bound sigma by a generous multiple of the spread of what was observed plus the gap to C.
    sigma = float(np.clip(sigma, MIN_SIGMA, 4.0 * (sd0 + abs(cap - mu0)) + MIN_SIGMA))
    return float(mu), sigma


def impute_censored(
    lengths: np.ndarray, censored: np.ndarray, n_imputations: int, rng: np.random.Generator
) -> np.ndarray:
    """(M, K) completed copies of one prompt's K lengths; censored entries drawn from the fitted tail.

    ``lengths`` (K,) holds the observed lengths; a censored one is where the sample was cut (the cap),
    and its imputed values lie above it. ``censored`` (K,) bool.
    """
    x = np.asarray(lengths, dtype=float)
    c = np.asarray(censored, dtype=bool)
    out = np.broadcast_to(x, (n_imputations, x.size)).copy()  # (M, K)
    n_c = int(c.sum())
    if n_c == 0:
        return out
    at = x[c]  # (C,) where each censored sample was cut
    mu, sigma = fit_censored_normal(x[~c], at)
    a = (at - mu) / sigma
    draws = stats.truncnorm.rvs(a, np.inf, loc=mu, scale=sigma, size=(n_imputations, n_c), random_state=rng)
    # truncnorm can return values a hair below the bound when a is far in the tail; keep L > cut.
    out[:, c] = np.maximum(draws, at)
    return out


def fit_truncated_normal(x: np.ndarray, upper: float) -> tuple[float, float]:
    """MLE (mu, sigma) of a normal observed only below ``upper`` (the EOS samples of a capped prompt)."""
    v = np.asarray(x, dtype=float)
    mu0, sd0 = float(v.mean()), max(float(v.std()), MIN_SIGMA)

    def nll(theta: np.ndarray) -> float:
        mu, log_sigma = theta
        log_sigma = float(np.clip(log_sigma, _LOG_SIGMA_MIN, _LOG_SIGMA_MAX))  # the simplex can wander far
        z = (v - mu) / np.exp(log_sigma)
        ll = -0.5 * float(z @ z) - v.size * (
            log_sigma + _HALF_LOG_2PI + float(special.log_ndtr((upper - mu) / np.exp(log_sigma)))
        )
        return -ll

    res = optimize.minimize(
        nll, np.array([mu0, np.log(sd0)]), method="Nelder-Mead", options={"xatol": 1e-3, "fatol": 1e-6}
    )
    mu, log_sigma = res.x
    # the likelihood is flat towards huge sigma when the samples crowd the bound; keep the fit sane
    return float(mu), float(np.clip(np.exp(log_sigma), MIN_SIGMA, 10.0 * sd0 + MIN_SIGMA))


MIN_EOS_TAIL = 3  # EOS samples a prompt needs for its tail to be fitted


def tail_check(
    per_prompt: list[tuple[np.ndarray, np.ndarray]], cap: float, min_eos: int = MIN_EOS_TAIL
) -> TailCheck:
    """Are the truncations the upper tail of each prompt's (normal) length law, as the imputation assumes?

    For every prompt with ``min_eos`` or more EOS samples, a normal is fitted to the EOS lengths alone,
    allowing for the cut at ``cap`` (a truncated-normal fit), and the number of samples it expects
    beyond the cap is added up. If lengths are normal per prompt, the observed number of truncations
    is close to that (Poisson); if a separate mode runs into the cap (repetition loops, say), many
    more are truncated than any tail explains and the imputed tails are a guess.
    ``per_prompt``: (lengths, censored) arrays for each prompt. The counts are over the prompts the
    check could fit (``n_prompts``; 0 when none has ``min_eos`` varied EOS samples: then it tells nothing).
    """
    observed, expected, used = 0, 0.0, 0
    for x, c in per_prompt:
        eos = x[~c]
        if eos.size < min_eos or np.ptp(eos) == 0:
            continue
        mu, sigma = fit_truncated_normal(eos, cap)
        expected += x.size * float(stats.norm.sf(cap, mu, sigma))
        observed += int(c.sum())
        used += 1
    p = float(stats.poisson.sf(observed - 1, expected)) if expected > 0 else (0.0 if observed else 1.0)
    return TailCheck(
        n_prompts=used,
        observed_truncated=observed,
        expected_truncated=expected,
        ratio=observed / expected if expected > 0 else (float("inf") if observed else float("nan")),
        p_value=p,
        # a factor 3 and p < 0.001: far more truncations than a normal tail can explain
        consistent=bool(not (observed > 3 * expected and p < 1e-3)),
    )
