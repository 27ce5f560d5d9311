"""The trajectory-features artifact: one row per (sample, decoding position t) of a run.

Layout (a :mod:`lenpred.io.artifacts` directory, kind ``trajectory``, card scope ``run``)::

    TRAJ/
      meta.json            + "trajectory_spec": {target fingerprint, draft head (path, sha256 of its
                           weights, its card), layers, position scheme, dtype, ...}
      weights.safetensors  one (R, d_name) tensor per block: "draft" (the EAGLE-3 draft decoder's
                           hidden state), "fused" (the draft's fc output of the target's
                           low/mid/high states), "target.<layer>" (one target layer, for the probe
                           baseline), and any other block a writer adds; float16 by default
      index.parquet        one row per position, in row order:
                             prompt_id (str), sample_idx (int), t (tokens generated so far, >= 0),
                             length (the sample's total generated tokens L), remaining (L - t),
                             truncated (bool: the sample hit max_new_tokens; labels are as served, cap - t)

Rows of one sample are contiguous and sorted by t. :func:`load_trajectory` returns float32 blocks;
:func:`merge_trajectories` joins the artifacts of one ``--shard I/N`` partition.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lenpred.errors import DataError
from lenpred.io.fileio import canonical_json

__all__ = ["KIND", "SCHEMA_VERSION", "INDEX_COLUMNS", "Trajectory", "save_trajectory", "load_trajectory", "role_rows",
           "merge_trajectories"]

KIND = "trajectory"
SCHEMA_VERSION = 1
INDEX = "index.parquet"
INDEX_COLUMNS = ("prompt_id", "sample_idx", "t", "length", "remaining", "truncated")
_F16_MAX = float(np.finfo(np.float16).max)


@dataclass
class Trajectory:
    """``index`` has :data:`INDEX_COLUMNS`; ``blocks[name]`` is (R, d) float32, row i of every block
    belongs to ``index.iloc[i]``."""

    index: pd.DataFrame
    blocks: dict[str, np.ndarray]
    spec: dict[str, Any] = field(default_factory=dict)
    card: dict[str, Any] | None = None
    card_hash: str | None = None

    def __post_init__(self) -> None:
        missing = [c for c in INDEX_COLUMNS if c not in self.index.columns]
        if missing:
            raise DataError(f"trajectory index lacks column(s) {missing}", f"give all of {list(INDEX_COLUMNS)}")
        self.index = self.index.reset_index(drop=True)
        n = len(self.index)
        for k, v in self.blocks.items():
            if v.ndim != 2 or v.shape[0] != n:
                raise DataError(f"trajectory block {k!r} has shape {v.shape}, expected ({n}, d)",
                                "every block needs one row per index row")
        t = self.index["t"].to_numpy()
        length = self.index["length"].to_numpy()
        if (t < 0).any():
            raise DataError("trajectory positions t must be >= 0", "recompute the trajectory features")
        bad = np.flatnonzero(t > length)
        if bad.size:
            r = self.index.iloc[int(bad[0])]
            raise DataError(
                f"trajectory position t={int(r.t)} exceeds the length {int(r.length)} of sample "
                f"({r.prompt_id}, {int(r.sample_idx)}) ({bad.size} such rows)",
                "positions must lie within the sample's response; recompute the trajectory features "
                "from the run they belong to")
        if not np.array_equal(self.index["remaining"].to_numpy(), length - t):
            raise DataError("trajectory column 'remaining' is not length - t", "recompute the trajectory features")

    @property
    def n(self) -> int:
        return len(self.index)

    def block(self, name: str) -> np.ndarray:
        if name not in self.blocks:
            raise DataError(f"trajectory features have no block {name!r}",
                            f"available: {', '.join(sorted(self.blocks))}")
        return self.blocks[name]

    def matrix(self, names: Sequence[str]) -> np.ndarray:
        return np.concatenate([self.block(n) for n in names], axis=1)

    def take(self, rows: np.ndarray) -> Trajectory:
        """The rows ``rows`` (a boolean mask or integer positions), as a new Trajectory."""
        rows = np.asarray(rows)
        if rows.dtype == bool:
            rows = np.flatnonzero(rows)
        return Trajectory(self.index.iloc[rows].reset_index(drop=True), {k: v[rows] for k, v in self.blocks.items()},
                          dict(self.spec), self.card, self.card_hash)

    def for_prompts(self, prompt_ids: Sequence[str]) -> Trajectory:
        return self.take(self.index["prompt_id"].isin(set(prompt_ids)).to_numpy())


def save_trajectory(path: str | os.PathLike[str], traj: Trajectory, card: Mapping[str, Any],
                    config: Any = None, meta: Mapping[str, Any] | None = None, *, dtype: str = "float16") -> Any:
    """Write ``traj`` as a trajectory artifact of ``card``'s run (atomically)."""
    from lenpred.io.artifacts import ArtifactHeader, write_artifact

    if dtype not in ("float16", "float32"):
        raise DataError(f"trajectory features cannot be stored as {dtype!r}", "use float16 or float32")
    tensors = {}
    for k, v in traj.blocks.items():
        if not np.isfinite(v).all():
            raise DataError(f"trajectory block {k!r} has NaN or infinite values", "recompute the trajectory features")
        if dtype == "float16" and v.size and float(np.abs(v).max()) > _F16_MAX:
            raise DataError(f"trajectory block {k!r} overflows float16", "store it as float32")
        tensors[k] = np.ascontiguousarray(v, dtype=dtype)
    index = traj.index[list(INDEX_COLUMNS)].copy()
    index["sample_idx"] = index["sample_idx"].astype("int64")
    for c in ("t", "length", "remaining"):
        index[c] = index[c].astype("int64")
    index["truncated"] = index["truncated"].astype(bool)
    return write_artifact(
        path,
        ArtifactHeader(kind=KIND, schema_version=SCHEMA_VERSION, config=config, card=card, card_scope="run",
                       meta={"trajectory_spec": {**traj.spec, "dtype": dtype}, "n": traj.n, **(meta or {})}),
        tensors=tensors, tables={INDEX: index},
    )


