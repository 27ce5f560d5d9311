"""The features artifact: per-prompt arrays keyed by prompt_id, with the spec that made them.

Layout (a :mod:`lenpred.io.artifacts` directory, kind ``features``, card scope ``run``)::

    FEATS/
      meta.json            + "feature_spec": {model fingerprint, layers, pools, side_names, ...}
      weights.safetensors  one (N, d) tensor per block, named "<layer>.<pool>" (e.g. "15.last",
                           "30.entropy") or any other block name, stored as the spec's ``dtype``
                           (float16 by default from ``lenpred features``: half the bytes, and the
                           reference run's features fit in git), plus "side" (N, S) in float32
      index.parquet        prompt_id of each row, in row order (and ``idx``, the prompt's position
                           in its run, where the writer knew it: merging shards restores run order)

:func:`load_features` always returns float32 arrays, whatever the stored dtype.

A predictor names the blocks it reads (``blocks=("15.mean", "30.last")``) and records the feature
spec it was trained on; loading a head checks the spec of the features it is given.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from lenpred.errors import DataError

__all__ = ["Features", "save_features", "load_features", "spec_key", "KIND", "SCHEMA_VERSION", "STORE_DTYPES"]

KIND = "features"
SCHEMA_VERSION = 1
INDEX = "index.parquet"
SIDE = "side"
STORE_DTYPES = ("float32", "float16")
# spec fields that say who wrote the features, not what they are: two specs that differ only here
# describe the same features (shards from two lenpred versions may be merged, a head may read them)
SPEC_BOOKKEEPING = ("lenpred_version",)
_F16_MAX = float(np.finfo(np.float16).max)


def spec_key(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a feature spec that defines the features (without bookkeeping fields)."""
    return {k: v for k, v in spec.items() if k not in SPEC_BOOKKEEPING}


def spec_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """The first field in which two feature specs differ, as ``field: a != b``."""
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            return f"{k}: {a.get(k)!r} != {b.get(k)!r}"
    return "spec differs"


@dataclass
class Features:
    """``blocks[name]`` is (N, d_name) float32, row i belongs to ``prompt_ids[i]``; ``side`` is
    (N, S) with column names ``side_names`` (prompt tokens, entropy statistics, ...)."""

    prompt_ids: np.ndarray  # (N,) str
    blocks: dict[str, np.ndarray]
    side: np.ndarray  # (N, S)
    side_names: tuple[str, ...]
    spec: dict[str, Any] = field(default_factory=dict)
    card: dict[str, Any] | None = None  # the card fields recorded by the artifact (scope "run")
    card_hash: str | None = None

    def __post_init__(self) -> None:
        self.prompt_ids = np.asarray(self.prompt_ids).astype(str)
        n = len(self.prompt_ids)
        if len(set(self.prompt_ids.tolist())) != n:
            raise DataError("features have duplicate prompt ids", "give every prompt its own id")
        self.side = np.asarray(self.side, dtype=np.float32).reshape(n, -1)
        if self.side.shape[1] != len(self.side_names):
            raise DataError(f"features: side has {self.side.shape[1]} columns but {len(self.side_names)} names",
                            "name every side column once")
        for k, v in self.blocks.items():
            if v.ndim != 2 or v.shape[0] != n:
                raise DataError(f"features block {k!r} has shape {v.shape}, expected ({n}, d)",
                                "give every block one row per prompt")

    @property
    def n(self) -> int:
        return int(self.prompt_ids.size)

    def block(self, name: str) -> np.ndarray:
        if name == SIDE:
            return self.side
        try:
            return self.blocks[name]
        except KeyError:
            raise DataError(f"features have no block {name!r}",
                            f"use one of: {', '.join(sorted(self.blocks))} (or recompute features with it)") from None

    def matrix(self, names: Sequence[str]) -> np.ndarray:
        """(N, sum d) concatenation of the named blocks (``"side"`` for the side features)."""
        return np.concatenate([self.block(n) for n in names], axis=1)

    def side_column(self, name: str) -> np.ndarray:
        try:
            return self.side[:, self.side_names.index(name)]
        except ValueError:
            raise DataError(f"features have no side feature {name!r}", f"side features: {', '.join(self.side_names)}") from None

    def rows(self, prompt_ids: Sequence[str]) -> np.ndarray:
        """Row indices of ``prompt_ids`` (error naming the first one missing)."""
        pos = pd.Index(self.prompt_ids).get_indexer(pd.Index(np.asarray(prompt_ids).astype(str)))
        if (pos < 0).any():
            first = np.asarray(prompt_ids)[int(np.argmax(pos < 0))]
            raise DataError(f"features lack {int((pos < 0).sum())} prompt(s) (first: {first!r})",
                            "compute features for this run's prompts (lenpred features --run RUN)")
        return pos

    def subset(self, prompt_ids: Sequence[str]) -> Features:
        idx = self.rows(prompt_ids)
        return Features(self.prompt_ids[idx], {k: v[idx] for k, v in self.blocks.items()}, self.side[idx],
                        self.side_names, self.spec, self.card, self.card_hash)


