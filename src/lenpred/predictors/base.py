"""The estimator contract every length predictor ("head") follows -- scikit-learn's, plus distributions.

* The constructor only stores keyword hyperparameters (no validation, no work; the torch heads' is a
  dataclass's, :class:`~lenpred.predictors.torch_head.TorchHead`); ``get_params`` /
  ``set_params`` read and write them by the constructor's signature.
* ``fit(X, y, X_val=None, y_val=None)`` validates the hyperparameters and the data, trains, and
  returns ``self``. Fitted state ends in ``_``. ``X_val`` / ``y_val`` (the split's validation
  prompts) drive early stopping and the calibration of the interval width; nothing else.
* ``predict(X)`` -> (n,) predicted total output tokens (the point an MAE is computed on);
  ``predict_dist(X)`` -> :class:`~lenpred.predictors.dist.Dist` (mean, spread, q10 / q50 / q90).
  Both raise :class:`~lenpred.errors.NotFittedError` on a head that was never fitted.
* ``save(path, card=...)`` writes ``weights.safetensors`` + ``meta.json`` through
  :mod:`lenpred.io.artifacts` (the layout: :mod:`lenpred.predictors.io`, whose ``load_head`` reads it
  back strictly; the writer lives here so that the base class needs nothing from the registry).

**Inputs.** ``X`` is a :class:`~lenpred.features.store.Features` (the head picks its blocks by name)
or, for heads that read one matrix, a plain (n, d) array. Block selectors: an exact block name
(``"15.last"``), ``"side"`` (all side features), ``"side:NAME"`` (one side column), or a role
``"@low.POOL"`` / ``"@mid.POOL"`` / ``"@high.POOL"``: the layer nearest a third / a half of the way
up, or the last, among the layers the features hold with that pool (10 / 15 / 30 for SmolLM2-135M's
30 layers). Selectors are resolved once, at ``fit``; the head records the concrete block names, their
widths and the features' spec, and refuses features that differ at ``predict``.

**Targets.** ``y`` is a :class:`~lenpred.predictors.targets.Targets` (each prompt's samples, ragged,
and the cap), an (n,) array or an (n, K) NaN-padded array. A truncated sample counts as the cap: heads
predict the generated count min(L, max_new_tokens) (see :mod:`lenpred.predictors.targets`).

**Spread.** A head without a distribution of its own gets one from the affine law sd = alpha * mu + b,
fitted on the training prompts' per-prompt means and sds (:func:`lenpred.stats.affine.fit_affine`,
bias-corrected for K_i samples), evaluated at the head's own mu, times one scale factor that makes the
80% interval cover 80% of the validation samples (it absorbs the head's own error, which the law
does not know about). The distribution is that normal clipped to [0, cap], its q10 and q90 moved so
that each tail holds 10% of the validation samples (:class:`AffineSpread`).
"""

from __future__ import annotations

import inspect
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np

from lenpred.errors import ConfigError, DataError, NotFittedError
from lenpred.predictors.dist import Dist, clipped_normal
from lenpred.predictors.targets import Targets, as_targets
from lenpred.stats.quantiles import Z90

__all__ = ["Predictor", "Inputs", "AffineSpread", "resolve_blocks", "check_param", "KIND", "SCHEMA_VERSION", "STATE"]

# the head artifact (layout: lenpred.predictors.io)
KIND = "head"
SCHEMA_VERSION = 1
STATE = "state.json"
CARD_SCOPE = "model+sampling"
_SAVED_BASE = ("blocks_", "widths_", "feature_spec_", "side_names_", "cap_", "n_train_", "fit_seconds_")

SIDE = "side"
_LAYER_BLOCK = re.compile(r"^(\d+)\.(\w+)$")
_ROLES = {"low": 1 / 3, "mid": 1 / 2, "high": 1.0}
# feature-spec keys that describe the run or the writer, not the features themselves
_SPEC_IGNORED = frozenset({"lenpred_version", "card_hash", "run", "n", "n_prompts", "created_at", "shards"})


def check_param(ok: bool, head: str, name: str, msg: str) -> None:
    """Refuse a hyperparameter value (called from ``fit``, never from a constructor)."""
    if not ok:
        raise ConfigError(f"{head}: hyperparameter {name} {msg}", f"pass a valid {name} (lenpred train --param {name}=...)")


@dataclass(frozen=True)
class Inputs:
    """What a head's ``_fit`` / ``_point`` receive: the matrices of its block groups, or texts."""

    n: int
    x: np.ndarray | None = None  # (n, d) float32: the main block group
    c: np.ndarray | None = None  # (n, dc) float32: a conditioning group (film)
    text: list[str] | None = None


