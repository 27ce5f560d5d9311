"""One artifact contract: a directory written atomically, with ``meta.json`` saying what made it.

Every derived thing lenpred writes (bound results, simulator results, features, heads, draft
checkpoints, predictions) is an *artifact directory*::

    ART/
      meta.json               kind, schema_version, lenpred_version, created_at, config,
                              card_hash, card_scope, card (the card fields it depends on),
                              files (name -> sha256), and anything the writer adds
      weights.safetensors     tensors, when there are any (never pickle)
      *.json / *.parquet      whatever else the kind needs

Writing builds the whole directory under a temporary name beside the target and renames it into
place, so a reader sees the old artifact or the complete new one, never a mix; a killed writer
leaves only a ``.NAME.tmp-*`` folder that the next write removes.

**Compatibility rule.** An artifact records the card fields it depends on, chosen by its
``card_scope``:

* ``run`` -- everything that identifies the run (its card hash): bound results, simulator results
  on a run, predictions, features of that run's prompts;
* ``model+sampling`` -- the model (weight fingerprint, tokenizer, vocabulary, chat template and
  system prompt) and the whole sampling section, **not** the prompt dataset: trained heads and
  draft checkpoints. A head trained on ShareGPT may be evaluated on another prompt set collected
  under the same model and sampling (that is how transfer is measured); any other difference is
  refused, naming the field;
* ``model`` -- the model alone (a draft head for a target does not depend on sampling).

:func:`check_card` applies the rule and names the first mismatching field and the fix.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lenpred import __version__
from lenpred.errors import CardMismatchError, DataError
from lenpred.io.fileio import atomic_write_json, file_sha256
from lenpred.io.outputs import Rerun, check_out  # the overwrite rule, one function for every writer

__all__ = [
    "Artifact", "ArtifactHeader", "CARD_SCOPES", "card_fields", "check_card", "check_finite", "check_out",
    "load_artifact", "write_artifact", "is_artifact", "Rerun",
]

META = "meta.json"
WEIGHTS = "weights.safetensors"

# card fields (dotted paths into card.json) each scope depends on
_MODEL_FIELDS = (
    "model.fingerprint", "model.tokenizer", "model.vocab_size", "model.eos_token",
    "model.chat_template_sha256", "prompts.chat_template", "prompts.system_prompt",
)
_SAMPLING_FIELDS = (
    "sampling.temperature", "sampling.top_p", "sampling.top_k", "sampling.min_p",
    "sampling.repetition_penalty", "sampling.frequency_penalty", "sampling.presence_penalty",
    "sampling.max_new_tokens", "sampling.seed",
)
CARD_SCOPES: dict[str, tuple[str, ...]] = {
    "model": _MODEL_FIELDS,
    "model+sampling": _MODEL_FIELDS + _SAMPLING_FIELDS,
    "run": ("card_hash",),
}


def _get(card: Mapping[str, Any], dotted: str) -> Any:
    cur: Any = card
    for part in dotted.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return cur


def card_fields(card: Mapping[str, Any], scope: str) -> dict[str, Any]:
    """The card fields an artifact of ``scope`` depends on, as a flat ``{dotted.path: value}``."""
    if scope not in CARD_SCOPES:
        raise ValueError(f"unknown card scope {scope!r}; use one of {sorted(CARD_SCOPES)}")
    if scope == "run":
        from lenpred.io.card import card_hash

        return {"card_hash": card.get("card_hash") or card_hash(dict(card))}
    return {k: _get(card, k) for k in CARD_SCOPES[scope]}


def check_card(meta: Mapping[str, Any], card: Mapping[str, Any], *, what: str, against: str = "this run") -> None:
    """Refuse to combine an artifact with a run whose card differs where the artifact depends on it.

    ``what`` names the artifact in the message (e.g. ``head out/heads/mlp``); ``against`` the other side.
    """
    scope = meta.get("card_scope")
    recorded = meta.get("card")
    if scope is None or recorded is None:
        raise CardMismatchError(f"{what} records no run card", "re-create it with this version of lenpred")
    now = card_fields(card, scope)
    for k, v in recorded.items():
        if now.get(k) != v:
            hint = {
                "model+sampling": "use a run collected with the same model and sampling card, or retrain on one",
                "model": "use a run of the model this artifact was made for",
                "run": "use the run it was made from, or re-create it for this run",
            }[scope]
            raise CardMismatchError(
                f"{what} was made under another card than {against} ({k}: {v!r} != {now.get(k)!r})", hint
            )


def is_artifact(path: str | os.PathLike[str]) -> bool:
    return (Path(path) / META).is_file()


@dataclass(frozen=True)
class Artifact:
    """A loaded artifact directory: its ``meta`` and lazy access to its files."""

    path: Path
    meta: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.meta["kind"])

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.meta.get("config") or {})

    def file(self, name: str) -> Path:
        p = self.path / name
        if not p.is_file():
            raise DataError(f"{self.path} lacks {name}", "the artifact is incomplete: re-create it")
        return p

    def tensors(self, framework: str = "numpy") -> dict[str, Any]:
        """Every tensor in ``weights.safetensors`` (numpy arrays, or torch tensors with ``"pt"``)."""
        from safetensors import SafetensorError
        from safetensors.numpy import load_file as load_np

        p = self.file(WEIGHTS)
        try:
            if framework == "pt":
                from safetensors.torch import load_file as load_pt

                return dict(load_pt(str(p)))
            return dict(load_np(str(p)))
        except (SafetensorError, OSError, ValueError) as e:
            raise DataError(f"{p} is not a readable safetensors file ({e})".splitlines()[0],
                            "re-create the artifact") from None

    def read_json(self, name: str) -> Any:
        p = self.file(name)
        try:
            return json.loads(p.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DataError(f"{p} is not valid JSON ({e})", "re-create the artifact") from None

    def table(self, name: str) -> Any:
        import pandas as pd
        import pyarrow as pa

        p = self.file(name)
        try:
            return pd.read_parquet(p)
        except (pa.ArrowException, OSError, ValueError) as e:
            raise DataError(f"{p} is not a readable Parquet file ({e})".splitlines()[0],
                            "re-create the artifact") from None

    def check_card(self, card: Mapping[str, Any], against: str = "this run") -> None:
        check_card(self.meta, card, what=f"{self.kind} {self.path}", against=against)


def _jsonable(config: Any) -> Any:
    if config is None:
        return {}
    if hasattr(config, "to_dict"):
        return config.to_dict()
    if hasattr(config, "model_dump"):
        return config.model_dump(mode="json")
    return config


@dataclass(frozen=True)
class ArtifactHeader:
    """What an artifact's ``meta.json`` says besides its files: the ``kind`` and ``schema_version``, the
    ``config`` it was made with, the run ``card`` it was made from (the fields of ``card_scope`` are
    recorded, plus the run's card hash), and writer-specific ``meta`` fields."""

    kind: str
    schema_version: int
    config: Any = None
    card: Mapping[str, Any] | None = None
    card_scope: str = "run"
    meta: Mapping[str, Any] | None = None


def write_artifact(
    path: str | os.PathLike[str],
    header: ArtifactHeader,
    *,
    tensors: Mapping[str, Any] | None = None,
    json_files: Mapping[str, Any] | None = None,
    tables: Mapping[str, Any] | None = None,
    files: Mapping[str, bytes] | None = None,
) -> Artifact:
    """Write an artifact directory atomically and return it loaded.

    ``header`` goes into ``meta.json``; ``tensors`` into ``weights.safetensors`` (numpy arrays or torch
    tensors, contiguous); ``json_files`` are written as JSON, ``tables`` (pandas DataFrames or pyarrow
    Tables) as Parquet, ``files`` as raw bytes. An existing artifact at ``path`` is replaced; an existing
    non-empty directory that is not an artifact, or a file, is refused (never write beside a user's own
    files).
    """
    h = header
    dest = Path(path)
    if dest.exists() and not dest.is_dir():
        raise DataError(f"{dest} exists and is a file", "pass a directory path for the output")
    if dest.is_dir() and any(dest.iterdir()) and not is_artifact(dest):
        raise DataError(f"{dest} is a non-empty directory that is not a lenpred artifact",
                        "pass a new or empty output directory")
    dest.parent.mkdir(parents=True, exist_ok=True)
    for stale in dest.parent.glob(f".{dest.name}.tmp-*"):  # left by a writer that was killed
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        names: list[str] = []
        if tensors:
            _save_tensors(tmp / WEIGHTS, tensors)
            names.append(WEIGHTS)
        for name, obj in (json_files or {}).items():
            atomic_write_json(tmp / name, obj)
            names.append(name)
        for name, table in (tables or {}).items():
            _save_table(tmp / name, table)
            names.append(name)
        for name, data in (files or {}).items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_bytes(data)
            names.append(name)
        m: dict[str, Any] = {
            "kind": h.kind,
            "schema_version": int(h.schema_version),
            "lenpred_version": __version__,
            "created_at": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "config": _jsonable(h.config),
        }
        if h.card is not None:
            m["card_scope"] = h.card_scope
            m["card"] = card_fields(h.card, h.card_scope)
            m["card_hash"] = card_fields(h.card, "run")["card_hash"]
        m.update(h.meta or {})
        for n in names:  # some writers (mkstemp, safetensors) make 0600 files; artifacts are shared
            os.chmod(tmp / n, 0o644)
        m["files"] = {n: file_sha256(tmp / n) for n in sorted(names)}
        atomic_write_json(tmp / META, m)
        os.chmod(tmp, 0o755)
        _swap_into_place(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Artifact(dest, m)


def _swap_into_place(tmp: Path, dest: Path) -> None:
    if not dest.exists():
        os.replace(tmp, dest)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
    old.rmdir()
    os.replace(dest, old)  # two renames: between them a reader finds no artifact, never half of one
    try:
        os.replace(tmp, dest)
    except BaseException:
        os.replace(old, dest)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _save_tensors(path: Path, tensors: Mapping[str, Any]) -> None:
    first = next(iter(tensors.values()))
    if type(first).__module__.startswith("torch"):
        from safetensors.torch import save_file as save_pt

        save_pt({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(path))
    else:
        from safetensors.numpy import save_file as save_np

        save_np({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(path))


def _save_table(path: Path, table: Any) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not isinstance(table, pa.Table):
        table = pa.Table.from_pandas(table, preserve_index=False)
    pq.write_table(table, path, compression="zstd")


def load_artifact(
    path: str | os.PathLike[str],
    *,
    kind: str | tuple[str, ...] | None = None,
    schema_versions: tuple[int, ...] | None = None,
    card: Mapping[str, Any] | None = None,
    verify: bool = True,
    what: str = "artifact",
) -> Artifact:
    """Open an artifact with strict checks: it exists, its ``meta.json`` parses, it is of ``kind``
    at a supported schema version, its files are intact (sha256, with ``verify``), and -- given
    ``card`` -- it is compatible with that run card under its own scope."""
    p = Path(path)
    written_by = f"a directory written by lenpred{f' ({kind})' if isinstance(kind, str) else ''}"
    if not p.exists():
        raise DataError(f"{what} {p} does not exist", f"check the path; pass {written_by}")
    if not p.is_dir() or not (p / META).is_file():
        raise DataError(f"{p} is not a lenpred {what} (no {META})", f"pass {written_by}")
    try:
        meta = json.loads((p / META).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{p / META} is not valid JSON ({e})", "re-create the artifact") from None
    if not isinstance(meta, dict) or "kind" not in meta or "schema_version" not in meta:
        raise DataError(f"{p / META} is not a lenpred artifact header (no kind / schema_version)",
                        "re-create the artifact")
    kinds = (kind,) if isinstance(kind, str) else kind
    if kinds is not None and meta["kind"] not in kinds:
        raise DataError(f"{p} is a {meta['kind']} artifact, expected {' or '.join(kinds)}",
                        f"pass a {' or '.join(kinds)} directory")
    v = meta["schema_version"]
    if schema_versions is not None and (not isinstance(v, int) or isinstance(v, bool)):
        raise DataError(f"{p / META}: schema_version is {v!r}, a JSON {type(v).__name__}, not an integer",
                        "restore meta.json as lenpred wrote it, or re-create the artifact")
    if schema_versions is not None and meta["schema_version"] not in schema_versions:
        raise DataError(
            f"{p} is a {meta['kind']} of schema version {meta['schema_version']!r} (written by lenpred "
            f"{meta.get('lenpred_version', '?')}); this lenpred reads version(s) {list(schema_versions)}",
            "re-create it with this version of lenpred",
        )
    if verify:
        for name, sha in (meta.get("files") or {}).items():
            f = p / name
            if not f.is_file():
                raise DataError(f"{p} lacks {name}, which its meta.json lists", "re-create the artifact")
            if file_sha256(f) != sha:
                raise DataError(f"{f} was changed or corrupted after it was written (sha256 differs)",
                                "re-create the artifact")
    art = Artifact(p, meta)
    if card is not None:
        art.check_card(card)
    return art


def check_finite(tensors: Mapping[str, Any], what: str) -> None:
    """Refuse weights with NaN or infinite values: such a head loads fine and then predicts garbage
    (or, sampling, dies deep in the loop). ``tensors``: numpy arrays or torch tensors."""
    for name, t in tensors.items():
        if hasattr(t, "is_floating_point"):  # torch
            n = int((~t.isfinite()).sum()) if t.is_floating_point() else 0
        else:
            a = np.asarray(t)
            n = int((~np.isfinite(a)).sum()) if a.dtype.kind == "f" else 0
        if n:
            raise DataError(f"{what}: tensor {name} has {n} NaN or infinite value(s)",
                            "the weights are damaged (a diverged training run?): retrain the head or restore it")
