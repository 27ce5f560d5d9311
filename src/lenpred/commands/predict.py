"""`lenpred predict`: write a predictions table (Parquet) for a run with a trained head.

One row per prompt (``sample_idx`` -1): the point prediction (total output tokens) and the head's
q10 / q50 / q90 and spread. The head must come from a run with the same model and sampling card
(another prompt set is a transfer evaluation, reported as such); the features must be this run's and
computed under the head's feature spec. Nothing is written when a check fails.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--head", required=True, help="head directory written by `lenpred train`")
    p.add_argument("--run", required=True, help="run directory to predict (its card must match the head's)")
    p.add_argument("--features", default=None, help="features artifact of this run (not needed by the proxy head)")
    p.add_argument("--out", required=True, help="predictions file to write (.parquet)")
    p.add_argument("--roles", default=None,
                   help="only the split's prompts of these roles, comma-separated (default: every prompt)")
    p.add_argument("--split", default=None, help="split file for --roles (default RUN/split.json)")


def run(a: argparse.Namespace) -> int:
    from lenpred.checks import parse_roles
    from lenpred.commands.heads import register_heads
    from lenpred.data.rundir import RunDir
    from lenpred.errors import ConfigError
    from lenpred.io.artifacts import check_out
    from lenpred.predictors.pipeline import predict_run

    register_heads()
    roles = parse_roles(a.roles, "--roles") if a.roles is not None else None
    check_out(a.out, kind="predictions", card=RunDir.open(a.run).card,
              inputs={"--head": a.head, "--run": a.run, "--features": a.features, "--split": a.split})
    if Path(a.out).suffix != ".parquet":  # the table is Parquet; a .csv name would hold Parquet bytes
        raise ConfigError(f"--out {Path(a.out).name} does not end in .parquet: predictions are written as Parquet",
                          f"pass --out {Path(a.out).with_suffix('.parquet').name} (read it with pandas.read_parquet)")
    preds, rep = predict_run(a.head, a.run, a.features, roles, a.split)
    path = preds.write(a.out)
    how = f"transfer from {rep.head_run}" if rep.transfer else "the run it was trained on"
    us = 1e6 * rep.seconds / max(rep.n_prompts, 1)
    print(f"predict: {rep.predictor} head on {rep.n_prompts} prompts of {a.run} ({how}); "
          f"{rep.seconds:.2f} s ({us:.0f} us/prompt) -> {path}")
    return 0
