"""``lenpred outlets train | predict | bench``: the remaining-length heads, their re-predictions, their bench.

* ``lenpred outlets train --traj TRAJ --run RUN --variant NAME --out HEAD``: fit an ``outlets`` head
  variant (:data:`lenpred.outlets.spec.VARIANTS`, ``--param k=v`` to change one) on the rows of
  the split's ``train`` prompts, early stopping and interval calibration on its ``val`` prompts; test
  prompts are never read. The head is saved with the run's model and sampling card and the
  trajectory spec (draft head, target).
* ``lenpred outlets predict --head HEAD --traj TRAJ --run RUN --out FILE.parquet``: a predictions
  table with re-predictions (:func:`lenpred.outlets.schedule.outlets_predictions`) for the simulator.
* ``lenpred outlets bench --traj TRAJ --run RUN --heads [NAME=]HEAD... --prefill-predictions
  [NAME=]FILE... --out DIR``: every method along the trajectory on the test prompts
  (:mod:`lenpred.outlets.evaluate`); writes ``outlets_bench.json`` (schema in
  ``outlets_bench.schema.json`` and docs/outlets.md), ``outlets_bench.md`` and the plots.

Each raises :class:`~lenpred.errors.LenpredError` before writing anything when an input is wrong.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lenpred.errors import ConfigError, DataError

__all__ = ["add_train_arguments", "run_train", "add_predict_arguments", "run_predict", "add_bench_arguments",
           "run_bench", "predict_table", "train_variant"]


def _named(items: Sequence[str]) -> list[tuple[str | None, str]]:
    out = []
    for it in items:
        name, sep, path = it.partition("=")
        out.append((name or None, path) if sep else (None, it))
    return out


def _check_out(out: Path, what: str = "--out") -> None:
    from lenpred.artifacts import is_artifact

    if out.exists() and not out.is_dir():
        raise DataError(f"{what} {out} exists and is a file", "pass a directory path")
    if out.is_dir() and any(out.iterdir()) and not is_artifact(out):
        raise DataError(f"{what} {out} is a non-empty directory that is not a lenpred artifact", "pass a new or empty directory")


# ---------------------------------------------------------------- train
def add_train_arguments(p: argparse.ArgumentParser) -> None:
    from lenpred.outlets.spec import VARIANTS

    p.add_argument("--traj", required=True, help="trajectory features (lenpred outlets features) of --run")
    p.add_argument("--run", required=True, help="run directory (its split.json says which prompts are train / val)")
    p.add_argument("--variant", default="outlets", help=f"head variant: {', '.join(VARIANTS)} (default %(default)s)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="override a hyperparameter")
    p.add_argument("--out", required=True, help="head directory to write")
    p.add_argument("--split", default=None, help="split file (default RUN/split.json)")
    p.add_argument("--no-early-stopping", action="store_true", help="train all epochs; read no validation prompt")


def train_variant(traj_path: str, run: str, variant: str, params: dict[str, Any] | None = None,
                  out: str | None = None, split: str | None = None, early_stopping: bool = True) -> tuple[Any, dict[str, Any]]:
    """Fit one variant on the split's train rows (val for early stopping) and save it to ``out``."""
    import numpy as np

    from lenpred.data.rundir import RunDir
    from lenpred.data.split import load_split
    from lenpred.outlets.store import load_trajectory
    from lenpred.outlets.spec import VARIANTS, row_weights
    from lenpred.predictors.pipeline import run_cap
    from lenpred.predictors.registry import make_predictor

    if variant not in VARIANTS:
        raise ConfigError(f"unknown outlets variant {variant!r}", f"use one of: {', '.join(VARIANTS)}")
    if out is not None:
        _check_out(Path(out))
    head = make_predictor("outlets", {**VARIANTS[variant], **(params or {})})
    head._check_params()
    rd = RunDir.open(run)
    traj = load_trajectory(traj_path, card=rd.card)  # features of another run: refused first
    sp = load_split(rd, split, require_complete=False)
    train = traj.for_prompts(sorted(sp.train))
    sp.check_no_test(train.index["prompt_id"].unique(), what="outlets training rows")
    if train.n == 0:
        raise DataError(f"trajectory {traj_path} has no row of a training prompt of {rd.path}",
                        "compute trajectory features with --roles train,val,test")
    val = traj.for_prompts(sorted(sp.val)) if early_stopping else None
    if val is not None and val.n == 0:
        val = None
    head.fit(train, X_val=val, cap=run_cap(rd.card))
    val_mae = None
    if val is not None:
        val_mae = float(np.average(np.abs(head.predict(val) - val.index["remaining"].to_numpy(float)),
                                   weights=row_weights(val.index)))
    info = {"variant": variant, "run": str(rd.path), "card_hash": rd.card_hash, "trajectory": str(traj_path),
            "n_rows": int(train.n), "n_samples": int(len(train.index[["prompt_id", "sample_idx"]].drop_duplicates())),
            "val_prompts": int(val.index["prompt_id"].nunique()) if val is not None else 0, "val_mae": val_mae,
            "seconds": float(head.fit_seconds_), "train_log": head.train_log_}
    if out is not None:
        head.save(out, card=rd.card, meta=info)
    return head, info


