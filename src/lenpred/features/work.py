"""The resumable work folder of a features computation: finished chunks, written atomically.

``OUT.work/`` (beside ``--out``) holds ``work.json`` (what is being computed: the feature spec
without bookkeeping, the run's card hash and the shard) and ``chunk-00000.safetensors``, ... --
each the float32 blocks and side features of a group of prompts, with the prompt ids in the
safetensors header. A chunk is written to a temp file and renamed, so it is there completely or
not at all: a killed run loses at most the chunk it was computing, and a rerun computes only the
prompts no chunk holds (never twice). When every prompt is done the artifact is assembled and the
folder removed. A work folder made for another spec, run or shard is refused, never mixed in.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from lenpred.errors import DataError
from lenpred.fileio import atomic_write_bytes, atomic_write_json, canonical_json

__all__ = ["WorkDir", "work_path"]

WORK_JSON = "work.json"
SIDE = "side"
_CHUNK = re.compile(r"chunk-(\d+)\.safetensors$")


def work_path(out: Path) -> Path:
    return out.parent / f"{out.name}.work"


class WorkDir:
    """Chunks of finished rows for one (spec, run, shard) identity."""

    def __init__(self, path: Path, identity: Mapping[str, Any]) -> None:
        self.path = Path(path)
        self.identity = dict(identity)

    @classmethod
    def open(cls, path: Path, identity: Mapping[str, Any]) -> WorkDir:
        """Open the work folder at ``path`` (creating it), refusing one made for another identity."""
        path = Path(path)
        wj = path / WORK_JSON
        if wj.is_file():
            try:
                old = json.loads(wj.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                old = None
            if not isinstance(old, dict) or canonical_json(old.get("identity")) != canonical_json(dict(identity)):
                what = _first_difference(old.get("identity") if isinstance(old, dict) else None, identity)
                raise DataError(f"{path} holds a features computation with other settings ({what})",
                                "rerun with the same options to resume it, or delete that folder to start over")
        elif path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise DataError(f"{path} exists and is not a lenpred features work folder",
                            "move it away: lenpred keeps its resumable chunks there")
        else:
            atomic_write_json(wj, {"identity": dict(identity)})
        for t in path.glob(".*.tmp"):  # a chunk whose writer was killed before the rename
            t.unlink(missing_ok=True)
        return cls(path, identity)

    def chunk_paths(self) -> list[Path]:
        return sorted(p for p in self.path.glob("chunk-*.safetensors") if _CHUNK.search(p.name))

    def chunks(self) -> Iterator[tuple[list[str], dict[str, np.ndarray], np.ndarray]]:
        """(prompt ids, {block: (n, d)}, side (n, S)) of every finished chunk."""
        from safetensors import safe_open

        for p in self.chunk_paths():
            try:
                with safe_open(str(p), framework="numpy") as f:
                    ids = json.loads((f.metadata() or {})["prompt_ids"])
                    t = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open has no __iter__
            except Exception as e:  # noqa: BLE001 - a damaged chunk: name it and the fix
                raise DataError(f"{p} is not a readable features chunk ({type(e).__name__})",
                                "delete that file; a rerun recomputes its prompts") from None
            side = t.pop(SIDE)
            yield ids, t, side

    def write_chunk(self, prompt_ids: list[str], blocks: Mapping[str, np.ndarray], side: np.ndarray) -> Path:
        from safetensors.numpy import save

        nums = [int(m.group(1)) for p in self.chunk_paths() if (m := _CHUNK.search(p.name))]
        path = self.path / f"chunk-{(max(nums) + 1 if nums else 0):05d}.safetensors"
        tensors = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in blocks.items()}
        tensors[SIDE] = np.ascontiguousarray(side, dtype=np.float32)
        atomic_write_bytes(path, save(tensors, metadata={"prompt_ids": json.dumps(list(prompt_ids))}))
        return path

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
