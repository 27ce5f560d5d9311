"""``outlets``: remaining-length prediction along the trajectory, from the EAGLE-3 draft backbone.

:class:`OutletsHead` reads rows of a trajectory artifact (:mod:`lenpred.outlets.store`: a sample at
decoding position ``t``, with the blocks ``draft``, ``fused``, ``draft_running`` and ``target.<layer>``)
and predicts the **remaining** length ``L - t`` (as served, in [0, cap - t]) with q10 / q50 / q90.
Its hyperparameters pick the variant: ``blocks``, ``progress`` (append ``t`` and ``log1p(t)``),
``history`` (``pool``: also read the sample's earlier rows -- the states of the re-prediction cycles a
server has already met -- as their mean, the change since the previous row and their count),
``loss`` (``l1-log``, ``l1`` or binned ``softlabel``) and, for softlabel, ``refine`` (TRAIL's Bayesian
refinement over the length-independent checkpoints). Training is batched in torch; ``predict`` /
``predict_dist`` run one row at a time through :class:`lenpred.outlets.rownet.RowNet`, as the online
head does, so a row's prediction never depends on the rows predicted with it. The losses, intervals,
weights, what the head records and refuses, and the variants: docs/outlets.md, "The `outlets` head".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import numpy as np
import torch
from torch import nn

from lenpred.errors import DataError
from lenpred.outlets.rownet import OnlineOutlets, Refiner, RowNet, refine_checkpoints
from lenpred.outlets.spec import (
    LOG_OFFSET,
    TARGET_PREFIX,
    check_trajectory_spec,
    row_weights,
    sample_order,
    sample_rows,
)
from lenpred.predictors.base import check_param
from lenpred.predictors.dist import Dist, binned, weighted_quantile
from lenpred.predictors.nn import (
    LogScale,
    Standardizer,
    mlp,
    module_tensors,
    one_thread,
)
from lenpred.predictors.registry import PREDICTORS
from lenpred.predictors.softlabel import bin_kernel
from lenpred.predictors.torch_head import TorchHead

__all__ = ["OutletsHead"]


def _bin_edges(kind: str, n_bins: int, cap: float) -> np.ndarray:
    if kind == "linear":
        return np.linspace(0.0, cap, n_bins + 1)
    c = LOG_OFFSET
    return np.exp(np.linspace(np.log(c), np.log(cap + c), n_bins + 1)) - c  # (B+1,), edges[0] = 0


def _bin_position(y: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Continuous bin coordinate of values (bin j's centre is j)."""
    j = np.clip(np.searchsorted(edges, y, side="right") - 1, 0, len(edges) - 2)
    frac = (y - edges[j]) / (edges[j + 1] - edges[j])
    return np.clip(j + frac - 0.5, 0.0, len(edges) - 2.0)


def _soft_labels(y: np.ndarray, edges: np.ndarray, smoothing: float) -> np.ndarray:
    return bin_kernel(_bin_position(y, edges), len(edges) - 1, smoothing).astype(np.float32)