def _layers_with_pool(names: Sequence[str], pool: str) -> list[int]:
    return sorted({int(m.group(1)) for n in names if (m := _LAYER_BLOCK.match(n)) and m.group(2) == pool})


def resolve_blocks(selectors: Sequence[str], feats: Any) -> list[str]:
    """Concrete block names for ``selectors`` in ``feats`` (see the module docstring)."""
    out: list[str] = []
    names = sorted(feats.blocks)
    for s in selectors:
        if s == SIDE:
            name = SIDE
        elif s.startswith(SIDE + ":"):
            feats.side_column(s.split(":", 1)[1])  # error naming the side features if absent
            name = s
        elif s.startswith("@"):
            role, _, pool = s[1:].partition(".")
            if role not in _ROLES or not pool:
                raise ConfigError(f"block selector {s!r} is not @low.POOL, @mid.POOL or @high.POOL",
                                  f"use a block name ({', '.join(names)}) or a role like @mid.mean")
            layers = _layers_with_pool(names, pool)
            if not layers:
                raise DataError(f"features have no <layer>.{pool} block for selector {s!r}",
                                f"blocks: {', '.join(names)}")
            target = _ROLES[role] * max(layers)
            name = f"{min(layers, key=lambda L: (abs(L - target), L))}.{pool}"
        else:
            feats.block(s)  # error listing the blocks if absent
            name = s
        if name not in out:
            out.append(name)
    return out


def _block(feats: Any, name: str) -> np.ndarray:
    if name.startswith(SIDE + ":"):
        return feats.side_column(name.split(":", 1)[1])[:, None]
    return feats.block(name)


def _check_finite(m: np.ndarray, what: str) -> None:
    bad = ~np.isfinite(m)
    if bad.any():
        rows = np.flatnonzero(bad.any(axis=1))
        raise DataError(f"{what} has NaN or infinite values in {rows.size} row(s) (first: row {int(rows[0])})",
                        "recompute the features (lenpred features) or drop those prompts")


