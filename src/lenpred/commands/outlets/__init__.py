"""``lenpred outlets``: OUTLETS -- trajectory features from the draft backbone, remaining-length heads, their bench.

The flags of each subcommand and the call into :mod:`lenpred.outlets.pipeline` (the library half), one
module per group (:mod:`.features`; :mod:`.heads`: train, predict, anchor; :mod:`.evaluate`: bench, schedule):

* ``lenpred outlets features --run RUN --draft HEAD --out TRAJ``: teacher-force the run's samples
  (roles of the split) through the target and the draft head and keep rows at sampled decoding
  positions (docs/outlets.md); resumable, ``--shard I/N`` and ``--merge``;
* ``lenpred outlets train --traj TRAJ --run RUN --variant NAME --out HEAD``: a head variant on the
  split's train rows (val: early stopping);
* ``lenpred outlets predict --head HEAD --traj TRAJ --run RUN --out FILE.parquet``: a predictions table
  with trajectory re-predictions (for the simulator);
* ``lenpred outlets bench --traj TRAJ --run RUN --heads [NAME=]HEAD... --prefill-predictions
  [NAME=]FILE... --out DIR``: every method along the trajectory on the test prompts;
* ``lenpred outlets counters --run RUN --out HEAD [--kind quantile|hazard]``: a counter head on the live
  rows of the training prompts (what the answer so far counts, no hidden state); the bench takes it with
  ``--counters``;
* ``lenpred outlets schedule --run RUN --traj TRAJ --outlets-head HEAD --prefill-predictions FILE
  --out DIR``: the simulator's value-for-scheduling experiment (experiments/outlets/schedule.json).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from lenpred.commands.outlets.evaluate import (
    add_bench_arguments,
    add_schedule_arguments,
    run_bench,
    run_schedule,
)
from lenpred.commands.outlets.features import add_features_arguments, run_features
from lenpred.commands.outlets.heads import (
    add_anchor_arguments,
    add_counters_arguments,
    add_predict_arguments,
    add_train_arguments,
    run_anchor,
    run_counters,
    run_predict,
    run_train,
)


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
    "counters": Subcommand(add_counters_arguments, run_counters,
                           "a head on what a server counts in the answer so far (newlines, lists, fences, ...): live rows"),
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
