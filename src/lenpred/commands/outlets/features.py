"""``lenpred outlets features``: its flags and the call into :func:`lenpred.outlets.pipeline.features`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable


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
    from lenpred.outlets.extract import TrajectoryRequest
    from lenpred.outlets.features import TrajectoryConfig
    from lenpred.outlets.pipeline import features

    cfg = TrajectoryConfig()
    if a.merge is None and a.run is not None and a.draft is not None:
        cfg = from_arguments(TrajectoryConfig, a, where="outlets features")
        if a.threads > 0:
            import torch

            torch.set_num_threads(a.threads)
    say = _say("features")
    req = TrajectoryRequest(a.run, a.draft, a.out, cfg, roles=a.roles, shard=a.shard, model=a.model, cache=a.cache,
                            max_prompts=a.max_prompts, max_samples_per_prompt=a.max_samples_per_prompt,
                            device=a.device, progress=not a.no_progress)
    say(features(req, merge=a.merge, log=say))
    return 0
