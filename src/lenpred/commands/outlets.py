"""``lenpred outlets``: OUTLETS -- trajectory features from the draft backbone, remaining-length heads, their bench.

Subcommands are listed in :data:`SUBCOMMANDS`, one entry each: the module that holds its code and
the names of its two functions there (``add(parser)`` adds the flags, ``run(args) -> int`` runs it).
Each subcommand's code lives in its own functions (``features`` here; ``train`` / ``bench`` in
:mod:`lenpred.outlets.cli_eval`), so the table is the only shared line.

* ``lenpred outlets features --run RUN --draft HEAD --out TRAJ``: teacher-force the run's samples
  (roles of the split) through the target and the draft head and keep rows at sampled decoding
  positions (docs/outlets.md); resumable, ``--shard I/N`` and ``--merge``.
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass

from lenpred.errors import ConfigError

HELP = "OUTLETS: trajectory features from the draft backbone, remaining-length heads, their bench"
EXAMPLE = ("lenpred outlets features --run data/runs/smollm2-sharegpt --draft data/draft/smollm2-135m "
           "--out out/traj")


@dataclass(frozen=True)
class Subcommand:
    module: str  # where the code lives
    add: str  # name of ``add(parser) -> None`` in that module
    run: str  # name of ``run(args) -> int`` in that module
    help: str


# name -> subcommand. outlets-eval registers "train" and "bench" (lenpred.outlets.cli_eval) here.
SUBCOMMANDS: dict[str, Subcommand] = {
    "features": Subcommand(__name__, "add_features_arguments", "run_features",
                           "trajectory features: draft / fused / target states at sampled decoding positions"),
    "train": Subcommand("lenpred.outlets.cli_eval", "add_train_arguments", "run_train",
                        "train a remaining-length head variant on the split's train rows (val: early stopping)"),
    "predict": Subcommand("lenpred.outlets.cli_eval", "add_predict_arguments", "run_predict",
                          "a predictions table with trajectory re-predictions (for the simulator)"),
    "bench": Subcommand("lenpred.outlets.cli_eval", "add_bench_arguments", "run_bench",
                        "remaining-length MAE along the trajectory: heads, carried prefill heads, oracle, probe"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="outlets_action", metavar="ACTION", required=True)
    for name, sc in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=sc.help, description=sc.help)
        getattr(importlib.import_module(sc.module), sc.add)(p)


def run(args: argparse.Namespace) -> int:
    from lenpred.commands.preflight import preflight

    preflight("outlets", args, args.outlets_action)
    sc = SUBCOMMANDS[args.outlets_action]
    return int(getattr(importlib.import_module(sc.module), sc.run)(args) or 0)


# ------------------------------------------------------------------------------------------ features
def add_features_arguments(p: argparse.ArgumentParser) -> None:
    from lenpred.config import add_arguments as config_flags
    from lenpred.outlets.features import TrajectoryConfig

    p.add_argument("--run", default=None, help="run directory with token ids and a split (read only)")
    p.add_argument("--draft", default=None, help="EAGLE-3 draft head directory (its target must be the run's model)")
    p.add_argument("--out", required=True, help="trajectory artifact directory to write")
    p.add_argument("--merge", nargs="+", default=None, metavar="SHARD",
                   help="merge these shard outputs (of --shard I/N runs) into --out instead of computing")
    p.add_argument("--roles", default="train,val,test", help="split roles whose prompts to compute (default %(default)s)")
    p.add_argument("--shard", default=None, metavar="I/N", help="compute only slice I of N of the prompts (0 <= I < N)")
    p.add_argument("--model", default=None, help="target model (default: the run card's model; its fingerprint must match)")
    p.add_argument("--cache", default=None,
                   help="teacher-forced state cache to read and fill (default: the one the draft head was trained "
                        "with, if it fits, else $LENPRED_HOME/draft-states/...)")
    p.add_argument("--no-cache", action="store_true",
                   help="teacher-force in memory in float32; read and write no cache")
    p.add_argument("--max-prompts", type=int, default=None, help="only the first N prompts of each role (smoke runs)")
    p.add_argument("--max-samples-per-prompt", type=int, default=None, help="at most N samples of each prompt")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default; default %(default)s)")
    p.add_argument("--device", default="cpu", help="torch device for the target and the draft (cpu, cuda, ...)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    config_flags(p.add_argument_group("trajectory options"), TrajectoryConfig)


def run_features(a: argparse.Namespace) -> int:
    import sys

    from lenpred.config import from_arguments
    from lenpred.outlets.extract import compute_trajectory, merge_trajectories, parse_roles
    from lenpred.outlets.features import TrajectoryConfig

    def say(msg: str) -> None:
        print(f"lenpred outlets features: {msg}", file=sys.stderr, flush=True)

    if a.merge is not None:
        if a.run is not None or a.shard is not None or a.draft is not None:
            raise ConfigError("--merge combines finished shards; it takes no --run, --draft or --shard",
                              "lenpred outlets features --merge SHARD_OUT... --out TRAJ")
        traj = merge_trajectories(a.out, a.merge)
        say(f"merged {len(a.merge)} shard(s): {traj.n} rows -> {a.out}")
        return 0
    if a.run is None or a.draft is None:
        raise ConfigError("lenpred outlets features needs --run RUN and --draft HEAD (or --merge SHARD...)",
                          "lenpred outlets features --run data/runs/NAME --draft HEAD --out TRAJ")
    if a.cache is not None and a.no_cache:
        raise ConfigError("--cache and --no-cache contradict each other", "pass one of them")
    for flag, v in (("--max-prompts", a.max_prompts), ("--max-samples-per-prompt", a.max_samples_per_prompt)):
        if v is not None and v < 1:
            raise ConfigError(f"{flag} must be >= 1, got {v}")
    from lenpred.features.shards import parse_shard

    shard = parse_shard(a.shard)
    roles = parse_roles(a.roles)
    cfg = from_arguments(TrajectoryConfig, a, where="outlets features")
    if a.threads > 0:
        import torch

        torch.set_num_threads(a.threads)
    res = compute_trajectory(a.run, a.draft, a.out, cfg, roles=roles, shard=shard, model=a.model,
                             cache=False if a.no_cache else a.cache, max_prompts=a.max_prompts,
                             max_samples_per_prompt=a.max_samples_per_prompt, device=a.device,
                             progress=not a.no_progress, log=say)
    say(res.summary())
    return 0
