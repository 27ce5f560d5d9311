"""Train a head on a run's split, and predict a run with a trained head (what ``train`` / ``predict`` call).

Training reads the run's lengths (:func:`lenpred.data.lengths.sample_lengths`), its split
(:func:`lenpred.data.split.load_split`) and a features artifact of the same run; it fits on the
split's ``train`` prompts, stops early on its ``val`` prompts, and refuses any test prompt. The
head is saved with the run's model and sampling card fields (scope ``model+sampling``).

Prediction checks the head against the run (same model and sampling card; another prompt set is a
transfer evaluation and allowed), the features against the run (scope ``run``) and against the
head (feature spec, blocks, widths), and returns a :class:`~lenpred.predictions.Predictions` table
with one row per prompt (``sample_idx`` -1), the point prediction and the q10 / q50 / q90 interval.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lenpred.errors import ConfigError, DataError
from lenpred.predictors.base import Predictor
from lenpred.predictors.targets import Targets

__all__ = ["TrainReport", "TrainPrompts", "train_on_run", "predict_run", "run_cap", "ROLES"]

ROLES = ("train", "val", "test")
PathLike = str | os.PathLike[str]


@dataclass
class TrainReport:
    predictor: str
    params: dict[str, Any]
    run: str
    card_hash: str
    n_train: int
    n_train_samples: int
    n_val: int
    n_val_samples: int
    unassigned: int  # prompts with samples that the split does not cover yet (not used)
    seconds: float
    val_mae: float | None  # mean absolute error over the validation samples (tokens)
    val_mae_constant: float | None  # the training median on the same validation samples, for scale
    train_log: dict[str, Any] | None = None
    head: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_cap(card: dict[str, Any]) -> float | None:
    v = (card.get("sampling") or {}).get("max_new_tokens")
    return float(v) if v is not None else None


def _roles(roles: Sequence[str]) -> tuple[str, ...]:
    bad = sorted(set(roles) - set(ROLES))
    if bad or not roles:
        raise ConfigError(f"unknown split role(s) {bad or roles!r}", f"roles are {', '.join(ROLES)}")
    return tuple(dict.fromkeys(roles))


def _inputs(head: Predictor, rd: Any, feats: Any, ids: list[str]) -> Any:
    """What ``head`` reads for prompts ``ids``: a Features subset, or the prompts' texts (proxy)."""
    if head.input_kind == "text":
        p = rd.prompts().set_index("prompt_id")
        missing = [i for i in ids if i not in p.index]
        if missing:
            raise DataError(f"{rd.path}: {len(missing)} prompt(s) have no text (first: {missing[0]!r})",
                            "pass the run the predictions or features were made from (its prompt table has them)")
        return p.loc[ids, "text"].astype(str).tolist()
    return feats.subset(ids)


def _features(head: Predictor, rd: Any, features: PathLike | None) -> Any:
    if head.input_kind == "trajectory":
        raise ConfigError(f"the {head.name} head reads trajectory features, not prefill features",
                          "train it with `lenpred outlets train`, predict with `lenpred outlets predict`")
    if head.input_kind != "features":
        return None
    if features is None:
        raise ConfigError(f"the {head.name} head reads hidden-state features: pass --features FEATS",
                          f"compute them with `lenpred features --run {rd.path} --out FEATS`")
    from lenpred.features.store import load_features

    return load_features(features, card=rd.card)


def features_for_heads(heads: Sequence[PathLike], run: PathLike, out: PathLike, *, threads: int | None = None,
                       progress: bool = True) -> Path | None:
    """Compute (or resume, or find up to date) the features the hidden-state ``heads`` read, for ``run``'s
    prompts, into ``out``, under the heads' own feature spec (layers, poolings, dtypes, context cut).
    Returns ``out``, or None when no head reads prefill features. Heads of different specs are refused:
    their features cannot share one artifact."""
    from lenpred.features.build import compute_features
    from lenpred.features.prefill import FeatureConfig
    from lenpred.features.store import spec_diff, spec_key
    from lenpred.io.artifacts import load_artifact
    from lenpred.predictors.io import KIND, SCHEMA_VERSION

    spec: dict[str, Any] | None = None
    first = None
    for h in heads:
        # the header alone says what a head reads (predict_run loads and verifies the head itself)
        meta = load_artifact(h, kind=KIND, schema_versions=(SCHEMA_VERSION,), verify=False, what="head").meta
        if meta.get("input_kind") != "features":
            continue
        s = meta.get("feature_spec") or {}
        if spec is None:
            spec, first = s, h
        elif spec_key(s) != spec_key(spec):
            raise ConfigError(f"heads {first} and {h} were trained on different feature specs "
                              f"({spec_diff(spec_key(s), spec_key(spec))})",
                              "bench them in separate runs, or compute each run's features and pass --features")
    if spec is None:
        return None
    compute_features(run, out, FeatureConfig.from_spec(spec, threads=threads), progress=progress)
    return Path(out)


@dataclass(frozen=True)
class TrainPrompts:
    """Which prompts of a run a head trains on: the split file (None: the run's own ``split.json``), the
    split ``roles`` it fits (never ``test``), and whether the ``val`` prompts stop it early (when they
    are not among ``roles``)."""

    split: PathLike | None = None
    roles: Sequence[str] = ("train",)
    early_stopping: bool = True


