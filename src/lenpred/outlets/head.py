"""``outlets``: remaining-length prediction along the trajectory, from the EAGLE-3 draft backbone.

Where every other head sees one prompt and predicts its total output length, this one sees one row
of a trajectory artifact (:mod:`lenpred.outlets.store`): a sample at decoding position ``t`` (tokens
generated so far), with the draft decoder's hidden state there (block ``"draft"``), the draft's
fused low/mid/high target state (``"fused"``), a running mean of the draft states so far
(``"draft_running"``) and one target layer (``"target.<layer>"``). It predicts the **remaining**
length ``L - t`` with a predictive distribution (q10 / q50 / q90).

Inputs (hyperparameters, so every variant of the comparison is one head class):

* ``blocks``: block names (``"target"`` selects the one ``target.<layer>`` block); default ``("draft",)``;
* ``progress``: append ``t`` and ``log1p(t)`` (standardised like every column);
* ``loss``: ``"l1-log"`` (pinball losses at 0.1 / 0.5 / 0.9 on standardised ``log1p(remaining)``:
  the 0.5 term is the L1 loss, so q50 estimates the conditional median; the log makes the error
  relative), ``"l1"`` (the same on standardised raw tokens), or ``"softlabel"`` (a classifier over
  ``n_bins`` remaining-length bins, cross-entropy on a Gaussian kernel of ``smoothing`` bins around
  the label; ``bins="log"``: geometric bins of log(remaining + 16), fine near the end, ``"linear"``:
  equal width on [0, cap]);
* ``refine`` (softlabel only): TRAIL's Bayesian refinement along a sample -- the posterior carried
  from the previous *checkpoint*, moved down by the tokens generated since (a transition matrix,
  :func:`lenpred.outlets.baselines.transition_matrix`), times the classifier's output here. The
  checkpoints are the positions that do not depend on the sample's length: t = 0, the fixed token
  counts (32 ... 512) and the stride grid of the head's training spec (``positions``); the posterior is
  carried only through them, and every other row (the fractions of L) is one step from the latest
  checkpoint before it, its evidence not carried on. So the refinement does not depend on which
  L-dependent positions an artifact holds (their number and place would leak L into later rows), and
  the online head (:class:`OnlineOutlets`, one row per cycle) folds exactly the same checkpoints in
  (it has every row), giving the offline numbers at the same positions. With ``blocks=("target",)``,
  linear bins, ``smoothing=0`` and no progress, that is the TRAIL probe baseline (variant ``probe``).

**Labels: lengths as served.** The label of a row is ``remaining = L - t`` from the artifact, L the
generated count as served. A sample stopped at max_new_tokens (``truncated``) has exactly ``cap - t``
tokens left under the card -- what a server generates and a scheduler sees -- so it is trained and
scored like any other sample (every prefill head predicts min(L, cap) the same way,
:mod:`lenpred.predictors.targets`), with full weight; predictions live on [0, cap - t]. The
``truncated`` flag is only kept so a bench can also report EOS-only figures.

**Weights.** Each training prompt counts once, split evenly over its samples, and each sample's
weight evenly over its positions (long samples have more positions; without this they would dominate).

**Intervals.** Regression heads learn q10 / q90 with pinball losses (q10 = q50 - softplus, q90 =
q50 + softplus: never crossing) and then scale both half-widths by one factor, chosen so the 80%
interval covers 80% of the validation rows (weighted). Binned heads read quantiles off the histogram.
The mean and spread of a regression head are those of the quantile-matched two-piece normal.

**What the head records.** The trajectory spec it was fitted on (draft head hash, target
fingerprint, layers ...; :func:`check_trajectory_spec`), the blocks and their widths, and -- saved
with ``card`` -- the run's model and sampling card. Features of another draft head or another target
are refused with an error naming the field. ``predict`` returns the point prediction of the
*remaining* length (q50, or the histogram mean with ``point="mean"``); :meth:`OutletsHead.predict_total`
adds ``t``.

**Row by row.** ``predict`` / ``predict_dist`` run the network on one row at a time (float32 numpy,
one BLAS call per layer), exactly as the online head does once per cycle: BLAS picks other kernels
for other batch sizes (results ~1e-7 apart), so this way a row's prediction never depends on the
rows predicted with it, and the online prediction is the offline one bit for bit. Training and
validation run batched in torch (the same function to float32 rounding).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self

import numpy as np
import torch
from torch import nn

from lenpred.errors import CardMismatchError, DataError
from lenpred.predictors.base import Predictor, check_param
from lenpred.predictors.dist import Z90, Dist, binned, weighted_quantile
from lenpred.predictors.nn import (
    LogScale,
    Standardizer,
    load_module,
    mlp,
    module_tensors,
    one_thread,
    seeded,
    train_loop,
)

__all__ = ["OutletsHead", "OnlineOutlets", "VARIANTS", "check_trajectory_spec", "row_weights", "two_piece_moments",
           "LOG_OFFSET", "refine_checkpoints"]

LOG_OFFSET = 16.0  # log bins are equal in log(remaining + LOG_OFFSET): ~2-token bins at the end, ~50 at 512
TARGET_PREFIX = "target."
# spec keys that describe where or how many positions were written (or the labels), not what the states are
_SPEC_IGNORED = frozenset({
    "lenpred_version", "created_at", "card_hash", "run", "n", "n_rows", "n_samples", "n_prompts", "shards",
    "dtype", "positions", "position_scheme", "scheme", "stride", "fractions", "tokens", "seconds", "roles",
    "device", "batch_size", "threads", "target_states", "labels",
})

# The variants compared in one table (lenpred outlets train --variant NAME). "outlets" is the default head.
VARIANTS: dict[str, dict[str, Any]] = {
    "outlets": {"blocks": ("draft",), "progress": True, "loss": "l1-log"},
    "outlets-fused": {"blocks": ("fused",), "progress": True, "loss": "l1-log"},
    "outlets-both": {"blocks": ("draft", "fused"), "progress": True, "loss": "l1-log"},
    "outlets-noprogress": {"blocks": ("draft",), "progress": False, "loss": "l1-log"},
    "outlets-running": {"blocks": ("draft", "draft_running"), "progress": True, "loss": "l1-log"},
    "outlets-l1raw": {"blocks": ("draft",), "progress": True, "loss": "l1"},
    "outlets-softlabel": {"blocks": ("draft",), "progress": True, "loss": "softlabel"},
    "probe": {"blocks": ("target",), "progress": False, "loss": "softlabel", "bins": "linear", "n_bins": 10,
              "smoothing": 0.0, "refine": True, "hidden": 128, "depth": 1},
}


def _flat(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flat(v, key + "."))
        else:
            out[key] = list(v) if isinstance(v, tuple) else v
    return out


def _ignored(key: str) -> bool:
    parts = key.split(".")
    return any(p in _SPEC_IGNORED for p in parts) or parts[-1].endswith("path")


def check_trajectory_spec(trained: Mapping[str, Any], given: Mapping[str, Any], what: str = "outlets head") -> None:
    """Every field of the trajectory spec the head was fitted on must match the given features' --
    except where and how many positions were written (the position scheme, the run, counts, dtype,
    file paths): a head applies at any position, on any prompt set of the same draft head and target."""
    a, b = _flat(trained), _flat(given)
    for k in sorted(set(a) | set(b)):
        if _ignored(k) or a.get(k) == b.get(k):
            continue
        low = k.lower()
        if low.startswith("draft"):
            who, fix = "another draft head", "compute trajectory features with the head's draft head"
        elif low.startswith(("target", "model")) or "fingerprint" in low:
            who, fix = "another target model", "compute trajectory features for the head's target model"
        else:
            who, fix = "another trajectory spec", "compute trajectory features with the head's spec"
        raise CardMismatchError(
            f"trajectory features come from {who} than the {what} was trained on "
            f"({k}: {b.get(k)!r} != {a.get(k)!r})", f"{fix} (lenpred outlets features), or retrain the head on these")


def row_weights(index: Any) -> np.ndarray:
    """(n,) weights: each prompt 1, split evenly over its samples, each sample's over its positions."""
    pid = index["prompt_id"].astype(str).to_numpy()
    sid = index["sample_idx"].to_numpy()
    key = np.char.add(np.char.add(pid.astype(str), "\x00"), sid.astype(str))
    _, s_code, s_count = np.unique(key, return_inverse=True, return_counts=True)
    _, p_code = np.unique(pid, return_inverse=True)
    # samples per prompt: distinct sample codes within each prompt
    pairs = np.unique(np.column_stack([p_code, s_code]), axis=0)
    k_per_prompt = np.bincount(pairs[:, 0], minlength=p_code.max() + 1)
    w = 1.0 / (k_per_prompt[p_code] * s_count[s_code])
    return w / w.mean()