def load_trajectory(path: str | os.PathLike[str], card: Mapping[str, Any] | None = None) -> Trajectory:
    """Load a trajectory artifact (strict); with ``card``, refuse one of another run."""
    from lenpred.io.artifacts import load_artifact

    art = load_artifact(path, kind=KIND, schema_versions=(SCHEMA_VERSION,), card=card, what="trajectory features")
    blocks = {k: v.astype(np.float32, copy=False) for k, v in art.tensors().items()}
    return Trajectory(art.table(INDEX), blocks, dict(art.meta.get("trajectory_spec", {})),
                      dict(art.meta.get("card") or {}), art.meta.get("card_hash"))


def merge_trajectories(out: str | Path, shards: Sequence[str | Path]) -> Trajectory:
    """Join the shard artifacts of one ``--shard I/N`` partition into one artifact at ``out``."""
    from lenpred.features.work import open_shards
    from lenpred.io.artifacts import check_out

    out_p = Path(out)
    arts = open_shards(out_p, shards, kind=KIND, schema_version=SCHEMA_VERSION, what="trajectory")
    check_out(out_p, kind=KIND, card={"card_hash": arts[0].meta.get("card_hash")}, inputs={"--merge": list(shards)})
    first = arts[0].meta
    for a in arts[1:]:
        m = a.meta
        if canonical_json(m.get("trajectory_spec")) != canonical_json(first.get("trajectory_spec")):
            raise DataError(f"shard {a.path} has another trajectory spec than {arts[0].path} (draft head, layers or "
                            "positions differ)", "recompute the odd shard with the same options")
        if canonical_json(m.get("selection")) != canonical_json(first.get("selection")):
            raise DataError(f"shard {a.path} was computed from another selection of samples than {arts[0].path}",
                            "recompute every shard with the same --roles and limits from the run as it is now")
    counts = {(a.meta.get("shard") or {}).get("count") for a in arts}
    idxs = [(a.meta.get("shard") or {}).get("index") for a in arts]
    if len(counts) != 1 or len(set(idxs)) != len(idxs):
        raise DataError("the shards are not distinct slices of one --shard I/N partition",
                        "merge each slice I/N exactly once")
    n = counts.pop()
    gone = sorted(set(range(int(n))) - set(idxs))
    if gone:
        raise DataError(f"shard(s) {', '.join(f'{i}/{n}' for i in gone)} missing", "compute them and merge all N")
    trajs = [load_trajectory(a.path) for a in arts]
    index = pd.concat([t.index for t in trajs], ignore_index=True)
    keys = index[["prompt_id", "sample_idx"]].drop_duplicates()
    if len(keys) != sum(len(t.index[["prompt_id", "sample_idx"]].drop_duplicates()) for t in trajs):
        raise DataError("shards overlap (a sample is in two of them)", "merge each slice of one partition once")
    blocks = {k: np.concatenate([t.blocks[k] for t in trajs]) for k in trajs[0].blocks}
    order = np.lexsort((index["t"].to_numpy(), index["sample_idx"].to_numpy(), index["prompt_id"].to_numpy()))
    spec = {k: v for k, v in (first.get("trajectory_spec") or {}).items() if k != "dtype"}
    traj = Trajectory(index.iloc[order].reset_index(drop=True), {k: v[order] for k, v in blocks.items()}, spec)
    meta = {"selection": first.get("selection"), "shard": {"index": 0, "count": 1}, "draft_path": first.get("draft_path"),
            "run": first.get("run"), "merged_from": [a.meta.get("shard") for a in arts]}
    save_trajectory(out_p, traj, {"card_hash": first["card_hash"]}, config=arts[0].config, meta=meta,
                    dtype=(first.get("trajectory_spec") or {}).get("dtype", "float16"))
    return traj


_ROLE_WORDS = {"train": "training", "val": "validation", "test": "test"}


def role_rows(traj_path: str | os.PathLike[str], run: Any, role: str, fix: str,
              split: str | os.PathLike[str] | None = None) -> tuple[Trajectory, Any, Trajectory]:
    """The trajectory at ``traj_path`` for the run directory ``run`` (features of another run are
    refused first), the run's split, and the rows of the split's ``role`` prompts; a trajectory with
    none of them is refused with ``fix``."""
    from lenpred.data.split import load_split

    traj = load_trajectory(traj_path, card=run.card)
    sp = load_split(run, split, require_complete=False)
    rows = traj.for_prompts(sorted(sp.ids(role)))
    if rows.n == 0:
        raise DataError(f"trajectory {traj_path} has no row of a {_ROLE_WORDS[role]} prompt of {run.path}", fix)
    return traj, sp, rows