def run_train(a: argparse.Namespace) -> int:
    from lenpred.predictors.pipeline import parse_params

    head, info = train_variant(a.traj, a.run, a.variant, parse_params(a.param), a.out, a.split,
                               early_stopping=not a.no_early_stopping)
    vm = "-" if info["val_mae"] is None else f"{info['val_mae']:.1f}"
    print(f"outlets train: {a.variant} on {head.n_train_} prompts ({info['n_rows']} rows) in {info['seconds']:.1f} s; "
          f"validation MAE {vm} tokens (remaining, weighted by prompt) -> {a.out}")
    return 0


# ---------------------------------------------------------------- predict
def add_predict_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--head", required=True, help="outlets head (lenpred outlets train)")
    p.add_argument("--traj", required=True, help="trajectory features of --run")
    p.add_argument("--run", required=True, help="run directory")
    p.add_argument("--out", required=True, help="predictions file to write (.parquet)")
    p.add_argument("--roles", default="test", help="split roles whose samples to predict (default %(default)s)")
    p.add_argument("--split", default=None, help="split file (default RUN/split.json)")


def predict_table(head_path: str, traj_path: str, run: str, roles: Sequence[str] = ("test",),
                  split: str | None = None) -> Any:
    from lenpred.data.rundir import RunDir
    from lenpred.data.split import ROLES, load_split
    from lenpred.outlets.schedule import outlets_predictions
    from lenpred.outlets.store import load_trajectory
    from lenpred.predictors.io import read_head

    bad = sorted(set(roles) - set(ROLES))
    if bad or not roles:
        raise ConfigError(f"unknown split role(s) {bad or list(roles)}", f"roles are {', '.join(ROLES)}")
    rd = RunDir.open(run)
    head, art = read_head(head_path, card=rd.card)
    if head.name != "outlets":
        raise DataError(f"{head_path} is a {head.name} head, not an outlets head", "use `lenpred predict` for prefill heads")
    sp = load_split(rd, split, require_complete=False)
    traj = load_trajectory(traj_path, card=rd.card)
    want = sorted(set().union(*(sp.ids(r) for r in roles)))
    sub = traj.for_prompts(want)
    if sub.n == 0:
        raise DataError(f"trajectory {traj_path} has no row of a prompt of role {', '.join(roles)}",
                        "compute trajectory features for those prompts")
    variant = (art.meta.get("train") or {}).get("variant") or "outlets"
    return outlets_predictions(head, sub, rd.card, source=str(head_path), variant=variant)


def run_predict(a: argparse.Namespace) -> int:
    out = Path(a.out)
    if out.is_dir():
        raise DataError(f"{out} is a directory", "pass a file path ending in .parquet")
    roles = [r.strip() for r in a.roles.split(",") if r.strip()]
    preds = predict_table(a.head, a.traj, a.run, roles, a.split)
    path = preds.write(out)
    n_rep = int(preds.frame["repred_gen"].map(len).sum())
    print(f"outlets predict: {len(preds)} samples, {n_rep} re-predictions -> {path}")
    return 0


# ---------------------------------------------------------------- bench
def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--traj", required=True, help="trajectory features of --run (its test prompts are scored)")
    p.add_argument("--run", required=True, help="run directory (split, lengths for the oracle and the bound)")
    p.add_argument("--heads", nargs="*", default=[], metavar="[NAME=]HEAD",
                   help="outlets heads, the probe variant included (name default: the variant trained)")
    p.add_argument("--prefill-predictions", nargs="*", default=[], metavar="[NAME=]FILE",
                   help="prefill predictions tables (lenpred predict), carried along the trajectory")
    p.add_argument("--reference", default=None, help="method the ratios use (default: best carried prefill head at t=0)")
    p.add_argument("--out", required=True, help="report folder (an artifact directory)")
    p.add_argument("--split", default=None, help="split file (default RUN/split.json)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples of prompts for intervals")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-plots", action="store_true")


def run_bench(a: argparse.Namespace) -> int:
    import tempfile

    from lenpred.artifacts import write_artifact
    from lenpred.outlets.evaluate import OutletsBench, run_bench
    from lenpred.report.outlets import render_markdown, write_plots

    out = Path(a.out)
    _check_out(out)
    if not a.heads and not a.prefill_predictions:
        raise ConfigError("nothing to bench", "pass --heads HEAD... and/or --prefill-predictions FILE...")
    res = run_bench(a.traj, a.run, heads=_named(a.heads), prefill=_named(a.prefill_predictions), split=a.split,
                    reference=a.reference, n_boot=a.n_boot, seed=a.seed)
    md = render_markdown(res)
    files = {"outlets_bench.md": md.encode()}
    if not a.no_plots:
        with tempfile.TemporaryDirectory() as tmp:
            for path in write_plots(res, Path(tmp)):
                files[path.name] = path.read_bytes()
    from lenpred.data.rundir import RunDir

    config = {k: getattr(a, k) for k in ("traj", "run", "heads", "prefill_predictions", "reference", "split", "n_boot",
                                         "seed")}
    art = write_artifact(out, kind="outlets-bench", schema_version=1, config=config, card=RunDir.open(a.run).card,
                         card_scope="run", json_files={"outlets_bench.json": res.to_dict(),
                                                       "outlets_bench.schema.json": OutletsBench.json_schema()},
                         files=files)
    print(md)
    print(f"report: {art.path}/outlets_bench.md")
    return 0