def two_piece_moments(q10: np.ndarray, q50: np.ndarray, q90: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sd of the two-piece normal whose 10/50/90% quantiles are the given ones (half-normals
    of scales s1 = (q50 - q10) / z and s2 = (q90 - q50) / z on either side of q50, each half the mass)."""
    s1 = np.maximum(q50 - q10, 0.0) / Z90
    s2 = np.maximum(q90 - q50, 0.0) / Z90
    d = (s2 - s1) / np.sqrt(2.0 * np.pi)
    return q50 + d, np.sqrt(np.maximum(0.5 * (s1**2 + s2**2) - d**2, 0.0))


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
    n_bins = len(edges) - 1
    pos = _bin_position(y, edges)
    j = np.arange(n_bins)
    if smoothing <= 0:
        return (j == np.clip(np.floor(pos + 0.5), 0, n_bins - 1)[:, None]).astype(np.float32)
    k = np.exp(-0.5 * ((j[None, :] - pos[:, None]) / smoothing) ** 2)
    return (k / k.sum(1, keepdims=True)).astype(np.float32)


# ---------------------------------------------------------------- the network, one row at a time
Plan = list[tuple[Any, ...]]
_C_TANH = np.float32(np.sqrt(2.0 / np.pi))


def _plan(net: nn.Module) -> Plan:
    """The eval-mode forward of an :func:`lenpred.predictors.nn.mlp` as numpy steps: ("linear", W^T
    (in, out) float32, b), ("gelu", approximate, Phi); dropout left out (eval). GELU(x) = x Phi(x)."""
    plan: Plan = []
    mods = list(net.children()) if isinstance(net, nn.Sequential) else [net]
    for m in mods:
        if isinstance(m, nn.Linear):
            w = m.weight.detach().cpu().numpy().astype(np.float32).T.copy()
            b = None if m.bias is None else m.bias.detach().cpu().numpy().astype(np.float32).copy()
            plan.append(("linear", w, b))
        elif isinstance(m, nn.GELU):
            from scipy import special

            plan.append(("gelu", m.approximate, special.ndtr))
        elif not isinstance(m, nn.Dropout):
            raise DataError(f"the outlets head's network has a {type(m).__name__} layer; the predict path knows "
                            "Linear, GELU and Dropout", "retrain the head with this version of lenpred")
    return plan


def _run(plan: Plan, x: np.ndarray) -> np.ndarray:
    """(1, d) float32 -> (1, out) float32: one row through the plan (float32 numpy; one small BLAS call
    per layer, far cheaper per row than torch's dispatch, which is what a cycle pays)."""
    for step in plan:
        if step[0] == "linear":
            x = x @ step[1]
            if step[2] is not None:
                x += step[2]
        elif step[1] == "tanh":
            x = np.float32(0.5) * x * (np.float32(1.0) + np.tanh(_C_TANH * (x + np.float32(0.044715) * x * x * x)))
        else:
            x = x * step[2](x)
    return x


_PROBS = np.array([0.1, 0.5, 0.9])


# ---------------------------------------------------------------- refinement
def refine_checkpoints(spec: Mapping[str, Any] | None) -> tuple[int, tuple[int, ...]]:
    """(stride, fixed token counts) of the refinement checkpoints: the L-independent positions of the
    spec's position scheme (t = 0, the fixed points, the stride grid); defaults 64 and 32 ... 512."""
    from lenpred.outlets.features import FIXED_TOKENS

    pos = (spec or {}).get("positions") or {}
    stride = int(pos.get("stride") or 64)
    tokens = pos.get("fixed_tokens", pos.get("tokens"))
    return max(stride, 1), tuple(sorted(int(x) for x in (FIXED_TOKENS if tokens is None else tokens)))


class _Refiner:
    """TRAIL's refinement along one sample (see the module docstring): the posterior folded through
    the checkpoints so far; :meth:`output` is the posterior at any row after the latest checkpoint."""

    def __init__(self, edges: np.ndarray, stride: int, tokens: tuple[int, ...],
                 cache: dict[int, np.ndarray] | None = None) -> None:
        self.edges, self.stride, self.tokens = edges, stride, tokens
        self.cache = {} if cache is None else cache
        self.post: np.ndarray | None = None
        self.c = -1  # the latest checkpoint folded in

    def is_checkpoint(self, t: int) -> bool:
        return t == 0 or t % self.stride == 0 or t in self.tokens

    def due(self, t: int) -> list[int]:
        """The checkpoints after the latest folded one, up to t (increasing)."""
        a = self.c
        got = set(range((a // self.stride + 1) * self.stride, t + 1, self.stride)) if t > a else set()
        got |= {x for x in self.tokens if a < x <= t}
        if a < 0 <= t:
            got.add(0)
        return sorted(got)

    def _step(self, lik: np.ndarray, t: int) -> np.ndarray:
        cur = lik
        if self.post is not None:
            d = int(t - self.c)
            m = self.cache.get(d)
            if m is None:
                from lenpred.outlets.baselines import transition_matrix

                m = self.cache[d] = transition_matrix(self.edges, float(d))
            post = cur * (self.post @ m)
            s = post.sum()
            cur = post / s if s > 1e-300 else cur  # the two disagree completely: trust the new evidence
        s = cur.sum()
        return cur / s if s > 0 else np.full_like(cur, 1.0 / cur.size)

    def fold(self, t: int, lik: np.ndarray) -> None:
        """Fold in the classifier's output ``lik`` (B,) at checkpoint t."""
        if t <= self.c:
            raise DataError(f"refinement positions must increase (checkpoint {t} after {self.c})")
        self.post, self.c = self._step(lik, t), int(t)

    def output(self, t: int, lik: np.ndarray) -> np.ndarray:
        """The refined histogram at row t (>= the latest checkpoint) with the classifier's output ``lik``."""
        if t < self.c:
            raise DataError(f"refinement positions must increase (row {t} after checkpoint {self.c})")
        if t == self.c and self.post is not None:
            return self.post
        return self._step(lik, t)


class OutletsHead(Predictor):
    """Remaining length ``L - t`` from trajectory rows (see the module docstring)."""

    name: ClassVar[str] = "outlets"
    input_kind: ClassVar[str] = "trajectory"
    own_spread: ClassVar[bool] = True
    default_blocks: ClassVar[tuple[str, ...]] = ("draft",)

    def __init__(self, blocks: tuple[str, ...] | None = None, progress: bool = True, loss: str = "l1-log",
                 n_bins: int = 32, bins: str = "log", smoothing: float = 1.0, refine: bool = False,
                 point: str = "median", hidden: int = 256, depth: int = 2, dropout: float = 0.1, epochs: int = 60,
                 batch_size: int = 512, lr: float = 1e-3, weight_decay: float = 1e-4, patience: int = 8,
                 seed: int = 0) -> None:
        self.blocks = blocks
        self.progress = progress
        self.loss = loss
        self.n_bins = n_bins
        self.bins = bins
        self.smoothing = smoothing
        self.refine = refine
        self.point = point
        self.hidden = hidden
        self.depth = depth
        self.dropout = dropout
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.patience = patience
        self.seed = seed

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
        for k in ("hidden", "epochs", "batch_size", "patience"):
            check_param(isinstance(getattr(self, k), int) and getattr(self, k) >= 1, n, k, "must be an integer >= 1")
        check_param(isinstance(self.depth, int) and self.depth >= 0, n, "depth", "must be an integer >= 0")
        check_param(0.0 <= float(self.dropout) < 1.0, n, "dropout", "must be in [0, 1)")
        check_param(float(self.lr) > 0 and float(self.weight_decay) >= 0, n, "lr", "must be > 0 (weight_decay >= 0)")
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
        if self.progress:
            cols.append(np.column_stack([t, np.log1p(t)]).astype(np.float32))
        x = np.concatenate(cols, axis=1).astype(np.float32, copy=False)
        if not np.isfinite(x).all():
            rows = np.flatnonzero(~np.isfinite(x).all(axis=1))
            raise DataError(f"{self.name} input has NaN or infinite values in {rows.size} row(s) (first: row {int(rows[0])})",
                            "recompute the trajectory features")
        return x, t

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
            raise DataError(f"{self.name}: fit needs rows of at least 2 training prompts, got {n_prompts}")
        if cap is None:
            tr = X.index["truncated"].to_numpy(bool)
            ln = X.index["length"].to_numpy(dtype=np.float64)
            cap = float(ln[tr].max()) if tr.any() else float(ln.max())
        self.cap_ = float(cap)
        w = row_weights(X.index)
        val = None
        if X_val is not None:
            xv, tv = self._matrix(X_val, fit=False)
            val = (xv, tv, self._labels(X_val, y_val), row_weights(X_val.index))
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

    def _train(self, loss_of: Any, n: int, val_mae: Any) -> None:
        with seeded(self.seed):
            self.net_ = self._build()
            log = train_loop(self.net_, loss_of, n, val_mae=val_mae, epochs=self.epochs, batch_size=self.batch_size,
                             lr=float(self.lr), weight_decay=float(self.weight_decay), patience=self.patience,
                             seed=self.seed)
        self.train_log_ = log.__dict__

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

        self._train(loss_of, len(y), val_mae)
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

    # ---------------------------------------------------------------- the predict path, row by row
    def _standardize(self, x: np.ndarray) -> np.ndarray:
        """(x - mean) / scale in float32 (what :class:`OnlineOutlets` does in place)."""
        mean = np.asarray(self.scaler_.mean, dtype=np.float32)
        return ((x - mean) / np.asarray(self.scaler_.scale, dtype=np.float32)).astype(np.float32)

    def _net_rows(self, xs: np.ndarray) -> np.ndarray:
        """(n, 3 or n_bins) float32 network outputs of standardised rows ``xs``, one row at a time
        through :func:`_run`, each from a (1, d) buffer as online (the module docstring's "Row by row")."""
        plan = _plan(self.net_)
        buf = np.zeros((1, xs.shape[1]), np.float32)
        out = np.empty((xs.shape[0], self._n_out()), np.float32)
        for i in range(xs.shape[0]):
            buf[0] = xs[i]
            out[i] = _run(plan, buf)[0]
        return out

    def _row_regression(self, o: np.ndarray, t: float) -> tuple[float, float, float, float, float]:
        """(mean, spread, q10, q50, q90) remaining tokens of one row from its network output ``o`` (3,):
        the quantiles q50 -/+ softplus, the calibrated width, back to tokens, clipped to [0, cap - t],
        and the quantile-matched two-piece normal's moments. Scalar float64 arithmetic (the same online
        and offline; :meth:`_tokens_regression` is the batched twin used in validation)."""
        m, a, b = float(o[0]), float(o[1]), float(o[2])
        c = self.width_scale_
        lo = m - c * (math.log1p(math.exp(-abs(a))) + max(a, 0.0))
        hi = m + c * (math.log1p(math.exp(-abs(b))) + max(b, 0.0))
        top = max(self.cap_ - t, 0.0)
        ts = self.tscale_

        def tokens(z: float) -> float:
            v = z * ts.sd + ts.mu
            v = math.expm1(min(v, 30.0)) if ts.log else v
            return min(max(v, 0.0), top)

        q10, q50, q90 = tokens(lo), tokens(m), tokens(hi)
        s1, s2 = max(q50 - q10, 0.0) / Z90, max(q90 - q50, 0.0) / Z90
        d = (s2 - s1) / math.sqrt(2.0 * math.pi)
        sd = math.sqrt(max(0.5 * (s1 * s1 + s2 * s2) - d * d, 0.0))
        return min(max(q50 + d, 0.0), top), sd, q10, q50, q90

    def _row_probs(self, o: np.ndarray, t: float) -> np.ndarray:
        """(n_bins,) float64 histogram of one row: softmax of its output, bins above cap - t emptied."""
        q = o.astype(np.float64)
        e = np.exp(q - q.max())
        p = e / e.sum()
        possible = self.edges_[:-1] < max(self.cap_ - t, 1e-9)
        p = np.where(possible, p, 0.0)
        s = p.sum()
        return p / s if s > 0 else possible / max(int(possible.sum()), 1)

    def _row_binned(self, p: np.ndarray, t: float) -> tuple[float, float, float, float, float]:
        """(mean, spread, q10, q50, q90) of one row's histogram over ``edges_`` (uniform within a bin, as
        :func:`lenpred.predictors.dist.binned`), clipped to cap - t."""
        e = self.edges_
        p = p / p.sum()
        mid, w = 0.5 * (e[1:] + e[:-1]), e[1:] - e[:-1]
        mean = float((p * mid).sum())
        spread = math.sqrt(max(float((p * (mid * mid + w * w / 12.0)).sum()) - mean * mean, 0.0))
        cum = np.cumsum(p)
        js = np.minimum(np.searchsorted(cum, _PROBS, side="left"), len(p) - 1)  # first bin reaching each p
        top = max(self.cap_ - t, 0.0)
        qs = []
        for q, j in zip(_PROBS, js.tolist(), strict=True):
            before = float(cum[j] - p[j])
            frac = min(max((q - before) / max(float(p[j]), 1e-12), 0.0), 1.0)
            qs.append(min(float(e[j] + frac * (e[j + 1] - e[j])), top))
        return min(mean, top), min(spread, top), qs[0], qs[1], qs[2]

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

        self._train(loss_of, len(y), val_mae)

    def _probs(self, xt: torch.Tensor, t: np.ndarray) -> np.ndarray:
        """(n, B) histograms in one batch (validation), mass on bins entirely above cap - t removed."""
        with torch.inference_mode(), one_thread():
            p = torch.softmax(self.net_(xt), dim=-1).numpy().astype(np.float64)
        possible = self.edges_[None, :-1] < np.maximum(self.cap_ - t, 1e-9)[:, None]
        p = np.where(possible, p, 0.0)
        s = p.sum(1, keepdims=True)
        return np.where(s > 0, p / np.where(s > 0, s, 1.0), possible / np.maximum(possible.sum(1, keepdims=True), 1))

    def _refiner(self, cache: dict[int, np.ndarray] | None = None) -> _Refiner:
        return _Refiner(self.edges_, *refine_checkpoints(self.feature_spec_), cache=cache)

    def _refine(self, p: np.ndarray, index: Any) -> np.ndarray:
        """The refinement (module docstring) over every sample of a trajectory index (rows in any order):
        per sample in order of t, fold the rows at checkpoints in, each row's output from the latest."""
        import pandas as pd

        key = index["prompt_id"].astype(str) + "\x00" + index["sample_idx"].astype(str)
        t = index["t"].to_numpy(dtype=np.int64)
        codes, _ = pd.factorize(key)
        order = np.lexsort((t, codes))
        out = np.empty_like(p)
        cache: dict[int, np.ndarray] = {}
        bounds = np.flatnonzero(np.diff(codes[order])) + 1
        for rows in np.split(order, bounds):
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
        o = self._net_rows(self._standardize(x))
        p = np.stack([self._row_probs(o[i], float(t[i])) for i in range(len(t))]) if len(t) else np.zeros((0, self.n_bins))
        return (self._refine(p, X.index) if self.refine else p), t

    def predict_proba(self, X: Any) -> np.ndarray:
        """(n, n_bins) distribution over the remaining-length bins ``edges_`` (refined with ``refine``)."""
        self._check_fitted()
        if not self._binned:
            raise DataError(f"this {self.name} head is a regression head (loss={self.loss}); it has no bins")
        return self._proba_rows(X)[0]

    # ---------------------------------------------------------------- predict
    def predict_dist(self, X: Any) -> Dist:
        """Remaining-length distribution per row: mean, spread, q10 / q50 / q90 (tokens), row by row."""
        self._check_fitted()
        if self._binned:
            p, t = self._proba_rows(X)
            res = [self._row_binned(p[i], float(t[i])) for i in range(len(t))]
        else:
            x, t = self._matrix(X, fit=False)
            o = self._net_rows(self._standardize(x))
            res = [self._row_regression(o[i], float(t[i])) for i in range(len(t))]
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
        with seeded(self.seed):
            self.net_ = self._build()
        load_module(self.net_, tensors)


class OnlineOutlets:
    """An :class:`OutletsHead` for one generation, one position per cycle, without a Trajectory.

    ``predict(t, row)``: ``row(t')`` returns the blocks at position t' as arrays ({name: (d,)}; the
    online :class:`lenpred.outlets.features.RowBuilder` gives them); the head's blocks go straight
    into a preallocated (1, d) row, are standardised in place and run through the network's plan
    (:func:`_run`) -- the same arithmetic as :meth:`OutletsHead.predict_dist` on that row, so the
    result is bit for bit the offline one. No spec check (the caller checked the head against the
    draft head once) and no mode switch per call. With ``refine``, the posterior is carried between
    calls (positions must increase): the checkpoints passed since the last call are folded in first,
    each from its own row, so every prediction equals the offline refinement at that position.
    """

    def __init__(self, head: OutletsHead) -> None:
        self.head = head
        self.blocks = tuple(head.blocks_["x"])
        self._widths = tuple(int(w) for w in head.widths_["x"])
        self._xn = np.zeros((1, head.d_in_), np.float32)  # the one row, filled in place each call
        self._slices, o = [], 0
        for b, w in zip(self.blocks, self._widths, strict=True):
            self._slices.append((b, slice(o, o + w)))
            o += w
        self._mean = np.asarray(head.scaler_.mean, dtype=np.float32)
        self._scale = np.asarray(head.scaler_.scale, dtype=np.float32)
        self._t = np.zeros(1)
        self._plan = _plan(head.net_)
        self._checked = False
        self.refiner = head._refiner() if (head._binned and head.refine) else None

    def _check(self, row: Mapping[str, np.ndarray]) -> None:
        for b, w in zip(self.blocks, self._widths, strict=True):
            if b not in row:
                raise DataError(f"online rows have no block {b!r}", f"available: {', '.join(sorted(row))}")
            got = int(np.shape(row[b])[-1])
            if got != w:
                raise DataError(f"online block {b!r} has width {got}, the {self.head.name} head was trained on {w}",
                                "use the draft head and target the length head was trained with")
        self._checked = True

    def outputs(self, t: int, row: Mapping[str, np.ndarray]) -> np.ndarray:
        """(3 or n_bins,) float32: the network's output for the row at position t."""
        if not self._checked:
            self._check(row)
        xn = self._xn
        for b, sl in self._slices:
            xn[0, sl] = row[b]
        if self.head.progress:
            self._t[0] = t
            xn[0, -2] = t
            xn[0, -1] = np.log1p(self._t)[0]
        np.subtract(xn, self._mean, out=xn)
        np.divide(xn, self._scale, out=xn)
        o = _run(self._plan, xn)[0]
        if not math.isfinite(float(o.sum())):  # a NaN or infinite input reaches the output
            raise DataError(f"{self.head.name} input has NaN or infinite values at t = {t}", "check the draft states")
        return o

    def predict(self, t: int, row: Callable[[int], Mapping[str, np.ndarray]]) -> Dist:
        """The remaining-length distribution at position t (one-element arrays, as ``predict_dist``)."""
        return Dist(*(np.array([x]) for x in self.predict_row(t, row)))

    def predict_row(self, t: int, row: Callable[[int], Mapping[str, np.ndarray]]) -> tuple[float, ...]:
        """(mean, spread, q10, q50, q90) remaining tokens at position t, as floats."""
        h = self.head
        if not h._binned:
            v = h._row_regression(self.outputs(t, row(t)), float(t))
        else:
            p = h._row_probs(self.outputs(t, row(t)), float(t))
            r = self.refiner
            if r is not None:
                if t < r.c:
                    raise DataError(f"online refinement positions must increase (t = {t} after {r.c})",
                                    "use one OnlineOutlets per generation")
                if t != r.c:
                    for c in r.due(t):
                        r.fold(c, p if c == t else h._row_probs(self.outputs(c, row(c)), float(c)))
                p = r.output(t, p)
            v = h._row_binned(p, float(t))
        return v
