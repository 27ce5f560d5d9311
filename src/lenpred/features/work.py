"""The resumable output of a long computation: the chunk folder beside ``--out``, and the shard preamble.

Two computations build one big artifact from many small pieces: ``lenpred features`` (prefill
states, a group of prompts per chunk) and ``lenpred outlets features`` (trajectory rows, a group of
samples per chunk). Both use this module:

* :class:`WorkDir` is the folder ``OUT.work/`` beside ``--out``: ``work.json`` (what is being
  computed: the spec without bookkeeping, the run's card hash, the shard) and ``chunk-00000.
  safetensors``, ... -- each a group of finished rows with what they are in the safetensors header.
  A chunk is written to a temp file and renamed, so it is there completely or not at all: a killed
  run loses at most the chunk it was computing, and a rerun computes only what no chunk holds
  (never twice). When everything is done the artifact is assembled and the folder removed. A work
  folder made for another identity is refused, never mixed in;
* :func:`open_shards` is what merging ``--shard I/N`` outputs starts with: the shards exist, are of
  the right kind and of one run, and the output is not one of them.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from lenpred.errors import CardMismatchError, ConfigError, DataError
from lenpred.io.fileio import atomic_write_bytes, atomic_write_json, canonical_json

__all__ = ["WorkDir", "work_path", "open_shards"]

WORK_JSON = "work.json"
SIDE = "side"
_CHUNK = re.compile(r"chunk-(\d+)\.safetensors$")
T = TypeVar("T")


def work_path(out: Path) -> Path:
    return out.parent / f"{out.name}.work"


def open_shards(out: str | Path, shards: Sequence[str | Path], *, kind: str, schema_version: int,
                what: str) -> list[Any]:
    """The shard artifacts of a ``--merge`` into ``out``, checked: at least one, ``out`` not among them,
    each loadable as ``kind``, all of one run (card hash). The caller checks ``out`` itself
    (:func:`lenpred.io.artifacts.check_out`, with the run card these shards give)."""
    from lenpred.io.artifacts import load_artifact

    out_p = Path(out)
    if not shards:
        raise ConfigError("--merge needs at least one shard directory", "pass the shard outputs: --merge OUT_0 OUT_1 ...")
    if any(Path(s).resolve() == out_p.resolve() for s in shards):
        raise ConfigError(f"--out {out_p} is one of the shards being merged", "write the merged artifact to a new directory")
    arts = [load_artifact(s, kind=kind, schema_versions=(schema_version,), what=f"{what} shard") for s in shards]
    first = arts[0]
    for a in arts[1:]:
        if a.meta.get("card_hash") != first.meta.get("card_hash"):
            raise CardMismatchError(
                f"shard {a.path} is of another run than {first.path} (card {a.meta.get('card_hash')} != "
                f"{first.meta.get('card_hash')})", "merge only shards computed from the same run directory")
    return arts


class WorkDir:
    """Chunks of finished rows for one identity (see the module docstring). ``what`` names the
    computation in messages ("features", "trajectory")."""

    def __init__(self, path: Path, identity: Mapping[str, Any], what: str = "features") -> None:
        self.path = Path(path)
        self.identity = dict(identity)
        self.what = what

    @classmethod
    def open(cls, path: Path, identity: Mapping[str, Any], what: str = "features") -> WorkDir:
        """Open the work folder at ``path`` (creating it), refusing one made for another identity."""
        path = Path(path)
        wj = path / WORK_JSON
        if wj.is_file():
            try:
                old = json.loads(wj.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError):
                old = None
            if not isinstance(old, dict) or canonical_json(old.get("identity")) != canonical_json(dict(identity)):
                diff = _first_difference(old.get("identity") if isinstance(old, dict) else None, identity)
                raise DataError(f"{path} holds a {what} computation with other settings ({diff})",
                                "rerun with the same options to resume it, or delete that folder to start over")
        elif path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise DataError(f"{path} exists and is not a lenpred {what} work folder",
                            "move it away: lenpred keeps its resumable chunks there")
        else:
            atomic_write_json(wj, {"identity": dict(identity)})
        for t in path.glob(".*.tmp"):  # a chunk whose writer was killed before the rename
            t.unlink(missing_ok=True)
        return cls(path, identity, what)

    def chunk_paths(self) -> list[Path]:
        return sorted(p for p in self.path.glob("chunk-*.safetensors") if _CHUNK.search(p.name))

    def read(self, parse: Callable[[dict[str, str], dict[str, np.ndarray]], T],
             warn: Callable[[str], None] | None = None) -> Iterator[T]:
        """``parse(header metadata, tensors)`` of every finished chunk, in order. A chunk that cannot be
        read or parsed (truncated, corrupt) is named through ``warn``, set aside as ``NAME.corrupt`` and
        skipped, so a rerun recomputes what it held; without ``warn`` it is an error naming the fix."""
        from safetensors import safe_open

        for p in self.chunk_paths():
            try:
                with safe_open(str(p), framework="numpy") as f:
                    md = dict(f.metadata() or {})
                    t = {k: f.get_tensor(k) for k in f.keys()}  # safe_open has no __iter__
                item = parse(md, t)
            except Exception as e:  # noqa: BLE001 - a damaged chunk: name it and the fix
                if warn is None:
                    raise DataError(f"{p} is not a readable {self.what} chunk ({type(e).__name__})",
                                    "delete that file; a rerun recomputes what it held") from None
                aside = p.with_name(p.name + ".corrupt")
                p.replace(aside)
                warn(f"{p} is not a readable {self.what} chunk ({type(e).__name__}): set aside as {aside.name}; "
                     "its samples are computed again")
                continue
            yield item

    def write(self, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str]) -> Path:
        """Write the next chunk atomically (tensors as they are, ``metadata`` in the header)."""
        from safetensors.numpy import save

        nums = [int(m.group(1)) for p in self.chunk_paths() if (m := _CHUNK.search(p.name))]
        path = self.path / f"chunk-{(max(nums) + 1 if nums else 0):05d}.safetensors"
        data = save({k: np.ascontiguousarray(v) for k, v in tensors.items()}, metadata=dict(metadata))
        atomic_write_bytes(path, data)
        return path

    # the features computation's chunks: float32 blocks and side features, the prompt ids in the header
    def chunks(self) -> Iterator[tuple[list[str], dict[str, np.ndarray], np.ndarray]]:
        """(prompt ids, {block: (n, d)}, side (n, S)) of every finished features chunk."""

        def parse(md: dict[str, str], t: dict[str, np.ndarray]) -> tuple[list[str], dict[str, np.ndarray], np.ndarray]:
            side = t.pop(SIDE)
            return json.loads(md["prompt_ids"]), t, side

        return self.read(parse)

    def write_chunk(self, prompt_ids: list[str], blocks: Mapping[str, np.ndarray], side: np.ndarray) -> Path:
        tensors = {k: np.asarray(v, dtype=np.float32) for k, v in blocks.items()}
        tensors[SIDE] = np.asarray(side, dtype=np.float32)
        return self.write(tensors, {"prompt_ids": json.dumps(list(prompt_ids))})

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _first_difference(old: Any, new: Mapping[str, Any]) -> str:
    if not isinstance(old, dict):
        return "its work.json is unreadable"
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                if a.get(k) != b.get(k):
                    return f"{key}.{k}: {a.get(k)!r} there, {b.get(k)!r} now"
        elif a != b:
            return f"{key}: {a!r} there, {b!r} now"
    return "identity differs"