def history_pool(x: np.ndarray, index: Any) -> np.ndarray:
    """(n, 2d + 1) float32: for each row of trajectory rows ``x`` (n, d), the mean of its sample's rows at
    earlier t, its change since the sample's previous row (x - previous) and log1p(number of earlier rows);
    zeros where the sample has no earlier row (its t = 0). Rows may come in any order."""
    n, d = x.shape
    out = np.zeros((n, 2 * d + 1), dtype=np.float32)
    if n == 0:
        return out
    codes, order = sample_order(index)
    xs = x[order].astype(np.float64)
    cs = codes[order]
    first = np.r_[True, cs[1:] != cs[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    k = np.arange(n) - start  # earlier rows of the same sample
    csum = np.cumsum(xs, axis=0)
    base = np.where((start > 0)[:, None], csum[np.maximum(start - 1, 0)], 0.0)  # the sum before the sample
    earlier = csum - base - xs  # the sum of the sample's earlier rows
    mean = earlier / np.maximum(k, 1)[:, None]
    prev = np.where((k > 0)[:, None], np.vstack([xs[:1], xs[:-1]]), xs)
    res = np.concatenate([mean, xs - prev, np.log1p(k)[:, None]], axis=1).astype(np.float32)
    out[order] = res
    return out


@dataclass(eq=False, repr=False)
class OutletsHead(TorchHead):
    """Remaining length ``L - t`` from trajectory rows (see the module docstring)."""

    name: ClassVar[str] = "outlets"
    input_kind: ClassVar[str] = "trajectory"
    own_spread: ClassVar[bool] = True
    default_blocks: ClassVar[tuple[str, ...]] = ("draft",)

    blocks: tuple[str, ...] | None = None
    progress: bool = True
    loss: str = "l1-log"
    n_bins: int = 32
    bins: str = "log"
    smoothing: float = 1.0
    refine: bool = False
    point: str = "median"
    hidden: int = 256
    depth: int = 2
    dropout: float = 0.1
    weights: str = "sample"
    history: str = "none"
    epochs: int = field(default=60, kw_only=True)
    batch_size: int = field(default=512, kw_only=True)
    patience: int = field(default=8, kw_only=True)

    # ---------------------------------------------------------------- hyperparameters
    @property
    def _binned(self) -> bool:
        return self.loss == "softlabel"

    def _check_params(self) -> None:
        n = self.name
        check_param(self.loss in ("l1-log", "l1", "softlabel"), n, "loss", "must be 'l1-log', 'l1' or 'softlabel'")
        check_param(isinstance(self.progress, bool), n, "progress", "must be true or false")
        check_param(isinstance(self.refine, bool), n, "refine", "must be true or false")
        check_param(not self.refine or self.loss == "softlabel", n, "refine", "needs loss=softlabel (a histogram to refine)")
        check_param(self.bins in ("log", "linear"), n, "bins", "must be 'log' or 'linear'")
        check_param(isinstance(self.n_bins, int) and self.n_bins >= 2, n, "n_bins", "must be an integer >= 2")
        check_param(float(self.smoothing) >= 0, n, "smoothing", "must be >= 0 (bins)")
        check_param(self.point in ("median", "mean"), n, "point", "must be 'median' or 'mean'")
        check_param(self.history in ("none", "pool"), n, "history",
                    "must be 'none' or 'pool' (the mean of the sample's earlier rows, the change since the last one)")
        check_param(self.weights in ("sample", "row"), n, "weights",
                    "must be 'sample' (each sample 1, over its rows) or 'row' (each row as a server meets it)")
        self._check_net()
        blocks = self.default_blocks if self.blocks is None else self.blocks
        check_param(len(blocks) >= 1 and all(isinstance(b, str) and b for b in blocks), n, "blocks",
                    "must name at least one trajectory block (draft, fused, draft_running, target)")

    # ---------------------------------------------------------------- inputs
    def _resolve(self, traj: Any) -> list[str]:
        out: list[str] = []
        for sel in self.default_blocks if self.blocks is None else self.blocks:
            if sel == "target":
                cands = sorted(b for b in traj.blocks if b.startswith(TARGET_PREFIX))
                if len(cands) != 1:
                    raise DataError(f"block selector 'target' needs exactly one target.<layer> block, found "
                                    f"{cands or 'none'}", f"name the block (blocks: {', '.join(sorted(traj.blocks))})")
                name = cands[0]
            else:
                traj.block(sel)  # error listing the blocks if absent
                name = sel
            if name not in out:
                out.append(name)
        return out

    def _matrix(self, traj: Any, fit: bool) -> tuple[np.ndarray, np.ndarray]:
        """(n, d) float32 inputs and (n,) positions t; at ``fit`` record what was read, else check it."""
        from lenpred.outlets.store import Trajectory

        if not isinstance(traj, Trajectory):
            raise DataError(f"the {self.name} head reads trajectory features, got {type(traj).__name__}",
                            "compute them with `lenpred outlets features` and train with `lenpred outlets train`")
        if fit:
            self.blocks_ = {"x": self._resolve(traj)}
            self.widths_ = {"x": [int(traj.block(b).shape[1]) for b in self.blocks_["x"]]}
            self.feature_spec_ = dict(traj.spec)
            self.side_names_ = None
        else:
            if traj.spec is not self.feature_spec_:  # rows made for this head carry its own spec object
                check_trajectory_spec(self.feature_spec_ or {}, traj.spec, what=f"{self.name} head")
            for b, w in zip(self.blocks_["x"], self.widths_["x"], strict=True):
                got = int(traj.block(b).shape[1])
                if got != w:
                    raise DataError(f"trajectory block {b!r} has width {got}, the {self.name} head was trained on {w}",
                                    "use trajectory features computed with the head's draft head and target")
        t = traj.index["t"].to_numpy(dtype=np.float64)
        cols = [traj.block(b) for b in self.blocks_["x"]]
        if self.history == "pool":
            if not fit:
                self._check_history_rows(traj)
            cols.append(history_pool(np.concatenate(cols, axis=1).astype(np.float32, copy=False), traj.index))
        if self.progress:
            cols.append(np.column_stack([t, np.log1p(t)]).astype(np.float32))
        x = np.concatenate(cols, axis=1).astype(np.float32, copy=False)
        if not np.isfinite(x).all():
            rows = np.flatnonzero(~np.isfinite(x).all(axis=1))
            raise DataError(f"{self.name} input has NaN or infinite values in {rows.size} row(s) (first: row {int(rows[0])})",
                            "recompute the trajectory features")
        return x, t

    @property
    def history_rows_(self) -> str:
        """The row scheme of the trajectory the head was trained on (``fraction``, ``live`` or ``both``)."""
        from lenpred.outlets.features import rows_of

        return rows_of(self.feature_spec_)

    def _check_history_rows(self, traj: Any) -> None:
        """A history head reads the sample's earlier rows: they must be placed as in training (live rows are
        the re-prediction cycles a server meets; fraction rows use the true length)."""
        from lenpred.outlets.features import rows_of

        got, want = rows_of(traj.spec), self.history_rows_
        if got != want:
            raise DataError(f"this {self.name} head (history=pool) reads each sample's earlier rows and was trained on "
                            f"{want} rows; the trajectory has {got} rows",
                            f"compute trajectory features with --rows {want} for it (lenpred outlets features)")

    def _labels(self, traj: Any, y: Any) -> np.ndarray:
        if y is None:
            return traj.index["remaining"].to_numpy(dtype=np.float64)
        v = np.asarray(y, dtype=np.float64).reshape(-1)
        if v.shape[0] != traj.n or not np.isfinite(v).all() or (v < 0).any():
            raise DataError(f"{self.name}: y must be {traj.n} finite remaining lengths >= 0", "or pass y=None (the artifact's labels)")
        return v

    # ---------------------------------------------------------------- fit
    def fit(self, X: Any, y: Any = None, *, X_val: Any = None, y_val: Any = None, cap: float | None = None) -> Self:
        """Fit on trajectory rows ``X`` (labels: ``y`` or the rows' own ``remaining``); ``X_val`` (the
        split's validation prompts) drives early stopping and the interval width. ``cap``: the card's
        max_new_tokens (default: the length of the truncated rows, else the longest sample)."""
        for attr in [a for a in vars(self) if a.endswith("_") and not a.startswith("_")]:
            delattr(self, attr)
        self._check_params()
        import time

        x, t = self._matrix(X, fit=True)
        yr = self._labels(X, y)
        n_prompts = int(X.index["prompt_id"].nunique())
        if n_prompts < 2:
            raise DataError(f"{self.name}: fit needs rows of at least 2 training prompts, got {n_prompts}",
                            "compute trajectory features of more training prompts (--roles train, a larger --max-prompts)")
        if cap is None:
            tr = X.index["truncated"].to_numpy(bool)
            ln = X.index["length"].to_numpy(dtype=np.float64)
            cap = float(ln[tr].max()) if tr.any() else float(ln.max())
        self.cap_ = float(cap)
        w = row_weights(X.index, self.weights)
        val = None
        if X_val is not None:
            xv, tv = self._matrix(X_val, fit=False)
            val = (xv, tv, self._labels(X_val, y_val), row_weights(X_val.index, self.weights))
        t0 = time.perf_counter()
        self.scaler_ = Standardizer.fit(x)
        self.d_in_ = int(x.shape[1])
        if self._binned:
            self._fit_binned(x, yr, w, val)
        else:
            self._fit_regression(x, yr, w, val)
        self.n_train_ = n_prompts
        self.n_rows_ = int(X.n)
        self.fit_seconds_ = time.perf_counter() - t0
        return self

    def _n_out(self) -> int:
        return self.n_bins if self._binned else 3

    def _build(self) -> nn.Module:
        return mlp(self.d_in_, self.hidden, self.depth, self._n_out(), float(self.dropout))

    def _fit_regression(self, x: np.ndarray, y: np.ndarray, w: np.ndarray, val: Any) -> None:
        self.tscale_ = LogScale.fit(y, log=self.loss == "l1-log")
        self.width_scale_ = 1.0
        xt = self.scaler_(x)
        zt = torch.from_numpy(self.tscale_.forward(y).astype(np.float32))
        wt = torch.from_numpy(w.astype(np.float32))
        taus = torch.tensor([0.1, 0.5, 0.9])

        def loss_of(idx: torch.Tensor) -> torch.Tensor:
            q = self._quantiles_z(self.net_(xt[idx]))  # (B, 3)
            d = zt[idx][:, None] - q
            pin = torch.maximum(taus * d, (taus - 1.0) * d).sum(-1)  # (B,)
            return (wt[idx] * pin).mean()

        val_mae = None
        if val is not None:
            xv_t = self.scaler_(val[0])

            def val_mae() -> float:
                q50 = self._tokens_regression(xv_t, val[1])[1]
                return float(np.average(np.abs(q50 - val[2]), weights=val[3]))

        self._train_net(self._build, loss_of, len(y), val_mae)
        if val is not None:
            self.width_scale_ = self._calibrate(self.scaler_(val[0]), val[2], val[3])

    @staticmethod
    def _quantiles_z(out: torch.Tensor) -> torch.Tensor:
        m = out[:, 0]
        lo = m - nn.functional.softplus(out[:, 1])
        hi = m + nn.functional.softplus(out[:, 2])
        return torch.stack([lo, m, hi], dim=-1)  # (B, 3)

    def _raw_z(self, xt: torch.Tensor) -> np.ndarray:
        """(n, 3) float64 z-quantiles in one batch (training, validation, calibration)."""
        with torch.inference_mode(), one_thread():
            return self._quantiles_z(self.net_(xt)).numpy().astype(np.float64)

    def _calibrate(self, xv_t: torch.Tensor, y: np.ndarray, w: np.ndarray) -> float:
        """One factor on both half-widths (in the standardised target space) for 80% coverage."""
        q = self._raw_z(xv_t)
        z = self.tscale_.forward(y)
        half = np.where(z < q[:, 1], q[:, 1] - q[:, 0], q[:, 2] - q[:, 1])
        r = np.abs(z - q[:, 1]) / np.maximum(half, 1e-6)
        return float(np.clip(weighted_quantile(r, w, 0.8), 0.25, 4.0))

    def _tokens_regression(self, xt: torch.Tensor, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        q = self._raw_z(xt)
        c = self.width_scale_
        lo = q[:, 1] - c * (q[:, 1] - q[:, 0])
        hi = q[:, 1] + c * (q[:, 2] - q[:, 1])
        top = np.maximum(self.cap_ - t, 0.0)
        return tuple(np.clip(self.tscale_.inverse(v), 0.0, top) for v in (lo, q[:, 1], hi))  # type: ignore[return-value]

    def _fit_binned(self, x: np.ndarray, y: np.ndarray, w: np.ndarray, val: Any) -> None:
        self.edges_ = _bin_edges(self.bins, self.n_bins, self.cap_)
        xt = self.scaler_(x)
        q = torch.from_numpy(_soft_labels(np.minimum(y, self.cap_), self.edges_, float(self.smoothing)))
        wt = torch.from_numpy(w.astype(np.float32))

        def loss_of(idx: torch.Tensor) -> torch.Tensor:
            logp = torch.log_softmax(self.net_(xt[idx]), dim=-1)
            return (wt[idx] * -(q[idx] * logp).sum(-1)).mean()

        val_mae = None
        if val is not None:
            xv_t = self.scaler_(val[0])

            def val_mae() -> float:  # without refinement: early stopping judges the classifier itself
                d = binned(self._probs(xv_t, val[1]), self.edges_)
                p = d.q50 if self.point == "median" else d.mean
                return float(np.average(np.abs(p - val[2]), weights=val[3]))

        self._train_net(self._build, loss_of, len(y), val_mae)

    def _probs(self, xt: torch.Tensor, t: np.ndarray) -> np.ndarray:
        """(n, B) histograms in one batch (validation), mass on bins entirely above cap - t removed."""
        with torch.inference_mode(), one_thread():
            p = torch.softmax(self.net_(xt), dim=-1).numpy().astype(np.float64)
        possible = self.edges_[None, :-1] < np.maximum(self.cap_ - t, 1e-9)[:, None]
        p = np.where(possible, p, 0.0)
        s = p.sum(1, keepdims=True)
        return np.where(s > 0, p / np.where(s > 0, s, 1.0), possible / np.maximum(possible.sum(1, keepdims=True), 1))

    def _refiner(self, cache: dict[int, np.ndarray] | None = None) -> Refiner:
        return Refiner(self.edges_, *refine_checkpoints(self.feature_spec_), cache=cache)

    def _refine(self, p: np.ndarray, index: Any) -> np.ndarray:
        """The refinement (module docstring) over every sample of a trajectory index (rows in any order):
        per sample in order of t, fold the rows at checkpoints in, each row's output from the latest."""
        t = index["t"].to_numpy(dtype=np.int64)
        out = np.empty_like(p)
        cache: dict[int, np.ndarray] = {}
        for rows in sample_rows(index):
            r = self._refiner(cache)
            for i in rows:
                ti = int(t[i])
                if ti == r.c:  # the same position twice: the same answer
                    out[i] = r.post
                    continue
                if r.is_checkpoint(ti):
                    r.fold(ti, p[i])
                out[i] = r.output(ti, p[i])
        return out

    def _proba_rows(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        x, t = self._matrix(X, fit=False)
        rn = RowNet(self)
        o = rn.rows(x)
        p = np.stack([rn.probs(o[i], float(t[i])) for i in range(len(t))]) if len(t) else np.zeros((0, self.n_bins))
        return (self._refine(p, X.index) if self.refine else p), t

    def predict_proba(self, X: Any) -> np.ndarray:
        """(n, n_bins) distribution over the remaining-length bins ``edges_`` (refined with ``refine``)."""
        self._check_fitted()
        if not self._binned:
            raise DataError(f"this {self.name} head is a regression head (loss={self.loss}); it has no bins",
                            "use a soft-label head (lenpred outlets train --variant outlets-softlabel or probe)")
        return self._proba_rows(X)[0]

    # ---------------------------------------------------------------- predict
    def predict_dist(self, X: Any) -> Dist:
        """Remaining-length distribution per row: mean, spread, q10 / q50 / q90 (tokens), row by row."""
        self._check_fitted()
        rn = RowNet(self)
        if self._binned:
            p, t = self._proba_rows(X)
            res = [rn.binned(p[i], float(t[i])) for i in range(len(t))]
        else:
            x, t = self._matrix(X, fit=False)
            o = rn.rows(x)
            res = [rn.regression(o[i], float(t[i])) for i in range(len(t))]
        cols = np.array(res, dtype=np.float64).reshape(len(t), 5).T
        return Dist(*(np.ascontiguousarray(c) for c in cols))

    def predict(self, X: Any) -> np.ndarray:
        """(n,) predicted remaining tokens L - t (q50; the histogram mean with ``point="mean"``)."""
        d = self.predict_dist(X)
        return d.mean if (self._binned and self.point == "mean") else d.q50

    def predict_total(self, X: Any) -> np.ndarray:
        """(n,) predicted total output tokens: t + predicted remaining."""
        return X.index["t"].to_numpy(dtype=np.float64) + self.predict(X)

    def online(self) -> OnlineOutlets:
        """A predictor for one generation, fed one position per cycle (:class:`OnlineOutlets`)."""
        self._check_fitted()
        if self.history != "none":
            raise DataError(f"this {self.name} head reads the sample's earlier rows (history={self.history}); it has no "
                            "online twin yet", "run a head without history live (e.g. --variant outlets-running)")
        return OnlineOutlets(self)

    # ---------------------------------------------------------------- state
    def _get_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        t = module_tensors(self.net_) | {"x_mean": self.scaler_.mean, "x_scale": self.scaler_.scale}
        info: dict[str, Any] = {"d_in": self.d_in_, "train_log": self.train_log_, "n_rows": self.n_rows_}
        if self._binned:
            t["edges"] = self.edges_
        else:
            info |= {"target": self.tscale_.to_json(), "width_scale": self.width_scale_}
        return t, info

    def _set_state(self, tensors: dict[str, np.ndarray], info: dict[str, Any]) -> None:
        self.d_in_ = int(info["d_in"])
        self.n_rows_ = int(info.get("n_rows") or 0)
        self.scaler_ = Standardizer(tensors["x_mean"], tensors["x_scale"])
        self.train_log_ = dict(info.get("train_log") or {})
        if self._binned:
            self.edges_ = tensors["edges"]
        else:
            self.tscale_ = LogScale(**info["target"])
            self.width_scale_ = float(info["width_scale"])
        if self.cap_ is None:
            raise DataError("outlets head lacks its cap", "the head is corrupt: retrain it")
        self.cap_ = float(self.cap_)
        self._load_net(self._build, tensors)


# the trajectory head adds itself to the predictor registry (lenpred.predictors does not import lenpred.outlets)
PREDICTORS.add(OutletsHead.name, OutletsHead)
