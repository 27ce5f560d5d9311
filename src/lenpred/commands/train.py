"""`lenpred train`: fit one length predictor (head) on a run's training split and save it.

Trains on the split's train prompts (``--roles``; test is always refused), stops early on its
validation prompts, prints the training time and the validation MAE (beside the constant predictor's
on the same samples), and writes the head directory atomically (weights.safetensors + meta.json).
"""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="run directory (its samples are the targets, its split.json the split)")
    p.add_argument("--features", default=None,
                   help="features artifact of the run (lenpred features); not needed by the proxy head")
    p.add_argument("--predictor", required=True, help="head to train (constant, prompt-length, ridge, mlp, softlabel, egtp, film, moe, proxy, probe, ngram, gbdt)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="a hyperparameter, repeatable; VALUE is JSON where it parses (e.g. hidden=128, "
                        "blocks=15.mean,30.last, target=samples)")
    p.add_argument("--out", required=True, help="head directory to write")
    p.add_argument("--split", default=None, help="split file (default RUN/split.json)")
    p.add_argument("--roles", default="train",
                   help="split roles to train on, comma-separated (default train; 'train,val' trains on both "
                        "without early stopping; test is refused)")
    p.add_argument("--no-early-stopping", action="store_true", help="train all epochs; ignore the validation prompts")


def run(a: argparse.Namespace) -> int:
    from lenpred.checks import parse_roles
    from lenpred.data.rundir import RunDir
    from lenpred.io.artifacts import check_out
    from lenpred.predictors.pipeline import TrainPrompts, parse_params, train_on_run

    roles = list(parse_roles(a.roles))
    params = parse_params(a.param)
    _check_params(a.predictor, params)
    check_out(a.out, kind="head", card=RunDir.open(a.run).card,
              inputs={"--run": a.run, "--features": a.features, "--split": a.split})
    _, rep = train_on_run(a.predictor, params, a.run, a.features, a.out,
                          TrainPrompts(a.split, roles, early_stopping=not a.no_early_stopping))
    val = f", early stopping on {rep.n_val} validation prompts" if rep.n_val else ""
    print(f"train: {rep.predictor} on {rep.n_train} prompts ({rep.n_train_samples} samples) of {rep.run}{val}")
    if rep.unassigned:
        print(f"  note: {rep.unassigned} prompt(s) with samples have no role in the split yet (not used; "
              f"`lenpred split {rep.run}` adds them)")
    log = rep.train_log or {}
    epochs = f" ({log['epochs_run']} epochs, best {log['best_epoch']})" if "epochs_run" in log else ""
    print(f"  training time {rep.seconds:.2f} s{epochs}")
    if rep.val_mae is not None:
        print(f"  val MAE {rep.val_mae:.1f} tokens (constant {rep.val_mae_constant:.1f}) on {rep.n_val_samples} "
              f"samples of {rep.n_val} prompts")
    print(f"  head -> {rep.head}")
    return 0


def _check_params(name: str, params: dict) -> None:
    """A hyperparameter of the wrong type (``alphas=abc``) is refused before the run is read."""
    from lenpred.commands.heads import register_heads
    from lenpred.errors import ConfigError
    from lenpred.predictors.registry import make_predictor

    register_heads()
    head = make_predictor(name, params)
    try:
        head._check_params()
    except (ValueError, TypeError) as e:
        given = ", ".join(f"{k}={v!r}" for k, v in params.items())
        raise ConfigError(f"--param: a value of the wrong type for the {name} head ({given}: {e})",
                          "pass numbers where the head expects numbers, lists as JSON (e.g. --param alphas=[1,10])") from None
