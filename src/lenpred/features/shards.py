"""``--shard I/N``: a deterministic slice of a run's prompts, and merging the slices back.

The partition: sort the run's prompts by (token count, position in the run) and give prompt k of
that order to shard ``k mod N``. Every shard gets the same number of prompts (within one) and
nearly the same number of tokens, so N GPUs or hosts finish together, and the slice depends only
on the prompt table -- any launcher (a SLURM array's task id, a Ray task, a Kubernetes indexed job)
can run ``lenpred features --shard $I/$N`` with nothing shared but the run directory.

Each shard's artifact records its slice and a hash of the run's prompt list; :func:`merge_features`
joins them into one artifact in run order, refusing shards of another run or feature spec, shards
made from another prompt list, overlaps and gaps.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lenpred.errors import ConfigError, DataError
from lenpred.features.store import INDEX, KIND, SCHEMA_VERSION, Features, save_features, spec_diff, spec_key

__all__ = ["parse_shard", "shard_positions", "shard_slice", "prompts_sha256", "merge_features", "shard_label"]


def parse_shard(text: str | None) -> tuple[int, int]:
    """``"I/N"`` -> (I, N) with 0 <= I < N; None -> (0, 1)."""
    if text is None:
        return 0, 1
    try:
        i_s, n_s = str(text).split("/")
        i, n = int(i_s), int(n_s)
    except ValueError:
        raise ConfigError(f"--shard {text!r} is not of the form I/N", "pass --shard I/N with 0 <= I < N, e.g. --shard 0/4 "
                          "(slice 0 of 4)") from None
    if n < 1 or not 0 <= i < n:
        raise ConfigError(f"--shard {text}: slice index must be in 0..{max(n - 1, 0)} (and N >= 1)",
                          f"pass --shard I/N with 0 <= I < N: here I/{max(n, 1)} with I from 0 to {max(n - 1, 0)}")
    return i, n


def shard_label(i: int, n: int) -> str:
    return f"{i}/{n}"


def shard_positions(lengths: Sequence[int], i: int, n: int, positions: Sequence[int] | None = None) -> np.ndarray:
    """Indices (into ``lengths``) that shard i of n computes, shortest first: the items sorted by
    (length, position; position defaults to the index) and item k of that order given to shard k mod n."""
    pos = np.arange(len(lengths)) if positions is None else np.asarray(positions)
    order = np.lexsort((pos, np.asarray(lengths, dtype=np.int64)))  # by length, ties by position
    return order[i::n]


def shard_slice(prompts: pd.DataFrame, i: int, n: int) -> pd.DataFrame:
    """Rows of ``prompts`` (columns prompt_id, idx, prompt_token_ids) that shard i of n computes,
    shortest first (the processing order: batches of similar length waste little on padding)."""
    lengths = prompts["prompt_token_ids"].map(len).to_numpy()
    return prompts.iloc[shard_positions(lengths, i, n, prompts["idx"].to_numpy())].reset_index(drop=True)


def prompts_sha256(prompt_ids: Sequence[str]) -> str:
    """Hash of a run's prompt list (in run order): shards must come from the same list."""
    return hashlib.sha256("\n".join(map(str, prompt_ids)).encode()).hexdigest()[:16]


def merge_features(out: str | os.PathLike[str], shards: Sequence[str | os.PathLike[str]]) -> Any:
    """Merge shard artifacts of one run and spec into one features artifact at ``out`` (run order)."""
    from lenpred.features.store import load_features
    from lenpred.features.work import open_shards
    from lenpred.io.artifacts import check_out

    out_p = Path(out)
    arts = open_shards(out_p, shards, kind=KIND, schema_version=SCHEMA_VERSION, what="features")
    first = arts[0]
    check_out(out_p, kind=KIND, card={"card_hash": first.meta.get("card_hash")}, inputs={"--merge": list(shards)})
    ref_spec = spec_key(first.meta.get("feature_spec") or {})
    ref_prompts = first.meta.get("prompts") or {}
    if not ref_prompts.get("sha256"):
        raise DataError(f"{first.path} records no prompt list", "merge shards written by lenpred features --shard I/N")
    for a in arts[1:]:
        s = spec_key(a.meta.get("feature_spec") or {})
        if s != ref_spec:
            raise DataError(f"shard {a.path} has another feature spec than {first.path} ({spec_diff(s, ref_spec)})",
                            "recompute the odd shard with the same lenpred features options")
        if (a.meta.get("prompts") or {}).get("sha256") != ref_prompts["sha256"]:
            raise DataError(f"shard {a.path} was computed from another prompt list than {first.path} "
                            f"({(a.meta.get('prompts') or {}).get('total')} vs {ref_prompts.get('total')} prompts)",
                            "recompute every shard from the run as it is now")
    feats = [load_features(a.path) for a in arts]
    positions = [np.asarray(a.table(INDEX).get("idx", pd.Series(dtype="int64")), dtype=np.int64) for a in arts]
    seen: dict[str, Path] = {}
    for a, f in zip(arts, feats, strict=True):
        for pid in f.prompt_ids.tolist():
            if pid in seen:
                raise DataError(f"shards overlap: prompt {pid!r} is in both {seen[pid]} and {a.path}",
                                "merge each slice of one --shard I/N partition exactly once")
            seen[pid] = a.path
    total = int(ref_prompts.get("total", 0))
    if len(seen) != total:
        labels = [(a.meta.get("shard") or {}) for a in arts]
        counts = {lab.get("count") for lab in labels}
        missing = ""
        if len(counts) == 1 and None not in counts:
            n = counts.pop()
            gone = sorted(set(range(n)) - {lab.get("index") for lab in labels})
            missing = f"; missing shard(s) {', '.join(shard_label(i, n) for i in gone)}" if gone else ""
        raise DataError(f"shards cover {len(seen)} of the run's {total} prompts{missing}",
                        "compute the missing shards and merge all of them")
    ids = np.concatenate([f.prompt_ids for f in feats])
    pos = np.concatenate(positions) if all(len(p) == f.n for p, f in zip(positions, feats, strict=True)) else None
    order = np.argsort(pos, kind="stable") if pos is not None else np.arange(ids.size)
    merged = Features(
        ids[order],
        {k: np.concatenate([f.blocks[k] for f in feats])[order] for k in feats[0].blocks},
        np.concatenate([f.side for f in feats])[order], feats[0].side_names, dict(first.meta["feature_spec"]),
    )
    return save_features(
        out_p, merged, {"card_hash": first.meta["card_hash"]}, config=first.config,
        meta={"prompts": ref_prompts, "merged_from": [(a.meta.get("shard") or {}) for a in arts]},
        positions=None if pos is None else pos[order],
    )