def train_on_run(
    name: str,
    params: dict[str, Any] | None,
    run: PathLike,
    features: PathLike | None = None,
    out: PathLike | None = None,
    prompts: TrainPrompts | None = None,
) -> tuple[Predictor, TrainReport]:
    """Fit head ``name`` on the ``prompts`` of ``run`` (default ``TrainPrompts()``: the split's train
    prompts, early stopping on its val prompts) and save it to ``out``."""
    from lenpred.data.lengths import sample_lengths
    from lenpred.data.rundir import RunDir
    from lenpred.data.split import load_split
    from lenpred.predictors.registry import make_predictor

    prompts = prompts or TrainPrompts()
    head = make_predictor(name, params)
    roles = _roles(prompts.roles)
    rd = RunDir.open(run)
    sp = load_split(rd, prompts.split, require_complete=False)
    train_ids = sorted(set().union(*(sp.ids(r) for r in roles)))
    sp.check_no_test(train_ids, what=f"training data (roles {', '.join(roles)})")
    val_ids = sorted(sp.val) if prompts.early_stopping and "val" not in roles else []
    if len(train_ids) < 2:
        raise DataError(f"the split of {rd.path} has {len(train_ids)} prompt(s) in {', '.join(roles)}",
                        "collect more prompts, or re-run `lenpred split`")
    lengths = sample_lengths(rd, with_prompts=False)
    unassigned = int(len(set(lengths["prompt_id"].unique()) - set(sp.roles)))
    cap = run_cap(rd.card)
    feats = _features(head, rd, features)
    T = Targets.from_lengths(lengths, train_ids, cap)
    Tv = Targets.from_lengths(lengths, val_ids, cap) if val_ids else None
    Xv = _inputs(head, rd, feats, val_ids) if val_ids else None
    head.fit(_inputs(head, rd, feats, train_ids), T, X_val=Xv, y_val=Tv)
    val_mae = val_const = None
    if Tv is not None:
        # per sample, as bench scores the test split (early stopping weights prompts equally instead)
        row, yv, _ = Tv.flat()
        val_mae = float(np.mean(np.abs(head.predict(Xv)[row] - yv)))
        _, y, w = T.flat()
        from lenpred.predictors.dist import weighted_quantile

        val_const = float(np.mean(np.abs(float(weighted_quantile(y, w, 0.5)) - yv)))
    report = TrainReport(
        predictor=name, params={k: list(v) if isinstance(v, tuple) else v for k, v in head.get_params().items()},
        run=str(rd.path), card_hash=rd.card_hash, n_train=T.n, n_train_samples=int(T.counts.sum()),
        n_val=0 if Tv is None else Tv.n, n_val_samples=0 if Tv is None else int(Tv.counts.sum()),
        unassigned=unassigned, seconds=float(head.fit_seconds_), val_mae=val_mae, val_mae_constant=val_const,
        train_log=getattr(head, "train_log_", None),
    )
    if out is not None:
        meta = {"run": str(rd.path), "card_hash": rd.card_hash, "roles": list(roles), "val_prompts": report.n_val,
                "n_samples": report.n_train_samples, "val_mae": val_mae}
        head.save(out, card=rd.card, meta=meta)
        report.head = str(out)
    return head, report


@dataclass
class PredictReport:
    predictor: str
    n_prompts: int
    transfer: bool  # the run is not the one the head was trained on (same model and sampling card)
    head_run: str | None
    seconds: float


def predict_run(
    head_path: PathLike,
    run: PathLike,
    features: PathLike | None = None,
    roles: Sequence[str] | None = None,
    split: PathLike | None = None,
) -> tuple[Any, PredictReport]:
    """Predictions of the head at ``head_path`` for every prompt of ``run`` (or of the split's ``roles``)."""
    import time

    from lenpred.data.rundir import RunDir
    from lenpred.predictions import Predictions
    from lenpred.predictors.io import read_head

    rd = RunDir.open(run)
    head, art = read_head(head_path, card=rd.card)
    feats = _features(head, rd, features)
    if head.input_kind == "text":
        ids = rd.prompts()["prompt_id"].astype(str).tolist()
    else:
        ids = feats.prompt_ids.tolist()
    if roles is not None:
        from lenpred.data.split import load_split

        sp = load_split(rd, split, require_complete=False)
        want = set().union(*(sp.ids(r) for r in _roles(roles)))
        ids = [i for i in ids if i in want]
        if not ids:
            raise DataError(f"no prompt of {rd.path} has role {', '.join(roles)}", "check --roles and the run's split")
    X = _inputs(head, rd, feats, ids) if (roles is not None or head.input_kind == "text") else feats
    t0 = time.perf_counter()
    point = head.predict(X)
    dist = head.predict_dist(X)
    seconds = time.perf_counter() - t0
    train = art.meta.get("train") or {}
    transfer = art.meta.get("card_hash") != rd.card_hash
    preds = Predictions.from_frame(
        dist.frame(np.asarray(ids), point), made_by=head.name,
        config={"head": str(head_path), "predictor": head.name, "params": art.meta.get("params")}, card=rd.card,
        extra={"head_card_hash": art.meta.get("card_hash"), "head_run": train.get("run"), "transfer": transfer},
    )
    return preds, PredictReport(head.name, len(ids), transfer, train.get("run"), seconds)


def parse_params(items: Sequence[str]) -> dict[str, Any]:
    """``k=v`` strings -> dict; v is JSON where it parses (numbers, true/false, lists), else a string."""
    import json

    out: dict[str, Any] = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k.strip():
            raise ConfigError(f"--param {it!r} is not KEY=VALUE", "e.g. --param hidden=128 --param blocks=15.mean,30.last")
        try:
            out[k.strip()] = json.loads(v)
        except json.JSONDecodeError:
            out[k.strip()] = v
    return out

