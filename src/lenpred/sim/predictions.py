"""Predicted lengths for experiments without a trained predictor (noise models on the truth).

* ``lognormal``: ``true * exp(sigma * Z)``, sigma chosen so that ``E|pred - true| / E[true]``
  equals ``rel_mae`` exactly (``E|e^{sigma Z} - 1| = e^{sigma^2/2} (2 Phi(sigma) - 1)``);
* ``additive``: ``true + N(0, s)``, ``s = mae * sqrt(pi / 2)`` so that ``E|err| = mae``, floored at 1;
* ``oracle`` (the truth), ``constant`` (the mean), ``input`` (a trace's own predictions),
  ``prompt-median`` (run directories: the median of the prompt's other samples).
"""

from __future__ import annotations

import math

import numpy as np

from lenpred.errors import ConfigError, DataError
from lenpred.sim.config import PredictionConfig


def lognormal_sigma(rel_mae: float) -> float:
    """sigma such that E|exp(sigma Z) - 1| = rel_mae (Z standard normal)."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    if rel_mae <= 0:
        return 0.0

    def f(s: float) -> float:
        return math.exp(s * s / 2) * (2 * norm.cdf(s) - 1) - rel_mae

    return float(brentq(f, 1e-9, 20.0))


def _noisy(true: np.ndarray, cfg: PredictionConfig, rng: np.random.Generator, mean_true: float
           ) -> tuple[np.ndarray, np.ndarray]:
    """(pred, spread) for the lognormal / additive models applied to ``true`` (tokens)."""
    if cfg.model == "lognormal":
        sigma = lognormal_sigma(float(cfg.rel_mae or 0.0))
        pred = true * np.exp(sigma * rng.standard_normal(true.shape))
        spread = pred * math.sqrt(math.expm1(sigma * sigma))
        return pred, spread
    mae = cfg.mae if cfg.mae is not None else float(cfg.rel_mae or 0.0) * mean_true
    s = mae * math.sqrt(math.pi / 2)
    pred = np.maximum(true + s * rng.standard_normal(true.shape), 1.0)
    return pred, np.full(true.shape, s)


def predict_lengths(
    output: np.ndarray,
    cfg: PredictionConfig,
    rng: np.random.Generator,
    *,
    given: np.ndarray | None = None,
    given_spread: np.ndarray | None = None,
    prompt_median: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Predicted output tokens (and a spread, or None) for true lengths ``output`` (n,)."""
    true = output.astype(np.float64)
    if cfg.model == "oracle":
        return true.copy(), None
    if cfg.model == "constant":
        return np.full_like(true, true.mean()), np.full_like(true, true.std())
    if cfg.model == "input":
        if given is None or np.isnan(given).any():
            raise DataError("prediction model 'input' needs a predicted_tokens value for every request",
                            "add the column to the trace, or pick a noise model")
        return given.astype(np.float64), given_spread
    if cfg.model == "prompt-median":
        if prompt_median is None:
            raise ConfigError("prediction model 'prompt-median' needs a run-directory workload",
                              "set workload.lengths.source to 'rundir'")
        return prompt_median.astype(np.float64), None
    return _noisy(true, cfg, rng, float(true.mean()))


def make_repredictions(output: np.ndarray, cfg: PredictionConfig, rng: np.random.Generator
                       ) -> list[tuple[tuple[int, float], ...]]:
    """Every ``repredict_every`` generated tokens, a fresh prediction of the remaining length
    (the same noise model applied to the true remaining length)."""
    k = cfg.repredict_every
    out: list[tuple[tuple[int, float], ...]] = []
    if k is None:
        return [()] * len(output)
    mean_true = float(np.mean(output))
    for n in output.tolist():
        gs = np.arange(k, n, k)
        if gs.size == 0:
            out.append(())
            continue
        rem = (n - gs).astype(np.float64)
        if cfg.model in ("lognormal", "additive"):
            pr, _ = _noisy(rem, cfg, rng, mean_true)
        else:
            pr = rem
        out.append(tuple(zip(gs.tolist(), pr.tolist(), strict=True)))
    return out
