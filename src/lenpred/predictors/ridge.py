"""``ridge``: a linear head on pooled hidden states -- the simple baseline strong engineers try first.

Inputs are standardised with the training prompts' statistics; the target is each training prompt's
median length, in log1p space by default (lengths are right-skewed; least squares in log space
estimates something close to the median, not the mean dragged up by long answers). The ridge penalty
``alpha`` is chosen by scikit-learn's :class:`~sklearn.linear_model.RidgeCV`: exact leave-one-out
cross-validation on the training prompts, every candidate from one decomposition of the design,
scoring the LOO predictions by their MAE in tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lenpred.predictors.base import Inputs, Predictor, check_param
from lenpred.predictors.nn import LogScale, Standardizer
from lenpred.predictors.targets import Targets

DEFAULT_ALPHAS = tuple(float(a) for a in np.logspace(-1, 5, 13))


class RidgeHead(Predictor):
    name = "ridge"
    default_blocks = ("@mid.mean", "@high.last")

    def __init__(self, blocks: tuple[str, ...] | None = None, alphas: tuple[float, ...] | None = None,
                 log_target: bool = True) -> None:
        self.blocks = blocks
        self.alphas = alphas  # candidates for the penalty (default 0.1 .. 1e5, 13 log-spaced values)
        self.log_target = log_target

    def _check_params(self) -> None:
        a = DEFAULT_ALPHAS if self.alphas is None else self.alphas
        check_param(len(a) > 0 and all(float(v) > 0 for v in a), self.name, "alphas", "must be positive numbers")

    def _fit(self, Z: Inputs, T: Targets, Zv: Inputs | None, Tv: Targets | None) -> None:
        assert Z.x is not None
        self.scaler_ = Standardizer.fit(Z.x)
        x = self.scaler_(Z.x).numpy().astype(np.float64)  # (n, d) standardised: columns have mean 0
        med = T.median()
        self.tscale_ = LogScale.fit(med, self.log_target)
        t = self.tscale_.forward(med)  # (n,) mean 0, sd 1
        alphas = np.asarray(DEFAULT_ALPHAS if self.alphas is None else self.alphas, dtype=np.float64)
        inverse = self.tscale_.inverse

        def neg_mae(_identity: Any, loo: np.ndarray, _t: np.ndarray) -> float:  # LOO predictions -> -MAE in tokens
            return -float(np.mean(np.abs(inverse(loo) - med)))

        from sklearn.linear_model import RidgeCV
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1):  # BLAS on busy cores: one thread is faster (see nn.one_thread)
            cv = RidgeCV(alphas=alphas, scoring=neg_mae, store_cv_results=True).fit(x, t)
        self.alpha_ = float(cv.alpha_)
        self.cv_mae_ = np.mean(np.abs(inverse(cv.cv_results_) - med[:, None]), axis=0)  # (A,) LOO MAE in tokens
        # x and t are centred: the intercept is ~0 (float rounding) and not kept
        self.coef_ = np.asarray(cv.coef_, dtype=np.float64)  # (d,)

    def _point(self, Z: Inputs) -> np.ndarray:
        assert Z.x is not None
        x = self.scaler_(Z.x).numpy().astype(np.float64)
        return self.tscale_.inverse(x @ self.coef_)

    def _get_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        return ({"x_mean": self.scaler_.mean, "x_scale": self.scaler_.scale, "coef": self.coef_, "cv_mae": self.cv_mae_},
                {"alpha": self.alpha_, "target": self.tscale_.to_json()})

    def _set_state(self, tensors: dict[str, np.ndarray], info: dict[str, Any]) -> None:
        self.scaler_ = Standardizer(tensors["x_mean"], tensors["x_scale"])
        self.coef_, self.cv_mae_ = tensors["coef"], tensors["cv_mae"]
        self.alpha_ = float(info["alpha"])
        self.tscale_ = LogScale(**info["target"])
