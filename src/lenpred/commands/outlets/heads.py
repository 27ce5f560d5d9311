"""``lenpred outlets train`` / ``predict`` / ``anchor``: a head variant, its predictions table, its prefill anchor."""

from __future__ import annotations

import argparse
from pathlib import Path

from lenpred.errors import ConfigError, DataError


# ------------------------------------------------------------------------------------------ train
def add_train_arguments(p: argparse.ArgumentParser) -> None:
    from lenpred.outlets.spec import VARIANTS

    p.add_argument("--traj", required=True, help="trajectory features (lenpred outlets features) of --run")
    p.add_argument("--run", required=True, help="run directory (its split.json says which prompts are train / val)")
    p.add_argument("--variant", default="outlets", help=f"head variant: {', '.join(VARIANTS)} (default %(default)s)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="override a hyperparameter")
    p.add_argument("--out", required=True, help="head directory to write")
    p.add_argument("--split", default=None, help="split file (default RUN/split.json)")
    p.add_argument("--no-early-stopping", action="store_true", help="train all epochs; read no validation prompt")


def run_train(a: argparse.Namespace) -> int:
    from lenpred.outlets.pipeline import train_variant
    from lenpred.predictors.pipeline import parse_params

    head, info = train_variant(a.traj, a.run, a.variant, parse_params(a.param), a.out, a.split,
                               early_stopping=not a.no_early_stopping)
    vm = "-" if info["val_mae"] is None else f"{info['val_mae']:.1f}"
    print(f"outlets train: {a.variant} on {head.n_train_} prompts ({info['n_rows']} rows) in {info['seconds']:.1f} s; "
          f"validation MAE {vm} tokens (remaining, weighted by prompt) -> {a.out}")
    return 0


# ------------------------------------------------------------------------------------------ predict
def add_predict_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--head", required=True, help="outlets head (lenpred outlets train), its prefill anchor (lenpred outlets "
                                                 "anchor) or a counter head (lenpred outlets counters)")
    p.add_argument("--traj", default=None, help="trajectory features of --run (an outlets head; a counter head reads the run)")
    p.add_argument("--prefill-predictions", default=None, metavar="[NAME=]FILE",
                   help="a prefill anchor, or a counter head that reads a prefill head's prediction: that head's "
                        "table on these roles")
    p.add_argument("--live-every", type=int, default=None, metavar="K",
                   help="a counter head: re-predict every K tokens too (default: t = 16, 32, 64, ...)")
    p.add_argument("--run", required=True, help="run directory")
    p.add_argument("--out", required=True, help="predictions file to write (.parquet)")
    p.add_argument("--roles", default="test", help="split roles whose samples to predict (default %(default)s)")
    p.add_argument("--split", default=None, help="split file (default RUN/split.json)")


def run_predict(a: argparse.Namespace) -> int:
    from lenpred.outlets.pipeline import predict_table

    out = Path(a.out)
    if out.is_dir():
        raise DataError(f"{out} is a directory", "pass a file path ending in .parquet")
    roles = [r.strip() for r in a.roles.split(",") if r.strip()]
    if _is_counter_head(a.head):
        from lenpred.outlets.counters import predict_counter_files

        preds = predict_counter_files(a.head, a.run, roles, prefill=a.prefill_predictions, every=a.live_every,
                                      split=a.split)
    elif a.traj is None:
        raise ConfigError(f"--head {a.head} is an outlets head: it reads trajectory features",
                          "pass --traj TRAJ (lenpred outlets features of --run)")
    else:
        preds = predict_table(a.head, a.traj, a.run, roles, a.split, prefill=a.prefill_predictions)
    path = preds.write(out)
    n_rep = int(preds.frame["repred_gen"].map(len).sum())
    print(f"outlets predict: {len(preds)} samples, {n_rep} re-predictions -> {path}")
    return 0


def _is_counter_head(path: str) -> bool:
    import json

    meta = Path(path) / "meta.json"
    try:
        return bool(json.loads(meta.read_text()).get("kind") == "outlets-counters")
    except (OSError, ValueError):
        return False


# ------------------------------------------------------------------------------------------ anchor
def add_anchor_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--traj", required=True, help="trajectory features of --run with its validation prompts' rows")
    p.add_argument("--run", required=True, help="run directory (its split names the validation prompts)")
    p.add_argument("--head", required=True, help="the OUTLETS head to anchor")
    p.add_argument("--prefill-predictions", required=True, metavar="[NAME=]FILE",
                   help="the prefill head's predictions table on the validation prompts (lenpred predict --roles val)")
    p.add_argument("--bands", default="0,1,32,128,512", help="progress bands: token counts from 0")
    p.add_argument("--split", default=None, help="split file (default RUN/split.json)")
    p.add_argument("--out", required=True, help="anchor directory (an outlets-anchor artifact)")


def run_anchor(a: argparse.Namespace) -> int:
    from lenpred.outlets.anchor import fit_anchor_files

    try:
        bands = tuple(int(x) for x in a.bands.split(","))
    except ValueError:
        raise ConfigError(f"--bands {a.bands!r} is not a comma-separated list of token counts",
                          "e.g. --bands 0,1,32,128,512") from None
    anc = fit_anchor_files(a.traj, a.run, a.head, a.prefill_predictions, a.out, bands=bands, split=a.split)
    for b, w, s in zip(anc.bands, anc.weights, anc.scales, strict=True):
        v = anc.val.get(str(b), {})
        maes = (f"val MAE prefill {v['mae_prefill']:.1f} / outlets {v['mae_outlets']:.1f} / anchored "
                f"{v['mae_anchored']:.1f}" if "mae_anchored" in v else v.get("note", ""))
        print(f"t >= {b:>4}: weight on OUTLETS {w:.2f}, interval x{s:.2f}, {v.get('rows', 0)} rows; {maes}")
    print(f"anchor: {a.out}")
    return 0


# ------------------------------------------------------------------------------------------ counters
def add_counters_arguments(p: argparse.ArgumentParser) -> None:
    from lenpred.outlets.counters import KINDS

    p.add_argument("--run", required=True, help="run directory (its split: train prompts fit, val prompts stop and calibrate)")
    p.add_argument("--out", required=True, help="counter head directory to write (an outlets-counters artifact)")
    p.add_argument("--kind", default="quantile", choices=KINDS,
                   help="quantile: three pinball-loss tree ensembles; hazard: a discrete-time hazard over log bins")
    p.add_argument("--prefill-predictions", default=None, metavar="[NAME=]FILE",
                   help="also read a prefill head's prediction (a table covering the train and val prompts: "
                        "lenpred predict --roles train,val)")
    p.add_argument("--live-every", type=int, default=None, metavar="K",
                   help="train on t = K, 2K, ... too (default: the live series t = 0, 16, 32, 64, ...)")
    p.add_argument("--model", default=None, help="tokenizer to read token texts with (default: the run card's model)")
    p.add_argument("--split", default=None, help="split file (default RUN/split.json)")
    p.add_argument("--seed", type=int, default=0)


def run_counters(a: argparse.Namespace) -> int:
    import sys
    import time

    from lenpred.outlets.counters import train_counter_files

    t0 = time.perf_counter()
    head = train_counter_files(a.run, a.out, kind=a.kind, prefill=a.prefill_predictions, every=a.live_every,
                               split=a.split, seed=a.seed, model=a.model,
                               progress=lambda m: print(m, file=sys.stderr, flush=True))
    rows = head.info["rows"]
    print(f"outlets counters: {head.kind} head on {rows['fit']} live rows ({head.info['samples']['fit']} samples), "
          f"stopped on {rows['stop']}, calibrated on {rows['cal']} in {time.perf_counter() - t0:.1f} s; "
          f"80% interval widening (log) pooled {head.calibration['pooled']:+.3f} -> {a.out}")
    return 0
