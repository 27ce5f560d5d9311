"""``softlabel``: length bins with soft targets; the point prediction is the predicted distribution's median.

The range [0, cap] is cut into ``n_bins`` equal-width bins (a truncated sample, which generated
exactly ``cap`` tokens, falls in the last one). An MLP outputs a distribution over the bins, trained
with cross-entropy against a soft target per prompt:

* ``target="histogram"`` -- the prompt's own sample histogram (the distributional target), each sample
  spread by a Gaussian kernel of ``smoothing`` bins (0: hard one-hot bins). With 2 samples a prompt's
  histogram is rough; pooled over prompts the network learns the conditional distribution.
* ``target="kernel"`` -- a Gaussian kernel of ``smoothing`` bins around the bin of the prompt's median.

The predictive distribution is the histogram (uniform within bins): its median is the point (or its
mean, with ``point="mean"``), its quantiles the interval -- a spread of its own, no affine law. Given
validation prompts, the interval's quantile *levels* are recalibrated on them (quantile recalibration:
the levels at which the validation samples' PIT values F(y) have their 10th and 90th percentiles), so
that each tail holds 10% of the validation samples even when the network's histograms are too narrow
or too wide; without validation the levels are the nominal 0.1 / 0.9.

:class:`BinnedHead` is shared with ``egtp`` and ``probe``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from lenpred.predictors.base import Inputs, check_param
from lenpred.predictors.dist import Dist, binned, binned_cdf, weighted_quantile
from lenpred.predictors.nn import Standardizer, mlp, module_tensors, one_thread
from lenpred.predictors.targets import Targets
from lenpred.predictors.torch_head import TorchHead

__all__ = ["BinnedHead", "SoftLabelHead", "bin_kernel", "soft_targets"]


def bin_kernel(pos: np.ndarray, n_bins: int, smoothing: float) -> np.ndarray:
    """(..., B) soft labels of continuous bin coordinates ``pos`` (...,) (bin j's centre is j): a Gaussian
    kernel of ``smoothing`` bins, normalised; ``smoothing <= 0``: the one-hot of the nearest bin."""
    j = np.arange(n_bins)  # (B,)
    if smoothing <= 0:
        return (j == np.clip(np.floor(pos + 0.5), 0, n_bins - 1)[..., None]).astype(np.float64)
    k = np.exp(-0.5 * ((j - pos[..., None]) / smoothing) ** 2)
    return k / k.sum(-1, keepdims=True)


def soft_targets(T: Targets, edges: np.ndarray, kind: str, smoothing: float) -> np.ndarray:
    """(n, B) target distributions over the bins ``edges`` (B+1,) (see the module docstring)."""
    n_bins = len(edges) - 1
    w = edges[1] - edges[0]

    def kernel(pos: np.ndarray) -> np.ndarray:  # pos (..., ) continuous bin coordinates -> (..., B)
        return bin_kernel(pos, n_bins, smoothing)

    def position(y: np.ndarray) -> np.ndarray:  # the centre of a value's bin is at integer j
        return np.clip(y / w - 0.5, 0.0, n_bins - 1.0)

    if kind == "kernel":
        return kernel(position(T.median()))
    v = T.values  # (n, K), NaN-padded
    have = ~np.isnan(v)
    k = kernel(position(np.where(have, v, 0.0)))  # (n, K, B)
    k = np.where(have[..., None], k, 0.0)
    return k.sum(1) / have.sum(1, keepdims=True)


class BinnedHead(TorchHead):
    """An MLP classifier over equal-width length bins, trained on soft targets (cross-entropy)."""

    own_spread = True
    NOMINAL_LEVELS = (0.1, 0.9)  # the quantile levels of q10 / q90 before (or without) recalibration on val

    def _check_params(self) -> None:
        n = self.name
        check_param(isinstance(self.n_bins, int) and self.n_bins >= 2, n, "n_bins", "must be an integer >= 2")
        check_param(self.target in ("histogram", "kernel"), n, "target", "must be 'histogram' or 'kernel'")
        check_param(float(self.smoothing) >= 0, n, "smoothing", "must be >= 0 (bins)")
        check_param(self.point in ("median", "mean"), n, "point", "must be 'median' or 'mean'")
        self._check_net()

    def _fit(self, Z: Inputs, T: Targets, Zv: Inputs | None, Tv: Targets | None) -> None:
        assert Z.x is not None
        hi = float(T.cap) if T.cap is not None else float(np.nanmax(T.values)) + 1.0
        self.edges_ = np.linspace(0.0, hi, self.n_bins + 1)  # (B+1,)
        q = torch.from_numpy(soft_targets(T, self.edges_, self.target, float(self.smoothing)).astype(np.float32))  # (n, B)
        self.scaler_ = Standardizer.fit(Z.x)
        xt = self.scaler_(Z.x)
        self.d_in_ = int(Z.x.shape[1])

        def loss_of(idx: torch.Tensor) -> torch.Tensor:
            logp = torch.log_softmax(self.net_(xt[idx]), dim=-1)  # (B, n_bins)
            return -(q[idx] * logp).sum(-1).mean()

        val = None
        if Zv is not None and Tv is not None:
            from lenpred.predictors.mlp import weighted_mae

            xv = self.scaler_(Zv.x)

            def val() -> float:
                return weighted_mae(self._summaries(xv)[1], Tv)

        self.levels_ = self.NOMINAL_LEVELS
        self._train_net(self._new_net, loss_of, T.n, val)
        if Zv is not None and Tv is not None:
            self.levels_ = self._recalibrated_levels(self._probs(self.scaler_(Zv.x)), Tv)

    def _recalibrated_levels(self, probs: np.ndarray, t: Targets) -> tuple[float, float]:
        """The levels whose histogram quantiles leave 10% of ``t``'s samples (weighted by prompt, as the
        affine law's calibration) below q10 and 10% above q90. A truncated sample (exactly ``cap``) has
        F = 1: it counts above every q90 below the cap, as in the bench."""
        row, y, w = t.flat()
        pit = binned_cdf(probs[row], self.edges_, y)
        lo, hi = weighted_quantile(pit, w, np.array([0.1, 0.9]))
        return float(np.clip(lo, 0.005, 0.45)), float(np.clip(hi, 0.55, 0.995))

    def _probs(self, xt: torch.Tensor) -> np.ndarray:
        self.net_.eval()
        with torch.no_grad(), one_thread():
            return torch.softmax(self.net_(xt), dim=-1).numpy().astype(np.float64)  # (n, B)

    def _summaries(self, xt: torch.Tensor) -> tuple[Dist, np.ndarray]:
        d = binned(self._probs(xt), self.edges_, self.levels_)
        return d, (d.q50 if self.point == "median" else d.mean)

    def _point(self, Z: Inputs) -> np.ndarray:
        return self._summaries(self.scaler_(Z.x))[1]

    def _dist(self, Z: Inputs) -> Dist:
        return self._summaries(self.scaler_(Z.x))[0]

    def predict_proba(self, X: Any) -> np.ndarray:
        """(n, n_bins) predicted distribution over the bins ``edges_``."""
        self._check_fitted()
        return self._probs(self.scaler_(self._prepare(X).x))

    def _get_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        t = module_tensors(self.net_) | {"x_mean": self.scaler_.mean, "x_scale": self.scaler_.scale, "edges": self.edges_}
        return t, {"d_in": self.d_in_, "train_log": self.train_log_, "levels": list(self.levels_)}

    def _set_state(self, tensors: dict[str, np.ndarray], info: dict[str, Any]) -> None:
        self.d_in_ = int(info["d_in"])
        self.scaler_ = Standardizer(tensors["x_mean"], tensors["x_scale"])
        self.edges_ = tensors["edges"]
        self.train_log_ = dict(info.get("train_log") or {})
        self.levels_ = tuple(info.get("levels") or self.NOMINAL_LEVELS)  # heads saved before: nominal levels
        self._load_net(self._new_net, tensors)

    def _new_net(self) -> nn.Module:
        return mlp(self.d_in_, self.hidden, self.depth, self.n_bins, float(self.dropout))


@dataclass(eq=False, repr=False)
class SoftLabelHead(BinnedHead):
    name = "softlabel"
    default_blocks = ("@mid.mean", "@high.last")

    blocks: tuple[str, ...] | None = None
    n_bins: int = 32
    target: str = "histogram"
    smoothing: float = 1.0
    point: str = "median"
    hidden: int = 256
    depth: int = 2
    dropout: float = 0.1

