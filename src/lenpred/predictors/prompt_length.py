"""``prompt-length``: the prompt's length alone -- what any server knows for free, hidden states excepted.

Training prompts are cut into ``n_bins`` quantile bins of prompt length; each bin keeps the quantiles,
mean and sd of its prompts' samples (each prompt weighted equally). A prediction interpolates those
linearly between bin centres (the bins' median prompt lengths) and holds them flat beyond the first
and last centre: a binned median, smoothed, with its own distribution. Interpolating ordered triples
keeps q10 <= q50 <= q90.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lenpred.predictors.base import Inputs, Predictor, check_param
from lenpred.predictors.dist import Dist, weighted_quantile
from lenpred.predictors.targets import Targets


class PromptLengthHead(Predictor):
    name = "prompt-length"
    own_spread = True
    default_blocks = ("side:prompt_tokens",)

    def __init__(self, blocks: tuple[str, ...] | None = None, n_bins: int = 10, log: bool = True) -> None:
        self.blocks = blocks  # one column: the prompt length (default the side feature prompt_tokens)
        self.n_bins = n_bins
        self.log = log  # interpolate in log prompt length (lengths span orders of magnitude)

    def _check_params(self) -> None:
        check_param(isinstance(self.n_bins, int) and self.n_bins >= 1, self.name, "n_bins", "must be an integer >= 1")
        check_param(self.blocks is None or len(self.blocks) == 1, self.name, "blocks", "must name one column")

    def _x(self, Z: Inputs) -> np.ndarray:
        assert Z.x is not None
        x = Z.x[:, 0].astype(np.float64)
        return np.log1p(np.maximum(x, 0)) if self.log else x

    def _fit(self, Z: Inputs, T: Targets, Zv: Inputs | None, Tv: Targets | None) -> None:
        if Z.x is None or Z.x.shape[1] != 1:
            from lenpred.errors import DataError

            raise DataError(f"{self.name} reads one column (the prompt length), got {0 if Z.x is None else Z.x.shape[1]}",
                            "pass the prompt lengths as one column (n, 1)")
        x = self._x(Z)
        edges = np.unique(np.quantile(x, np.linspace(0, 1, self.n_bins + 1)))
        b = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, max(len(edges) - 2, 0))  # (n,) bin of each prompt
        row, y, w = T.flat()
        centres, table = [], []
        for j in np.unique(b):
            keep = b[row] == j
            yy, ww = y[keep], w[keep]
            mean = float(np.average(yy, weights=ww))
            sd = float(np.sqrt(np.average((yy - mean) ** 2, weights=ww)))
            centres.append(float(np.median(x[b == j])))
            table.append([mean, sd, *weighted_quantile(yy, ww, [0.1, 0.5, 0.9])])
        order = np.argsort(centres, kind="stable")
        self.centres_ = np.asarray(centres)[order]  # (J,) bin centres (log prompt length)
        self.table_ = np.asarray(table)[order]  # (J, 5): mean, sd, q10, q50, q90

    def _interp(self, Z: Inputs) -> np.ndarray:
        x = self._x(Z)
        return np.stack([np.interp(x, self.centres_, self.table_[:, c]) for c in range(5)], axis=1)  # (n, 5)

    def _point(self, Z: Inputs) -> np.ndarray:
        return self._interp(Z)[:, 3]

    def _dist(self, Z: Inputs) -> Dist:
        t = self._interp(Z)
        return Dist(t[:, 0], t[:, 1], t[:, 2], t[:, 3], t[:, 4])

    def _get_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        return {"centres": self.centres_, "table": self.table_}, {}

    def _set_state(self, tensors: dict[str, np.ndarray], info: dict[str, Any]) -> None:
        self.centres_, self.table_ = tensors["centres"], tensors["table"]
