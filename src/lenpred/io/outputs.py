"""The overwrite rule: where a command may write its output (part of the artifact layer).

Every writer calls :func:`check_out` on its ``--out`` (``lenpred.io.artifacts.check_out``) before any
work. The output may be

* a new path (its parent directories are made), or an empty directory / empty file;
* an earlier output of the same kind made from the same inputs (a rerun): an artifact of that
  ``kind`` whose run card (``card_hash``) and ``match`` fields equal the new ones, or a lenpred file
  of that kind (a predictions table, a split, an events log, a latency profile).

Anything else is refused, naming what is there: a file or directory lenpred did not write, an
artifact of another kind, another run or card, a path inside a run directory or inside another
artifact, a path inside one of the command's own inputs, a directory where a file belongs (and
the reverse), a path under a file, or a directory that cannot be written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lenpred.errors import DataError

__all__ = ["Rerun", "check_out", "what_is", "FILE_KINDS"]

_META = "meta.json"  # lenpred.io.artifacts.META (not imported: artifacts imports this module)
_CARD = "card.json"  # lenpred.data.rundir.CARD
_NEW = "pass a new path, or the earlier output of the same command on the same inputs (a rerun)"
_FILE_NAMES = {"predictions": "predictions.parquet", "split": "split.json", "events": "events.jsonl",
               "profile": "profile.json"}
FILE_KINDS = (*_FILE_NAMES, "report")  # the kinds written as one file (the others are directories)
_MAX_JSON = 64 << 20  # a JSON file bigger than this is no lenpred split or profile: not read whole


@dataclass(frozen=True)
class Found:
    """What lenpred thing sits at a path: its kind, the run card it was made from, its header."""

    kind: str
    card_hash: str | None = None
    meta: Mapping[str, Any] | None = None

    def label(self) -> str:
        card = f" (run card {self.card_hash})" if self.card_hash else ""
        if self.kind == "run":
            return f"a lenpred run directory{card}"
        if self.kind == "unreadable":
            return f"an artifact whose {_META} is not a lenpred header"
        return f"a lenpred {self.kind} {'artifact' if self.meta is not None else 'file'}{card}"


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def _first_json_line(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.loads(f.readline(1 << 16))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def _parquet_kind(path: Path) -> Found | None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        md = pq.read_schema(path).metadata or {}
    except (pa.ArrowException, OSError):
        return None
    if b"lenpred.predictions" in md:
        try:
            meta = json.loads(md[b"lenpred.predictions"])
        except (json.JSONDecodeError, UnicodeDecodeError):
            meta = None
        return Found("predictions", meta.get("card_hash") if isinstance(meta, dict) else None)
    if b"lenpred.card_hash" in md:
        return Found("run table", md[b"lenpred.card_hash"].decode(errors="replace"))
    return None


def what_is(path: str | os.PathLike[str]) -> Found | None:
    """The lenpred thing at ``path`` (an artifact, a run, a lenpred file), or None for anything else."""
    p = Path(path)
    if p.is_dir():
        if (p / _META).is_file():
            meta = _json(p / _META)
            if not isinstance(meta, dict) or not isinstance(meta.get("kind"), str):
                return Found("unreadable", None, {})
            return Found(meta["kind"], meta.get("card_hash"), meta)
        if (p / _CARD).is_file():
            card = _json(p / _CARD)
            return Found("run", card.get("card_hash") if isinstance(card, dict) else None)
        return None
    if not p.is_file():
        return None
    if p.suffix == ".parquet":
        return _parquet_kind(p)
    data = _json(p) if p.suffix == ".json" and p.stat().st_size < _MAX_JSON else None
    if data is None:
        first = _first_json_line(p)
        return Found("events") if isinstance(first, dict) and "cycle" in first else None
    if isinstance(data, dict) and data.get("schema") == "lenpred.split/1":
        return Found("split", data.get("card_hash"))
    if isinstance(data, dict) and {"prefill", "decode", "kv_tokens"} <= set(data):
        return Found("profile")
    return None


def _container(p: Path, flag: str, allow_inside: Path | None) -> None:
    """Refuse a path inside a run directory or inside an artifact (what is there would be mixed or lost)."""
    for d in p.parents:
        if allow_inside is not None and d == allow_inside:
            return
        found = what_is(d) if (d / _META).is_file() or (d / _CARD).is_file() else None
        if found is not None:
            raise DataError(f"{flag} {p} is inside {found.label()} at {d}",
                            "write outputs outside run directories and artifacts (e.g. under out/)")


def _inputs(p: Path, flag: str, inputs: Mapping[str, Any] | None) -> None:
    for name, value in (inputs or {}).items():
        for v in value if isinstance(value, list | tuple) else [value]:
            if v is None:
                continue
            src = Path(v).resolve()
            if p == src or src in p.parents:
                where = "is" if p == src else "is inside"
                raise DataError(f"{flag} {p} {where} the command's own input {name} {v}",
                                "write the output to a new path; an input is never overwritten")


def _writable(p: Path, flag: str) -> None:
    """The nearest existing directory above ``p`` must be a directory this process can write."""
    d = p.parent
    while not d.exists():
        d = d.parent
    if not d.is_dir():
        raise DataError(f"{flag} {p} cannot be created: {d} is a file", "pass a path whose parent is a directory")
    if not os.access(d, os.W_OK | os.X_OK):
        raise DataError(f"{flag} {p} cannot be written: directory {d} is read-only",
                        "pass a path in a directory you can write to")


def _card_hash(card: Mapping[str, Any] | None) -> str | None:
    if card is None or "card_hash" in card:
        return None if card is None else card.get("card_hash")
    from lenpred.io.card import card_hash

    return card_hash(dict(card))


@dataclass(frozen=True)
class Rerun:
    """What else makes an existing output this command's earlier one (replaced, not refused), besides its
    kind and run card: ``match``, header fields an existing artifact must have; ``folder(dir)``, True for
    a folder the command itself writes without meta.json (not an artifact)."""

    match: Mapping[str, Any] | None = None
    folder: Callable[[Path], bool] | None = None


def check_out(
    path: str | os.PathLike[str],
    *,
    kind: str,
    card: Mapping[str, Any] | None = None,
    inputs: Mapping[str, Any] | None = None,
    rerun: Rerun | None = None,
    allow_inside: str | os.PathLike[str] | None = None,
    flag: str = "--out",
) -> Path:
    """Refuse an output path the overwrite rule forbids (before any work); return it resolved.

    ``kind``: the artifact kind written (a directory), or one of :data:`FILE_KINDS`, a lenpred file
    (``predictions``, ``split``, ``events``, ``profile``, ``report``). ``card``: the run card the output
    is made from; an existing output must record the same card hash. ``inputs``: ``{flag: path or
    paths}`` the command reads; the output may be none of them nor inside one. ``rerun``: what else
    makes an existing output a rerun (:class:`Rerun`). ``allow_inside``: the one run directory this
    output belongs in (``lenpred split`` writes RUN/split.json).
    """
    file = kind in FILE_KINDS
    match, folder = (rerun.match, rerun.folder) if rerun is not None else (None, None)
    p = Path(path).resolve()
    _inputs(p, flag, inputs)
    _container(p, flag, Path(allow_inside).resolve() if allow_inside is not None else None)
    _writable(p, flag)
    if not p.exists():
        return p
    if file and p.is_dir():
        raise DataError(f"{flag} {p} is a directory", f"pass a file path, e.g. {p / _FILE_NAMES.get(kind, kind)}")
    if not file and not p.is_dir():
        raise DataError(f"{flag} {p} exists and is a file", f"pass a directory path for the {kind} output")
    if p.is_dir() and not any(p.iterdir()) or p.is_file() and p.stat().st_size == 0:
        return p
    if folder is not None and p.is_dir() and not (p / _META).exists() and folder(p):
        return p
    found = what_is(p)
    if found is None:
        what = "a non-empty directory" if p.is_dir() else "a file"
        raise DataError(f"{flag} {p} is {what} that is not a lenpred {'file of this kind' if file else 'artifact'}",
                        "pass a new or empty path: lenpred never writes over files it did not make")
    if found.kind != kind:
        raise DataError(f"{flag} {p} holds {found.label()}, not {kind}", _NEW)
    want = _card_hash(card)
    if want is not None and found.card_hash is not None and found.card_hash != want:
        raise DataError(f"{flag} {p} holds a {kind} made from another run (card {found.card_hash}; "
                        f"this one is made from card {want})", _NEW)
    for key, value in (match or {}).items():
        old = (found.meta or {}).get(key)
        if old != value:
            raise DataError(f"{flag} {p} holds a {kind} made from other inputs ({key}: {old!r}, now {value!r})", _NEW)
    return p
