"""Synthetic predictors: noise models on the true lengths, for experiments without a trained head.

They are predictors like any other in one respect that matters: they write a
:class:`lenpred.predictions.Predictions` table, so the simulator (and bench) read every prediction
the same way. They differ in one respect that must stay visible: they *see the truth* (the
sampled lengths), so they are yardsticks (how good would a predictor at this error level be for a
scheduler), never estimates of what a real predictor achieves.

Models (registry :data:`SYNTHETIC`, key = ``prediction.model`` in a simulator config):

* ``oracle``: the true length, with a spread of 0 (a point distribution: the truth is known exactly);
* ``lognormal``: ``true * exp(sigma * Z)``, sigma solved so that ``E|pred - true| / E[true]``
  equals ``rel_mae`` exactly (``E|e^{sigma Z} - 1| = e^{sigma^2/2} (2 Phi(sigma) - 1)``); spread
  ``pred * sqrt(e^{sigma^2} - 1)``;
* ``additive``: ``true + N(0, s)`` with ``s = mae * sqrt(pi / 2)`` so that ``E|err| = mae`` (or
  ``rel_mae * mean(true)``), floored at 1 token; spread ``s``;
* ``constant``: the mean true length for everyone (a length-blind baseline); spread the sd;
* ``prompt-median``: the median length of the *other* samples of the same prompt (the per-prompt
  oracle of the bound; needs several samples per prompt, i.e. a run directory), the global
  median where a prompt has one sample.

``repredict_every = k`` adds re-predictions of the remaining length every k generated tokens: the
same noise applied to the true remaining length for ``lognormal`` and ``additive``, the true
remaining length for the others.

Input: a frame with ``prompt_id``, ``sample_idx`` and ``n_tokens`` (the true output length), one
row per sample. Noise is drawn row by row in the frame's order from generators seeded by
``seed`` alone, so the same frame and seed give the same table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from lenpred.errors import ConfigError, DataError
from lenpred.predictions import Predictions
from lenpred.registry import Registry
from lenpred.stats import portable

__all__ = ["SYNTHETIC", "SyntheticPredictor", "lognormal_sigma", "make_synthetic"]


def lognormal_sigma(rel_mae: float) -> float:
    """sigma such that E|exp(sigma Z) - 1| = rel_mae (Z standard normal)."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    if rel_mae <= 0:
        return 0.0

    def f(s: float) -> float:
        return math.exp(s * s / 2) * (2 * norm.cdf(s) - 1) - rel_mae

    return float(brentq(f, 1e-9, 20.0))


class SyntheticPredictor:
    """Base: subclasses define :meth:`predict_lengths` (and :attr:`noisy` for re-predictions).

    The constructor only stores hyperparameters (the estimator contract); there is nothing to fit.
    """

    name: ClassVar[str] = "?"
    noisy: ClassVar[bool] = False  # re-predictions carry the same noise (else: the true remaining)

    def __init__(self, *, rel_mae: float | None = None, mae: float | None = None,
                 repredict_every: int | None = None) -> None:
        self.rel_mae = rel_mae
        self.mae = mae
        self.repredict_every = repredict_every

    def get_params(self) -> dict[str, Any]:
        return {"rel_mae": self.rel_mae, "mae": self.mae, "repredict_every": self.repredict_every}

    # ---- hooks
    def predict_lengths(self, true: np.ndarray, groups: np.ndarray, rng: np.random.Generator
                        ) -> tuple[np.ndarray, np.ndarray | None]:  # pragma: no cover - abstract
        """(pred, spread or None) for true lengths ``true`` (n,) of samples in prompt ``groups``."""
        raise NotImplementedError

    def _noise(self, true: np.ndarray, rng: np.random.Generator, mean_true: float) -> np.ndarray:
        """Re-prediction noise on remaining lengths (noisy models only)."""
        raise NotImplementedError  # pragma: no cover

    # ---- the table
    def repredictions(self, true: np.ndarray, rng: np.random.Generator) -> tuple[list[list[int]], list[list[float]]]:
        """Every ``repredict_every`` generated tokens, a prediction of the remaining length."""
        k = self.repredict_every
        n = len(true)
        if k is None:
            return [[] for _ in range(n)], [[] for _ in range(n)]
        gens: list[list[int]] = []
        rems: list[list[float]] = []
        mean_true = float(np.mean(true))
        for total in true.tolist():
            gs = np.arange(k, total, k)
            if gs.size == 0:
                gens.append([])
                rems.append([])
                continue
            rem = (total - gs).astype(np.float64)
            pr = self._noise(rem, rng, mean_true) if self.noisy else rem
            gens.append(gs.tolist())
            rems.append(pr.tolist())
        return gens, rems

    def predict_table(self, samples: pd.DataFrame, *, seed: int = 0, card: Mapping[str, Any] | None = None,
                      source: str | None = None) -> Predictions:
        """A predictions table for every row of ``samples`` (prompt_id, sample_idx, n_tokens)."""
        missing = [c for c in ("prompt_id", "sample_idx", "n_tokens") if c not in samples.columns]
        if missing:
            raise DataError(f"synthetic predictor {self.name!r}: samples lack column(s) {missing}",
                            "pass samples with prompt_id, sample_idx and n_tokens (a run's samples table)")
        true = samples["n_tokens"].to_numpy(dtype=np.float64)
        if true.size == 0:
            raise DataError(f"synthetic predictor {self.name!r}: no samples to predict", "pass a run with samples")
        pred, spread = self.predict_lengths(true, samples["prompt_id"].to_numpy(), np.random.default_rng([seed, 3]))
        gens, rems = self.repredictions(samples["n_tokens"].to_numpy(dtype=np.int64), np.random.default_rng([seed, 4]))
        frame = pd.DataFrame({
            "prompt_id": samples["prompt_id"].astype(str).to_numpy(),
            "sample_idx": samples["sample_idx"].to_numpy(),
            "pred_tokens": pred,
            "spread": np.full(true.shape, np.nan) if spread is None else spread,
            "repred_gen": gens,
            "repred_remaining": rems,
        })
        config = {"model": self.name, **self.get_params(), "seed": seed}
        extra = {"synthetic": True, **({"source": source} if source else {})}
        return Predictions.from_frame(frame, made_by=f"synthetic:{self.name}", config=config, card=card,
                                      extra=extra)


