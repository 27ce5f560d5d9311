"""The run directory: one model, one prompt set, one sampling card, K samples per prompt.

Layout::

    RUN/
      card.json                 what made the run (hashed identity + bookkeeping)
      prompts.parquet           prompt_id, idx, text, n_prompt_tokens, prompt_token_ids, source fields
      samples.parquet/          a directory of shards, each written to a temp name then renamed
        part-00000.parquet      prompt_id, sample_idx, n_tokens, stop_reason, text, token_ids, ...

Every shard carries the card hash in its Parquet metadata; reading refuses shards made under
another card. A shard is either fully there (atomic ``os.replace``) or not there at all, so a
collection killed at any moment loses at most the samples of the shard it was filling and never
leaves a half-written file. Duplicates are impossible as long as writers derive their job list
from :meth:`RunDir.done_keys`.

A shard damaged afterwards (a truncated copy, a foreign file named ``part-*.parquet``) is named by
every reader (:class:`CorruptShardError`); ``lenpred collect`` sets it aside as
``part-NNNNN.parquet.corrupt`` (:meth:`RunDir.set_aside`) and regenerates its samples, which the
per-sample seeds make the same samples.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from lenpred import __version__
from lenpred.errors import CardMismatchError, DataError
from lenpred.io.card import IDENTITY_KEYS, card_hash
from lenpred.io.fileio import atomic_write_bytes, atomic_write_json, atomic_write_table, canonical_json

__all__ = [
    "CorruptShardError",
    "RunDir",
    "card_hash",
    "check_run_target",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_table",
    "canonical_json",
]

SCHEMA = "lenpred.run/1"
CARD = "card.json"
PROMPTS = "prompts.parquet"
SAMPLES = "samples.parquet"
# The parts of a card that define the distribution of the samples; everything else is bookkeeping.
STOP_REASONS = ("eos", "length")

SAMPLES_SCHEMA = pa.schema(
    [
        ("prompt_id", pa.string()),
        ("sample_idx", pa.int32()),
        ("n_tokens", pa.int32()),
        ("stop_reason", pa.string()),
        ("text", pa.string()),
        ("token_ids", pa.list_(pa.int32())),
        ("seed", pa.int64()),
    ]
)


class CorruptShardError(DataError):
    """A file in ``samples.parquet/`` that cannot be read as Parquet (truncated, or not Parquet)."""

    def __init__(self, path: Path, reason: str) -> None:
        self.path = Path(path)
        super().__init__(
            f"shard {path} is not a readable Parquet file ({reason})",
            "rerun `lenpred collect` with the run's arguments: it sets the shard aside as .corrupt and "
            "regenerates its samples (or move the file out of samples.parquet/)",
        )


def _arrow_reason(e: BaseException) -> str:
    """Arrow's reason in a few words: without the path it repeats, its first sentence only."""
    text = " ".join(str(e).split()) or type(e).__name__
    text = re.sub(r"^Could not open Parquet input source '[^']*': ", "", text)
    if text.startswith("Parquet magic bytes not found in footer"):
        return "no Parquet footer: truncated, or not a Parquet file"
    return text.split(". ")[0][:120]


