"""``constant``: the global median of the training samples for every prompt -- the floor every head must beat.

Its distribution is the training samples' own: q10 / q50 / q90, mean and sd of all training samples
(each prompt weighted equally by default, so the 24-sample prompts do not outweigh the 2-sample ones).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lenpred.predictors.base import Inputs, Predictor, check_param
from lenpred.predictors.dist import Dist, weighted_quantile
from lenpred.predictors.targets import Targets


class ConstantHead(Predictor):
    name = "constant"
    own_spread = True

    def __init__(self, weighting: str = "prompt") -> None:
        self.weighting = weighting  # "prompt" (each prompt counts once) or "sample"

    def _check_params(self) -> None:
        check_param(self.weighting in ("prompt", "sample"), self.name, "weighting", "must be 'prompt' or 'sample'")

    def _fit(self, Z: Inputs, T: Targets, Zv: Inputs | None, Tv: Targets | None) -> None:
        _, y, w = T.flat()
        if self.weighting == "sample":
            w = np.ones_like(w)
        q10, q50, q90 = weighted_quantile(y, w, [0.1, 0.5, 0.9])
        mean = float(np.average(y, weights=w))
        sd = float(np.sqrt(np.average((y - mean) ** 2, weights=w)))
        self.summary_ = np.array([mean, sd, q10, q50, q90])  # (5,)

    def _point(self, Z: Inputs) -> np.ndarray:
        return np.full(Z.n, self.summary_[3])

    def _dist(self, Z: Inputs) -> Dist:
        return Dist(*(np.full(Z.n, v) for v in self.summary_))

    def _get_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        return {"summary": self.summary_}, {}

    def _set_state(self, tensors: dict[str, np.ndarray], info: dict[str, Any]) -> None:
        self.summary_ = tensors["summary"]
