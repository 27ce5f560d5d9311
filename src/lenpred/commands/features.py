"""`lenpred features`: prefill hidden states of a run's prompts, pooled, into a features artifact.

    lenpred features --run RUN --out OUT [--shard I/N] [--layers 10,15,30] [--pools last,mean,entropy]
    lenpred features --merge SHARD_OUT... --out OUT

Resumable: finished chunks wait in ``OUT.work/``; rerunning the same command computes only what is
missing. ``--shard I/N`` computes one deterministic slice (for N GPUs or hosts under any launcher);
``--merge`` joins the slices' outputs into one artifact.
"""

from __future__ import annotations

import argparse

from lenpred.config import add_arguments as add_config_arguments
from lenpred.config import from_arguments
from lenpred.errors import ConfigError
from lenpred.features.pooling import POOLS
from lenpred.features.prefill import FeatureConfig


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", default=None, help="run directory whose prompts to compute (read only)")
    p.add_argument("--out", required=True, help="features artifact directory to write")
    p.add_argument("--merge", nargs="+", default=None, metavar="SHARD",
                   help="merge these shard outputs (of --shard I/N runs) into --out instead of computing")
    p.add_argument("--shard", default=None, metavar="I/N", help="compute only slice I of N of the prompts (0 <= I < N)")
    p.add_argument("--model", default=None,
                   help="model to load (default: the run card's model.id; its fingerprint must match the card)")
    p.add_argument("--layers", default=None, metavar="L1,L2,...",
                   help="hidden-state layers, 0 = embeddings .. L = final normed state (default: ~L/3, L/2, L; 10,15,30 for SmolLM2-135M)")
    p.add_argument("--pools", default=None, metavar="P1,P2,...", help="poolings among last, mean, entropy (default: all three)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or per-chunk lines")
    add_config_arguments(p.add_argument_group("feature options"), FeatureConfig, exclude=("layers", "pools"))


def _int_list(text: str | None, flag: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"{flag} {text!r} is not a comma-separated list of integers", f"pass e.g. {flag} 10,15,30") from None


def run(a: argparse.Namespace) -> int:
    if a.merge is not None:
        if a.run is not None or a.shard is not None:
            raise ConfigError("--merge combines finished shards; it takes no --run or --shard",
                              "lenpred features --merge SHARD_OUT... --out OUT")
        from lenpred.features.shards import merge_features

        art = merge_features(a.out, a.merge)
        print(f"features: merged {len(a.merge)} shard(s), {art.meta['n']} prompts -> {art.path}")
        return 0
    if a.run is None:
        raise ConfigError("lenpred features needs --run RUN (or --merge SHARD... to join shards)",
                          "lenpred features --run data/runs/NAME --out data/features/NAME")
    from lenpred.features.build import compute_features
    from lenpred.features.shards import parse_shard

    shard = parse_shard(a.shard)
    # --layers / --pools are comma lists (the config derives only scalar flags); they override the
    # same-named attributes from_arguments would otherwise read as raw strings
    pools = tuple(x.strip() for x in a.pools.split(",") if x.strip()) if a.pools is not None else POOLS
    unknown = [x for x in pools if x not in POOLS]
    if unknown:
        raise ConfigError(f"--pools: unknown pooling {unknown[0]!r}", f"use any of: {', '.join(POOLS)}")
    cfg = from_arguments(FeatureConfig, a, layers=_int_list(a.layers, "--layers"), pools=pools)
    compute_features(a.run, a.out, cfg, shard=shard, model=a.model, progress=not a.no_progress)
    return 0