SYNTHETIC: Registry[type[SyntheticPredictor]] = Registry("prediction model")


@SYNTHETIC.register("oracle")
class Oracle(SyntheticPredictor):
    name = "oracle"

    def predict_lengths(self, true: np.ndarray, groups: np.ndarray, rng: np.random.Generator
                        ) -> tuple[np.ndarray, np.ndarray | None]:
        return true.copy(), np.zeros(true.shape)


@SYNTHETIC.register("constant")
class Constant(SyntheticPredictor):
    name = "constant"

    def predict_lengths(self, true: np.ndarray, groups: np.ndarray, rng: np.random.Generator
                        ) -> tuple[np.ndarray, np.ndarray | None]:
        return np.full_like(true, true.mean()), np.full_like(true, true.std())


@SYNTHETIC.register("lognormal")
class LogNormal(SyntheticPredictor):
    name = "lognormal"
    noisy = True

    def __init__(self, *, rel_mae: float | None = 0.30, mae: float | None = None,
                 repredict_every: int | None = None) -> None:
        super().__init__(rel_mae=rel_mae, mae=mae, repredict_every=repredict_every)

    def _sigma(self) -> float:
        if self.mae is not None:
            raise ConfigError("prediction model 'lognormal' takes rel_mae (multiplicative), not mae",
                              "use model 'additive' for an absolute MAE")
        return lognormal_sigma(float(self.rel_mae or 0.0))

    def predict_lengths(self, true: np.ndarray, groups: np.ndarray, rng: np.random.Generator
                        ) -> tuple[np.ndarray, np.ndarray | None]:
        sigma = self._sigma()
        pred = true * portable.exp(sigma * rng.standard_normal(true.shape))
        return pred, pred * math.sqrt(math.expm1(sigma * sigma))

    def _noise(self, true: np.ndarray, rng: np.random.Generator, mean_true: float) -> np.ndarray:
        return true * portable.exp(self._sigma() * rng.standard_normal(true.shape))


@SYNTHETIC.register("additive")
class Additive(SyntheticPredictor):
    name = "additive"
    noisy = True

    def _scale(self, mean_true: float) -> float:
        if self.mae is None and self.rel_mae is None:
            raise ConfigError("prediction model 'additive' needs rel_mae or mae", "set rel_mae (e.g. 0.3) or mae (tokens)")
        mae = self.mae if self.mae is not None else float(self.rel_mae or 0.0) * mean_true
        return mae * math.sqrt(math.pi / 2)

    def predict_lengths(self, true: np.ndarray, groups: np.ndarray, rng: np.random.Generator
                        ) -> tuple[np.ndarray, np.ndarray | None]:
        s = self._scale(float(true.mean()))
        return self._noise(true, rng, float(true.mean())), np.full(true.shape, s)

    def _noise(self, true: np.ndarray, rng: np.random.Generator, mean_true: float) -> np.ndarray:
        s = self._scale(mean_true)
        return np.maximum(true + s * rng.standard_normal(true.shape), 1.0)


@SYNTHETIC.register("prompt-median")
class PromptMedian(SyntheticPredictor):
    """The per-prompt oracle: the median of the same prompt's other samples."""

    name = "prompt-median"

    def predict_lengths(self, true: np.ndarray, groups: np.ndarray, rng: np.random.Generator
                        ) -> tuple[np.ndarray, np.ndarray | None]:
        from lenpred.data.lengths import loo_median

        sizes = pd.Series(groups).value_counts()
        if int(sizes.max()) < 2:
            raise ConfigError("prediction model 'prompt-median' needs several samples per prompt",
                              "use a run-directory workload (workload.lengths.source 'rundir')")
        return loo_median(true, groups, fill=float(np.median(true))), None


def make_synthetic(model: str, **params: Any) -> SyntheticPredictor:
    """The synthetic predictor registered as ``model`` (UnknownKeyError listing the valid ones)."""
    return SYNTHETIC.get(model)(**params)