class AffineSpread:
    """sd(mu) = scale * max(alpha * mu + b, floor): the affine law, calibrated once on validation.

    Lengths are skewed to the right, so a symmetric interval around mu misses mostly above (on the
    reference run: 1.5% of the samples below q10, 17% above q90). ``tail_lo`` / ``tail_hi`` stretch the
    lower and upper half of the 80% interval separately so each tail holds 10% of the validation
    samples: q10 = mu - Z90 sd tail_lo, q90 = mu + Z90 sd tail_hi (the mean and sd stay the normal's)."""

    FLOOR = 1.0  # tokens: a distribution never collapses to a point
    WELL_MEASURED_K = 4  # samples a prompt needs for its mean and sd to carry the law on their own
    WELL_MEASURED_PROMPTS = 20

    def __init__(self, alpha: float, b: float, scale: float = 1.0, source: str = "affine",
                 tail_lo: float = 1.0, tail_hi: float = 1.0) -> None:
        self.alpha, self.b, self.scale, self.source = float(alpha), float(b), float(scale), source
        self.tail_lo, self.tail_hi = float(tail_lo), float(tail_hi)

    def __call__(self, mu: np.ndarray) -> np.ndarray:
        return self.scale * np.maximum(self.alpha * np.asarray(mu, dtype=np.float64) + self.b, self.FLOOR)

    def dist(self, mu: np.ndarray, cap: float | None) -> Dist:
        """The clipped normal at ``mu`` with this spread, its q10 / q90 moved by the tail factors."""
        sd = self(mu)
        d = clipped_normal(mu, sd, cap)
        q10, _, q90 = self.quantiles(mu, cap, sd)
        return Dist(d.mean, d.spread, q10, d.q50, q90)

    def quantiles(self, mu: np.ndarray, cap: float | None,
                  sd: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """q10, q50, q90 of :meth:`dist`, without the clipped normal's moments (what a service answers)."""
        mu = np.asarray(mu, dtype=np.float64)
        sd = self(mu) if sd is None else sd
        hi = np.inf if cap is None else float(cap)
        return (np.clip(mu - Z90 * sd * self.tail_lo, 0.0, hi), np.clip(mu, 0.0, hi),
                np.clip(mu + Z90 * sd * self.tail_hi, 0.0, hi))

    @classmethod
    def fit(cls, t: Targets, mu_train: np.ndarray) -> AffineSpread:
        """The law on the training prompts with >= 4 samples when there are 20 of them, else on those
        with >= 2; a law that is not positive over most of the training predictions (sd at the head's
        10th-percentile mu below the floor) is refused. Without a usable law, a constant sd from the
        head's own training residuals (1.4826 * their median absolute value).

        Why not every prompt: a run extended with many 2-sample prompts (the reference run: ~2,000 of
        them beside ~150 with 8 or 24) makes the errors-in-variables correction of
        :func:`lenpred.stats.affine.fit_affine` unstable -- with the 2-sample prompts the law came out
        as sd = 1.30 mu - 194, i.e. a 1-token interval below mu = 150, and the 80% intervals covered 67%."""
        from lenpred.stats.affine import fit_affine
        from lenpred.stats.config import BoundConfig

        k = t.counts
        ok = k >= cls.WELL_MEASURED_K
        if ok.sum() < cls.WELL_MEASURED_PROMPTS:
            ok = k >= 2
        if ok.sum() >= 3:
            mean, sd = t.mean()[ok], t.sd()[ok]
            if np.ptp(mean) > 0:
                # one bootstrap draw each: fit_affine's intervals are not used here, only its point fit
                one = BoundConfig(n_boot=1, n_boot_robust=1, ci=0.9)
                r = fit_affine(mean, sd, k[ok].astype(float), None, one, np.random.default_rng(0))
                if r.get("available") and np.isfinite(r["alpha"]) and np.isfinite(r["b"]):
                    law = cls(r["alpha"], r["b"], 1.0, "affine")
                    low_mu = float(np.quantile(np.asarray(mu_train, dtype=np.float64), 0.1))
                    if law.alpha * low_mu + law.b > cls.FLOOR:
                        return law
        row, y, _ = t.flat()
        return cls(0.0, 1.4826 * float(np.median(np.abs(y - mu_train[row]))), 1.0, "residuals")

    def calibrate(self, t: Targets, mu: np.ndarray) -> None:
        """Scale so the central 80% interval of the normal covers 80% of ``t``'s samples (weighted by
        prompt), then the tail factors so that 10% fall below q10 and 10% above q90. This is where the
        head's own error enters the width."""
        from lenpred.predictors.dist import weighted_quantile

        row, y, w = t.flat()
        sd0 = self(mu)[row] / self.scale  # the unscaled sd
        z = np.abs(y - mu[row]) / sd0
        self.scale = float(np.clip(weighted_quantile(z, w, 0.8) / Z90, 0.25, 4.0))
        zs = (y - mu[row]) / (sd0 * self.scale)  # signed, in units of the scaled sd
        lo, hi = weighted_quantile(zs, w, np.array([0.1, 0.9]))
        self.tail_lo = float(np.clip(-lo / Z90, 0.05, 4.0))
        self.tail_hi = float(np.clip(hi / Z90, 0.05, 4.0))

    def to_json(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "b": self.b, "scale": self.scale, "source": self.source,
                "tail_lo": self.tail_lo, "tail_hi": self.tail_hi}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AffineSpread:
        # heads saved before the tail factors: a symmetric interval, as they were trained
        return cls(d["alpha"], d["b"], d["scale"], d.get("source", "affine"), d.get("tail_lo", 1.0),
                   d.get("tail_hi", 1.0))


class Predictor:
    """Base class of every head. Subclasses define ``__init__`` (keyword hyperparameters stored as
    attributes of the same name), ``_fit``, ``_point`` and, with ``own_spread``, ``_dist``, plus
    ``_get_state`` / ``_set_state`` for their fitted arrays."""

    name: ClassVar[str] = ""  # registry key
    input_kind: ClassVar[str] = "features"  # "features" (Features or an (n, d) array) or "text" (proxy)
    own_spread: ClassVar[bool] = False  # True: the head's distribution is its own (no affine law)
    default_blocks: ClassVar[tuple[str, ...]] = ()

    # ---------------------------------------------------------------- hyperparameters
    @classmethod
    def param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p.name for p in sig.parameters.values() if p.name != "self"]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.param_names()}

    def set_params(self, **params: Any) -> Self:
        valid = self.param_names()
        for k, v in params.items():
            if k not in valid:
                raise ConfigError(f"{self.name} has no hyperparameter {k!r}", f"valid: {', '.join(valid) or '(none)'}")
            setattr(self, k, v)
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.get_params().items())})"

    def _check_params(self) -> None:
        """Validate hyperparameters (subclasses extend; raise through :func:`check_param`)."""

    # ---------------------------------------------------------------- inputs
    def _groups(self) -> dict[str, tuple[str, ...]]:
        """Block selectors per input group; heads with other groups (film: "c") override."""
        blocks = getattr(self, "blocks", None)
        if not self.default_blocks and blocks is None:
            return {}
        return {"x": tuple(self.default_blocks if blocks is None else blocks)}

    def _prepare(self, X: Any, fit: bool = False) -> Inputs:
        """Turn ``X`` into :class:`Inputs`; at ``fit`` record what was read, otherwise check it."""
        from lenpred.features.store import Features

        groups = self._groups()
        if isinstance(X, Features):
            if fit:
                self.blocks_ = {g: resolve_blocks(sel, X) for g, sel in groups.items()}
                self.widths_ = {g: [int(_block(X, b).shape[1]) for b in names] for g, names in self.blocks_.items()}
                self.feature_spec_ = dict(X.spec)
                self.side_names_ = list(X.side_names) if any(SIDE in v for v in self.blocks_.values()) else None
            else:
                self._check_features(X)
            mats = {g: np.concatenate([_block(X, b) for b in names], axis=1).astype(np.float32)
                    for g, names in self.blocks_.items()} if self.blocks_ else {}
            n = X.n
        else:
            if isinstance(X, str | bytes):
                raise DataError(f"{self.name}: X must be features or an (n, d) array, got a string",
                                "pass a features artifact (lenpred features) or an (n, d) array")
            m = np.asarray(X, dtype=np.float32) if not isinstance(X, np.ndarray) else X.astype(np.float32, copy=False)
            if m.ndim == 1:
                m = m[:, None]
            if m.ndim != 2:
                raise DataError(f"{self.name}: X must be (n, d), got shape {m.shape}", "pass one row of features per prompt")
            if set(groups) - {"x"}:
                raise DataError(f"{self.name} reads several block groups ({', '.join(groups)}): pass a Features object",
                                "load features with lenpred.features.load_features")
            if fit:
                self.blocks_, self.feature_spec_, self.side_names_ = None, None, None
                self.widths_ = {"x": [int(m.shape[1])]} if groups else {}
            elif groups and int(m.shape[1]) != sum(self.widths_["x"]):
                raise DataError(f"{self.name}: X has {m.shape[1]} columns, the head was trained on {sum(self.widths_['x'])}",
                                "pass the same kind of matrix the head was fitted on")
            mats = {"x": m} if groups else {}
            n = int(m.shape[0])
        for g, m in mats.items():
            _check_finite(m, f"{self.name} input ({', '.join(self.blocks_[g]) if self.blocks_ else 'X'})")
        return Inputs(n, mats.get("x"), mats.get("c"))

    def _check_features(self, X: Any) -> None:
        """Refuse features that differ from the ones the head was fitted on (spec, blocks, widths)."""
        if not self._groups():
            return  # a head that reads no block (constant) does not depend on the features
        if self.blocks_ is None:
            raise DataError(f"{self.name} head was fitted on a plain matrix, got Features",
                            "pass the matrix, or refit the head on Features")
        check_feature_spec(self.feature_spec_ or {}, X.spec, what=f"{self.name} head")
        for g, names in self.blocks_.items():
            for b, w in zip(names, self.widths_[g], strict=True):
                got = int(_block(X, b).shape[1])
                if got != w:
                    raise DataError(f"features block {b!r} has width {got}, the {self.name} head was trained on {w}",
                                    "use features computed with the head's feature spec")
        if self.side_names_ is not None and list(X.side_names) != self.side_names_:
            raise DataError(f"features have side features {list(X.side_names)}, the head was trained on {self.side_names_}",
                            "use features computed with the head's feature spec")

    # ---------------------------------------------------------------- the contract
    def fit(self, X: Any, y: Any, *, X_val: Any = None, y_val: Any = None) -> Self:
        for attr in [a for a in vars(self) if a.endswith("_") and not a.startswith("_")]:
            delattr(self, attr)  # a refit starts from nothing
        self._check_params()
        Z = self._prepare(X, fit=True)
        T = as_targets(y, Z.n, what="y")
        Zv = Tv = None
        if X_val is not None:
            Zv = self._prepare(X_val)
            Tv = as_targets(y_val, Zv.n, cap=T.cap, what="y_val")
        if T.n < 2:
            raise DataError(f"{self.name}: fit needs at least 2 training prompts, got {T.n}",
                            "train on a run (or split) with more training prompts")
        self.cap_ = T.cap
        t0 = time.perf_counter()
        self._fit(Z, T, Zv, Tv)
        self.n_train_ = T.n
        if not self.own_spread:
            self.spread_ = AffineSpread.fit(T, self._mu(Z))
            if Tv is not None:
                self.spread_.calibrate(Tv, self._mu(Zv))
        self.fit_seconds_ = time.perf_counter() - t0
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "n_train_"):
            raise NotFittedError(f"this {self.name} head is not fitted yet",
                                 "call fit(X, y) first, or load a trained head with lenpred.predictors.load_head(PATH)")

    def _mu(self, Z: Inputs) -> np.ndarray:
        hi = np.inf if self.cap_ is None else self.cap_
        return np.clip(np.asarray(self._point(Z), dtype=np.float64), 0.0, hi)

    def predict(self, X: Any) -> np.ndarray:
        """(n,) predicted total output tokens, in [0, cap]."""
        self._check_fitted()
        return self._mu(self._prepare(X))

    def predict_dist(self, X: Any) -> Dist:
        """Mean, spread and q10 / q50 / q90 per row (tokens)."""
        self._check_fitted()
        Z = self._prepare(X)
        if self.own_spread:
            return self._dist(Z)
        return self.spread_.dist(self._mu(Z), self.cap_)

    def predict_with_dist(self, X: Any) -> tuple[np.ndarray, Dist]:
        """:meth:`predict` and :meth:`predict_dist` of the same rows, the inputs read and the point computed
        once (what a service answers per request)."""
        self._check_fitted()
        Z = self._prepare(X)
        mu = self._mu(Z)
        return mu, (self._dist(Z) if self.own_spread else self.spread_.dist(mu, self.cap_))

    def predict_quantiles(self, X: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`predict` and the q10 / q50 / q90 of :meth:`predict_dist`, the inputs read once, without the
        distribution's mean and spread (what ``lenpred serve`` and the router's inline estimator answer)."""
        self._check_fitted()
        Z = self._prepare(X)
        mu = self._mu(Z)
        if self.own_spread:
            d = self._dist(Z)
            return mu, d.q10, d.q50, d.q90
        return (mu, *self.spread_.quantiles(mu, self.cap_))

    def save(self, path: Any, card: Mapping[str, Any] | None = None, meta: Mapping[str, Any] | None = None) -> Any:
        """Write the fitted head as an artifact (:mod:`lenpred.predictors.io`); returns the
        :class:`~lenpred.io.artifacts.Artifact`. ``card``: the training run's card (its model and
        sampling fields are kept); ``meta``: what training saw (recorded under ``train``)."""
        from lenpred.io.artifacts import ArtifactHeader, write_artifact

        self._check_fitted()
        tensors, info = self._get_state()
        tensors = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
        if not tensors:
            raise ValueError(f"{self.name} head has no fitted arrays to save")
        base = {k: getattr(self, k, None) for k in _SAVED_BASE}
        spread = self.spread_.to_json() if not self.own_spread else None
        params = {k: list(v) if isinstance(v, tuple) else v for k, v in self.get_params().items()}
        m = {"predictor": self.name, "params": params, "input_kind": self.input_kind,
             "feature_spec": base["feature_spec_"], "blocks": base["blocks_"], "widths": base["widths_"],
             "side_names": base["side_names_"], "cap": base["cap_"], "spread": spread,
             "train": {"n_prompts": base["n_train_"], "seconds": base["fit_seconds_"], **dict(meta or {})}}
        header = ArtifactHeader(kind=KIND, schema_version=SCHEMA_VERSION, config={"predictor": self.name, "params": params},
                                card=card, card_scope=CARD_SCOPE, meta=m)
        return write_artifact(path, header, tensors=tensors, json_files={STATE: info})

    # ---------------------------------------------------------------- hooks
    def _fit(self, Z: Inputs, T: Targets, Zv: Inputs | None, Tv: Targets | None) -> None:
        raise NotImplementedError

    def _point(self, Z: Inputs) -> np.ndarray:
        raise NotImplementedError

    def _dist(self, Z: Inputs) -> Dist:
        raise NotImplementedError

    def _get_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Fitted arrays (saved as tensors) and fitted scalars (saved as JSON) of the subclass."""
        raise NotImplementedError

    def _set_state(self, tensors: dict[str, np.ndarray], info: dict[str, Any]) -> None:
        raise NotImplementedError


def check_feature_spec(trained: Mapping[str, Any], given: Mapping[str, Any], what: str) -> None:
    """Every key of the spec a head was trained on must match the given features' (run-specific and
    writer keys such as the card hash or lenpred version excepted: a head may be applied to features
    of another prompt set computed the same way)."""
    for k in sorted(set(trained) | set(given)):
        if k in _SPEC_IGNORED:
            continue
        if trained.get(k) != given.get(k):
            raise DataError(f"features were computed under another feature spec than the {what} "
                            f"({k}: {given.get(k)!r} != {trained.get(k)!r})",
                            "compute features with the head's spec (same model, layers, pools), or retrain the head")