def save_features(path: str | os.PathLike[str], feats: Features, card: Mapping[str, Any],
                  config: Any = None, meta: Mapping[str, Any] | None = None, *,
                  dtype: str | None = None, positions: Sequence[int] | None = None) -> Any:
    """Write ``feats`` as a features artifact of ``card``'s run.

    Blocks are stored as ``dtype`` (default: the spec's ``dtype``, else float32), which is then
    recorded in the spec; ``side`` always stays float32 (token counts need the integer range).
    ``positions`` (each row's ``idx`` in the run) go into the index table when given.
    """
    from lenpred.io.artifacts import ArtifactHeader, write_artifact

    dtype = dtype or str(feats.spec.get("dtype", "float32"))
    if dtype not in STORE_DTYPES:
        raise DataError(f"features cannot be stored as {dtype!r}", f"use one of: {', '.join(STORE_DTYPES)}")
    tensors = {}
    for k, v in feats.blocks.items():
        if dtype == "float16" and v.size and float(np.abs(v).max()) > _F16_MAX:
            raise DataError(f"features block {k!r} overflows float16 (max |x| = {float(np.abs(v).max()):.4g})",
                            "store the features as float32 (lenpred features --dtype float32)")
        tensors[k] = np.ascontiguousarray(v, dtype=dtype)
    tensors[SIDE] = np.ascontiguousarray(feats.side, dtype=np.float32)
    index = pd.DataFrame({"prompt_id": feats.prompt_ids})
    if positions is not None:
        index["idx"] = np.asarray(positions, dtype=np.int64)
    spec = {**feats.spec, "dtype": dtype}
    return write_artifact(
        path,
        ArtifactHeader(kind=KIND, schema_version=SCHEMA_VERSION, config=config, card=card, card_scope="run",
                       meta={"feature_spec": spec, "side_names": list(feats.side_names), "n": feats.n, **(meta or {})}),
        tensors=tensors, tables={INDEX: index},
    )


def load_features(path: str | os.PathLike[str], card: Mapping[str, Any] | None = None) -> Features:
    """Load a features artifact (strict); with ``card``, refuse features of another run."""
    from lenpred.io.artifacts import load_artifact

    art = load_artifact(path, kind=KIND, schema_versions=(SCHEMA_VERSION,), card=card, what="features")
    t = {k: v.astype(np.float32, copy=False) for k, v in art.tensors().items()}  # float16 on disk -> float32
    side = t.pop(SIDE)
    ids = art.table(INDEX)["prompt_id"].to_numpy()
    for k, v in t.items():
        if not np.isfinite(v).all():
            raise DataError(f"features {path}: block {k!r} has NaN or infinite values", "recompute the features")
    return Features(ids, t, side, tuple(art.meta.get("side_names", ())), dict(art.meta.get("feature_spec", {})),
                    dict(art.meta.get("card") or {}), art.meta.get("card_hash"))