def check_run_target(path: str | os.PathLike[str]) -> None:
    """Refuse a path that cannot hold a new run: a file, or a non-empty directory that is not a run
    (writing a card beside someone's own files would mix them with the run's)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise DataError(f"{p} is a file, not a run directory", "pass a directory path (a new one, or an existing run)")
    if p.is_dir() and not (p / CARD).exists() and any(p.iterdir()):
        raise DataError(
            f"{p} is a non-empty directory that is not a lenpred run (no {CARD})",
            "pass a new or empty directory, or the directory of an existing run",
        )


class RunDir:
    """Read/write access to one run directory. Use :meth:`open` or :meth:`create`."""

    def __init__(self, path: Path, card: dict[str, Any]) -> None:
        self.path = Path(path)
        self.card = card
        self.card_hash = card_hash(card)
        self._done: set[tuple[str, int]] | None = None  # cache of written keys (this process appends)

    # ---------------------------------------------------------------- opening
    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> RunDir:
        p = Path(path)
        if not (p / CARD).is_file():
            raise DataError(
                f"{p} is not a lenpred run directory (no {CARD})",
                "pass a directory made by `lenpred collect`",
            )
        try:
            card = json.loads((p / CARD).read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DataError(f"{p / CARD} is not valid JSON ({e})", "restore it from git or re-collect") from None
        if not isinstance(card, dict):
            raise DataError(f"{p / CARD} is a JSON {type(card).__name__}, not a run card (an object)",
                            "restore it from git or re-collect")
        if card.get("schema") != SCHEMA:
            raise DataError(f"{p / CARD} has schema {card.get('schema')!r}, expected {SCHEMA!r}",
                            "use the lenpred version that wrote the run, or re-collect it")
        if "card_hash" in card and card["card_hash"] != card_hash(card):
            raise CardMismatchError(
                f"{p / CARD} was edited: its identity no longer matches its recorded hash",
                "restore card.json; a different card needs a new run directory",
            )
        return cls(p, card)

    @classmethod
    def create(cls, path: str | os.PathLike[str], card: dict[str, Any]) -> RunDir:
        """Create a run directory, or open an existing one whose card has the same identity."""
        p = Path(path)
        card = dict(card)
        card.setdefault("schema", SCHEMA)
        h = card_hash(card)
        if (p / CARD).exists():
            existing = cls.open(p)
            existing.require_card(card)
            return existing
        check_run_target(p)
        card["card_hash"] = h
        card.setdefault("created_by", {"lenpred_version": __version__})
        atomic_write_json(p / CARD, card)
        (p / SAMPLES).mkdir(parents=True, exist_ok=True)
        return cls(p, card)

    def require_card(self, card: dict[str, Any]) -> None:
        """Refuse a card whose identity differs from this run's, naming the differing fields."""
        card = {"schema": SCHEMA, **card}
        if card_hash(card) != self.card_hash:
            raise CardMismatchError(
                f"{self.path} holds a run made under another card ({_diff_identity(self.card, card)})",
                "use the same arguments as the existing run, or a new --run directory",
            )

    def update_bookkeeping(self, **fields: Any) -> None:
        """Update non-identity fields of the card (targets, runtime notes) atomically."""
        for k in fields:
            if k in IDENTITY_KEYS or k == "card_hash":
                raise ValueError(f"{k} is part of the card identity and cannot change")
        self.card.update(fields)
        atomic_write_json(self.path / CARD, self.card)

    # ---------------------------------------------------------------- prompts
    @property
    def prompts_path(self) -> Path:
        return self.path / PROMPTS

    def has_prompts(self) -> bool:
        return self.prompts_path.is_file()

    def prompts(self) -> pd.DataFrame:
        if not self.has_prompts():
            raise DataError(f"{self.path} has no {PROMPTS} yet", "run `lenpred collect` first")
        try:
            table = pq.read_table(self.prompts_path)
        except (pa.ArrowException, OSError) as e:
            raise DataError(
                f"{self.prompts_path} is not a readable Parquet file ({_arrow_reason(e)})",
                "restore it from a copy (git); the prompt list of an existing run is never rebuilt",
            ) from None
        self._check_meta(table.schema, self.prompts_path)
        return table.to_pandas().sort_values("idx").reset_index(drop=True)

    def write_prompts(self, df: pd.DataFrame) -> None:
        """Write the prompt table. Existing prompts must keep their ids and order (extension only)."""
        for col in ("prompt_id", "idx", "text", "n_prompt_tokens"):
            if col not in df.columns:
                raise DataError(f"prompt table lacks column {col!r}",
                                "give it the columns prompt_id, idx, text and n_prompt_tokens")
        if df["prompt_id"].duplicated().any():
            raise DataError("prompt table has duplicate prompt_id values", "give every prompt its own id")
        if self.has_prompts():
            old = self.prompts()
            merged = old.merge(df[["prompt_id", "idx"]], on="prompt_id", how="left", suffixes=("", "_new"))
            if merged["idx_new"].isna().any() or (merged["idx"] != merged["idx_new"]).any():
                raise CardMismatchError(
                    f"{self.path}: the prompt list no longer starts with the prompts already collected",
                    "use the same prompt source and seed as the existing run",
                )
        table = pa.Table.from_pandas(df.sort_values("idx").reset_index(drop=True), preserve_index=False)
        atomic_write_table(self.prompts_path, self._with_meta(table))

    # ---------------------------------------------------------------- samples
    @property
    def samples_dir(self) -> Path:
        return self.path / SAMPLES

    def shard_paths(self) -> list[Path]:
        if not self.samples_dir.is_dir():
            return []
        return sorted(p for p in self.samples_dir.glob("part-*.parquet"))

    def clean_temp(self) -> int:
        """Remove temp files left by a writer that was killed (they were never renamed in)."""
        n = 0
        for d in (self.path, self.samples_dir):
            if d.is_dir():
                for t in d.glob(".*.tmp"):
                    t.unlink(missing_ok=True)
                    n += 1
        return n

    def _next_shard_path(self) -> Path:
        # numbers of shards set aside count too, so a new shard never takes a .corrupt file's name
        names = (p.name for p in self.samples_dir.glob("part-*")) if self.samples_dir.is_dir() else iter(())
        nums = [int(m.group(1)) for name in names if (m := re.match(r"part-(\d+)", name))]
        return self.samples_dir / f"part-{(max(nums) + 1 if nums else 0):05d}.parquet"

    def append_samples(self, rows: Iterable[dict[str, Any]] | pd.DataFrame) -> Path | None:
        """Write one new shard atomically. Returns its path (None if ``rows`` is empty)."""
        df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
        if df.empty:
            return None
        bad = set(df["stop_reason"]) - set(STOP_REASONS)
        if bad:
            raise DataError(f"stop_reason must be one of {STOP_REASONS}, got {sorted(bad)}",
                            f"map the engine's finish reasons to {', '.join(STOP_REASONS)}")
        if "seed" not in df.columns:
            df = df.assign(seed=-1)
        if "text" not in df.columns:
            df = df.assign(text="")
        if "token_ids" not in df.columns:
            df = df.assign(token_ids=[[] for _ in range(len(df))])
        done = self.done_keys()
        keys = list(zip(df["prompt_id"], df["sample_idx"], strict=True))
        if len(set(keys)) != len(keys) or any(k in done for k in keys):
            raise DataError("refusing to write duplicate (prompt_id, sample_idx) samples",
                            "write each sample once; a rerun of `lenpred collect` skips the samples it has")
        table = pa.Table.from_pandas(df[[f.name for f in SAMPLES_SCHEMA]], schema=SAMPLES_SCHEMA, preserve_index=False)
        path = self._next_shard_path()
        atomic_write_table(path, self._with_meta(table))
        done.update(keys)
        return path

    def samples(self, columns: list[str] | None = None) -> pd.DataFrame:
        """All samples, sorted by (prompt order, sample_idx)."""
        shards = self.shard_paths()
        if not shards:
            cols = columns or [f.name for f in SAMPLES_SCHEMA]
            return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
        df = pa.concat_tables([self.read_shard(s, columns) for s in shards]).to_pandas()
        if "prompt_id" in df.columns and "sample_idx" in df.columns:
            order = {pid: i for i, pid in enumerate(self.prompts()["prompt_id"])} if self.has_prompts() else {}
            df["_o"] = df["prompt_id"].map(order).fillna(len(order))
            df = df.sort_values(["_o", "sample_idx"]).drop(columns="_o").reset_index(drop=True)
        return df

    def read_shard(self, path: Path, columns: list[str] | None = None) -> pa.Table:
        """One shard, checked: unreadable -> :class:`CorruptShardError`, foreign -> CardMismatchError."""
        try:
            t = pq.read_table(path, columns=columns)
        except (pa.ArrowException, OSError) as e:
            raise CorruptShardError(path, _arrow_reason(e)) from None
        self._check_meta(t.schema, path)  # the file's metadata comes along even with a column subset
        return t

    def done_keys(self) -> set[tuple[str, int]]:
        """Keys of all written samples (read once, then kept up to date by :meth:`append_samples`)."""
        if self._done is None:
            df = self.samples(columns=["prompt_id", "sample_idx"])
            self._done = set(zip(df["prompt_id"].astype(str), df["sample_idx"].astype(int), strict=True))
        return self._done

    def scan_shards(self) -> tuple[set[tuple[str, int]], list[Path]]:
        """(keys of the readable shards, unreadable shards), reading nothing but the key columns.

        A shard made under another card still raises: it is someone else's data, not damage.
        """
        keys: set[tuple[str, int]] = set()
        corrupt: list[Path] = []
        for s in self.shard_paths():
            try:
                t = self.read_shard(s, ["prompt_id", "sample_idx"])
            except CorruptShardError:
                corrupt.append(s)
                continue
            keys.update(zip(map(str, t.column("prompt_id").to_pylist()), map(int, t.column("sample_idx").to_pylist()), strict=True))
        return keys, corrupt

    def set_aside(self, shard: Path) -> Path:
        """Rename an unreadable shard to ``<name>.corrupt`` (kept for inspection, no longer read);
        its samples count as missing again. Returns the new path."""
        shard = Path(shard)
        if shard.parent != self.samples_dir or not shard.is_file():
            raise ValueError(f"{shard} is not a shard of {self.path}")
        target = shard.with_name(shard.name + ".corrupt")
        k = 1
        while target.exists():
            target = shard.with_name(f"{shard.name}.corrupt.{k}")
            k += 1
        os.replace(shard, target)
        self._done = None
        return target

    # ---------------------------------------------------------------- provenance
    def _with_meta(self, table: pa.Table) -> pa.Table:
        meta = dict(table.schema.metadata or {})
        meta[b"lenpred.card_hash"] = self.card_hash.encode()
        meta[b"lenpred.version"] = __version__.encode()
        return table.replace_schema_metadata(meta)

    def _check_meta(self, schema: pa.Schema, path: Path) -> None:
        got = (schema.metadata or {}).get(b"lenpred.card_hash", b"").decode()
        if got != self.card_hash:
            raise CardMismatchError(
                f"{path} was made under card {got or '(none)'}, this run's card is {self.card_hash}",
                "move the foreign file out; runs under different cards cannot be mixed",
            )


def _diff_identity(a: dict[str, Any], b: dict[str, Any]) -> str:
    diffs = []
    for key in IDENTITY_KEYS:
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y)):
                if x.get(k) != y.get(k):
                    diffs.append(f"{key}.{k}: {x.get(k)!r} != {y.get(k)!r}")
        elif x != y:
            diffs.append(f"{key}: {x!r} != {y!r}")
    return "; ".join(diffs[:4]) or "identity differs"
