"""``mlp``: an MLP on pooled hidden states, trained with an L1 loss (the MAE-optimal point: a median).

The target is either each training prompt's median length (``target="median"``, one row per prompt)
or its individual samples (``target="samples"``, one row per sample weighted 1/K_i so every prompt
counts once). With an L1 loss both estimate the conditional median; individual samples let a head
see the within-prompt spread, medians denoise the target. Regression is in log1p space, standardised
(monotone, so still a median). Early stopping on the validation prompts' MAE in tokens.

:class:`TorchRegressor` is the shared machinery of the torch regression heads (``mlp``, ``film``,
``moe``, ``proxy``): a subclass only builds its network and says how it maps a batch to outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from lenpred.predictors.base import Inputs, check_param
from lenpred.predictors.nn import LogScale, Standardizer, mlp, module_tensors, one_thread
from lenpred.predictors.targets import Targets
from lenpred.predictors.torch_head import TorchHead

__all__ = ["TorchRegressor", "MLPHead", "weighted_mae"]


def weighted_mae(pred: np.ndarray, T: Targets) -> float:
    """MAE of per-prompt predictions ``pred`` (n,) against every sample, each prompt weighted once."""
    row, y, w = T.flat()
    return float(np.average(np.abs(pred[row] - y), weights=w))


class TorchRegressor(TorchHead):
    """A torch network mapping (x, c) to one output in standardised log-length space, L1 loss."""

    def _check_common(self) -> None:
        n = self.name
        check_param(self.target in ("median", "samples"), n, "target", "must be 'median' or 'samples'")
        self._check_net()

    def _check_params(self) -> None:
        self._check_common()

    # -- subclass hooks
    def _build(self, d_x: int, d_c: int) -> nn.Module:
        raise NotImplementedError

    def _forward(self, xb: torch.Tensor, cb: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B,) outputs and an auxiliary loss term (or None)."""
        raise NotImplementedError

    # -- training
    def _tensors(self, Z: Inputs) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert Z.x is not None
        return self.scaler_(Z.x), (self.cscaler_(Z.c) if Z.c is not None and self.cscaler_ is not None else None)

    def _fit(self, Z: Inputs, T: Targets, Zv: Inputs | None, Tv: Targets | None) -> None:
        assert Z.x is not None
        self.scaler_ = Standardizer.fit(Z.x)
        self.cscaler_ = Standardizer.fit(Z.c) if Z.c is not None else None
        self.tscale_ = LogScale.fit(T.median())
        if self.target == "median":
            row, y, w = np.arange(T.n), T.median(), np.ones(T.n)
        else:
            row, y, w = T.flat()
            w = w / w.mean()
        xt, ct = self._tensors(Z)
        rows = torch.from_numpy(row.astype(np.int64))
        yt = torch.from_numpy(self.tscale_.forward(y).astype(np.float32))
        wt = torch.from_numpy(w.astype(np.float32))
        self.dims_ = [int(Z.x.shape[1]), 0 if Z.c is None else int(Z.c.shape[1])]

        def loss_of(idx: torch.Tensor) -> torch.Tensor:
            r = rows[idx]
            out, aux = self._forward(xt[r], None if ct is None else ct[r])
            loss = (wt[idx] * (out - yt[idx]).abs()).mean()
            return loss if aux is None else loss + aux

        val = None
        if Zv is not None and Tv is not None:
            xv, cv = self._tensors(Zv)

            def val() -> float:
                return weighted_mae(self._tokens(xv, cv), Tv)

        self._train_net(lambda: self._build(*self.dims_), loss_of, len(row), val)

    def _tokens(self, xt: torch.Tensor, ct: torch.Tensor | None) -> np.ndarray:
        self.net_.eval()
        with torch.no_grad(), one_thread():
            out, _ = self._forward(xt, ct)
        return self.tscale_.inverse(out.numpy().astype(np.float64))

    def _point(self, Z: Inputs) -> np.ndarray:
        return self._tokens(*self._tensors(Z))

    # -- state
    def _get_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        t = module_tensors(self.net_)
        t |= {"x_mean": self.scaler_.mean, "x_scale": self.scaler_.scale}
        if self.cscaler_ is not None:
            t |= {"c_mean": self.cscaler_.mean, "c_scale": self.cscaler_.scale}
        return t, {"dims": self.dims_, "target": self.tscale_.to_json(), "train_log": self.train_log_}

    def _set_state(self, tensors: dict[str, np.ndarray], info: dict[str, Any]) -> None:
        self.dims_ = [int(v) for v in info["dims"]]
        self.scaler_ = Standardizer(tensors["x_mean"], tensors["x_scale"])
        self.cscaler_ = Standardizer(tensors["c_mean"], tensors["c_scale"]) if "c_mean" in tensors else None
        self.tscale_ = LogScale(**info["target"])
        self.train_log_ = dict(info.get("train_log") or {})
        self._load_net(lambda: self._build(*self.dims_), tensors)


@dataclass(eq=False, repr=False)
class MLPHead(TorchRegressor):
    name = "mlp"
    default_blocks = ("@mid.mean", "@high.last")

    blocks: tuple[str, ...] | None = None
    hidden: int = 256
    depth: int = 2
    dropout: float = 0.1
    target: str = "median"

    def _build(self, d_x: int, d_c: int) -> nn.Module:
        return mlp(d_x, self.hidden, self.depth, 1, float(self.dropout))

    def _forward(self, xb: torch.Tensor, cb: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.net_(xb)[:, 0], None  # (B,)
