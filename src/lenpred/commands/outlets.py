"""``lenpred outlets``: OUTLETS -- trajectory features from the draft backbone, remaining-length heads, their bench.

The flags of each subcommand and the call into :mod:`lenpred.outlets.pipeline` (the library half):

* ``lenpred outlets features --run RUN --draft HEAD --out TRAJ``: teacher-force the run's samples
  (roles of the split) through the target and the draft head and keep rows at sampled decoding
  positions (docs/outlets.md); resumable, ``--shard I/N`` and ``--merge``;
* ``lenpred outlets train --traj TRAJ --run RUN --variant NAME --out HEAD``: a head variant on the
  split's train rows (val: early stopping);
* ``lenpred outlets predict --head HEAD --traj TRAJ --run RUN --out FILE.parquet``: a predictions table
  with trajectory re-predictions (for the simulator);
* ``lenpred outlets bench --traj TRAJ --run RUN --heads [NAME=]HEAD... --prefill-predictions
  [NAME=]FILE... --out DIR``: every method along the trajectory on the test prompts;
* ``lenpred outlets schedule --run RUN --traj TRAJ --outlets-head HEAD --prefill-predictions FILE
  --out DIR``: the simulator's value-for-scheduling experiment (experiments/outlets/schedule.json).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lenpred.errors import ConfigError, DataError


def _say(action: str) -> Callable[[str], None]:
    def say(msg: str) -> None:
        print(f"lenpred outlets {action}: {msg}", file=sys.stderr, flush=True)

    return say


# ------------------------------------------------------------------------------------------ features
def add_features_arguments(p: argparse.ArgumentParser) -> None:
    from lenpred.config import add_arguments as config_flags
    from lenpred.outlets.features import TrajectoryConfig

    p.add_argument("--run", default=None, help="run directory with token ids and a split (read only)")
    p.add_argument("--draft", default=None, help="EAGLE-3 draft head directory (its target must be the run's model)")
    p.add_argument("--out", default=None,
                   help="trajectory artifact directory to write (default: $LENPRED_HOME/trajectories/RUN--DRAFT--ROLES)")
    p.add_argument("--merge", nargs="+", default=None, metavar="SHARD",
                   help="merge these shard outputs (of --shard I/N runs) into --out instead of computing")
    p.add_argument("--roles", default="train,val,test", help="split roles whose prompts to compute (default %(default)s)")
    p.add_argument("--shard", default=None, metavar="I/N", help="compute only slice I of N of the prompts (0 <= I < N)")
    p.add_argument("--model", default=None, help="target model (default: the run card's model; its fingerprint must match)")
    p.add_argument("--cache", default=None, metavar="DIR",
                   help="read and fill this draft-training state cache (logits included, float16 states) instead of "
                        "the states-only pass (default: no cache; the target's states only, in --compute-dtype)")
    p.add_argument("--max-prompts", type=int, default=None, help="only the first N prompts of each role (smoke runs)")
    p.add_argument("--max-samples-per-prompt", type=int, default=None, help="at most N samples of each prompt")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default; default %(default)s)")
    p.add_argument("--device", default="cpu", help="torch device for the target and the draft (cpu, cuda, ...)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    config_flags(p.add_argument_group("trajectory options"), TrajectoryConfig)


def run_features(a: argparse.Namespace) -> int:
    from lenpred.config import from_arguments
    from lenpred.outlets.features import TrajectoryConfig
    from lenpred.outlets.pipeline import features

    cfg = None
    if a.merge is None and a.run is not None and a.draft is not None:
        cfg = from_arguments(TrajectoryConfig, a, where="outlets features")
        if a.threads > 0:
            import torch

            torch.set_num_threads(a.threads)
    say = _say("features")
    say(features(a.out, run=a.run, draft=a.draft, merge=a.merge, cfg=cfg, roles=a.roles, shard=a.shard,
                 model=a.model, cache=a.cache, max_prompts=a.max_prompts,
                 max_samples_per_prompt=a.max_samples_per_prompt, device=a.device, progress=not a.no_progress,
                 log=say))
    return 0


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
    p.add_argument("--head", required=True, help="outlets head (lenpred outlets train)")
    p.add_argument("--traj", required=True, help="trajectory features of --run")
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
    preds = predict_table(a.head, a.traj, a.run, roles, a.split)
    path = preds.write(out)
    n_rep = int(preds.frame["repred_gen"].map(len).sum())
    print(f"outlets predict: {len(preds)} samples, {n_rep} re-predictions -> {path}")
    return 0


# ------------------------------------------------------------------------------------------ bench
def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--traj", required=True, help="trajectory features of --run (its test prompts are scored)")
    p.add_argument("--run", required=True, help="run directory (split, lengths for the oracle and the bound)")
    p.add_argument("--heads", nargs="*", default=[], metavar="[NAME=]HEAD",
                   help="outlets heads, the probe variant included (name default: the variant trained)")
    p.add_argument("--prefill-predictions", nargs="*", default=[], metavar="[NAME=]FILE",
                   help="prefill predictions tables (lenpred predict), carried along the trajectory")
    p.add_argument("--anchors", nargs="*", default=[], metavar="[NAME=]ANCHOR",
                   help="prefill anchors (lenpred outlets anchor): their head and prefill table blended by progress band")
    p.add_argument("--reference", default=None, help="method the ratios use (default: best carried prefill head at t=0)")
    p.add_argument("--out", required=True, help="report folder (an artifact directory)")
    p.add_argument("--split", default=None, help="split file (default RUN/split.json)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples of prompts for intervals")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-plots", action="store_true")


def run_bench(a: argparse.Namespace) -> int:
    from lenpred.outlets.pipeline import bench
    from lenpred.report.outlets import write_bench

    done = bench(a.traj, a.run, a.out, heads=a.heads, prefill_predictions=a.prefill_predictions, anchors=a.anchors,
                 reference=a.reference, split=a.split, n_boot=a.n_boot, seed=a.seed)
    art, md = write_bench(done, a.out, plots=not a.no_plots)
    print(md)
    print(f"report: {art.path}/outlets_bench.md")
    return 0


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


# ------------------------------------------------------------------------------------------ schedule
def add_schedule_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="experiments/outlets/schedule.json", help="simulator config with placeholders")
    p.add_argument("--run", required=True, help="run directory (its split gives the test prompts)")
    p.add_argument("--prefill-predictions", required=True, help="the best prefill head's table (lenpred predict)")
    p.add_argument("--outlets-head", default=None, help="outlets head: its re-predictions are made here")
    p.add_argument("--traj", default=None, help="trajectory features of the run (with --outlets-head)")
    p.add_argument("--outlets-predictions", default=None, help="or: an outlets table already made (lenpred outlets predict)")
    p.add_argument("--split", default=None, help="split file (default RUN/split.json)")
    p.add_argument("--requests", type=int, default=None, help="override workload.n_requests (smoke runs)")
    p.add_argument("--loads", default=None, help="override sweep.loads, comma-separated (smoke runs)")
    p.add_argument("--out", required=True, help="result folder")


def run_schedule(a: argparse.Namespace) -> int:
    from lenpred.checks import parse_loads
    from lenpred.outlets.pipeline import schedule
    from lenpred.report.outlets import write_schedule

    loads = parse_loads(a.loads) if a.loads else None
    res = schedule(a.run, a.prefill_predictions, a.out, config=a.config, outlets_head=a.outlets_head, traj=a.traj,
                   outlets_predictions=a.outlets_predictions, split=a.split, n_requests=a.requests, loads=loads,
                   progress=lambda m: print(m, file=sys.stderr, flush=True))
    print(write_schedule(res, a.out))
    print(f"results: {a.out}/results.json ({res.wall_s:.1f} s)")
    return 0


# ------------------------------------------------------------------------------------------ the table
@dataclass(frozen=True)
class Subcommand:
    add: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    help: str


SUBCOMMANDS: dict[str, Subcommand] = {
    "features": Subcommand(add_features_arguments, run_features,
                           "trajectory features: draft / fused / target states at sampled decoding positions"),
    "train": Subcommand(add_train_arguments, run_train,
                        "train a remaining-length head variant on the split's train rows (val: early stopping)"),
    "predict": Subcommand(add_predict_arguments, run_predict,
                          "a predictions table with trajectory re-predictions (for the simulator)"),
    "bench": Subcommand(add_bench_arguments, run_bench,
                        "remaining-length MAE along the trajectory: heads, carried prefill heads, oracle, probe"),
    "anchor": Subcommand(add_anchor_arguments, run_anchor,
                         "never worse than the prefill head: blend an OUTLETS head with it per progress band (fit on val)"),
    "schedule": Subcommand(add_schedule_arguments, run_schedule,
                           "value for scheduling: the simulator with OUTLETS re-predictions against prefill and oracle arms"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="outlets_action", metavar="ACTION", required=True)
    for name, sc in SUBCOMMANDS.items():
        sc.add(sub.add_parser(name, help=sc.help, description=sc.help))


def run(args: argparse.Namespace) -> int:
    from lenpred.commands.preflight import preflight

    preflight("outlets", args, args.outlets_action)
    return int(SUBCOMMANDS[args.outlets_action].run(args) or 0)
