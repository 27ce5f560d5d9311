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
"""

from __future__ import annotations

import hashlib
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
from lenpred.fileio import atomic_write_bytes, atomic_write_json, atomic_write_table, canonical_json

__all__ = ["RunDir", "card_hash", "atomic_write_bytes", "atomic_write_json", "atomic_write_table", "canonical_json"]

SCHEMA = "lenpred.run/1"
CARD = "card.json"
PROMPTS = "prompts.parquet"
SAMPLES = "samples.parquet"
# The parts of a card that define the distribution of the samples; everything else is bookkeeping.
IDENTITY_KEYS = ("schema", "model", "prompts", "sampling", "engine")
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


def card_hash(card: dict[str, Any]) -> str:
    """Hash of the identity part of a card (16 hex chars). Bookkeeping fields do not change it."""
    ident = {k: card.get(k) for k in IDENTITY_KEYS}
    return hashlib.sha256(canonical_json(ident).encode()).hexdigest()[:16]


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
            card = json.loads((p / CARD).read_text())
        except json.JSONDecodeError as e:
            raise DataError(f"{p / CARD} is not valid JSON ({e})", "restore it from git or re-collect") from e
        if card.get("schema") != SCHEMA:
            raise DataError(f"{p / CARD} has schema {card.get('schema')!r}, expected {SCHEMA!r}")
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
            if existing.card_hash != h:
                diff = _diff_identity(existing.card, card)
                raise CardMismatchError(
                    f"{p} holds a run made under another card ({diff})",
                    "use the same arguments as the existing run, or a new --run directory",
                )
            return existing
        card["card_hash"] = h
        card.setdefault("created_by", {"lenpred_version": __version__})
        atomic_write_json(p / CARD, card)
        (p / SAMPLES).mkdir(parents=True, exist_ok=True)
        return cls(p, card)

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
        table = pq.read_table(self.prompts_path)
        self._check_meta(table.schema, self.prompts_path)
        return table.to_pandas().sort_values("idx").reset_index(drop=True)

    def write_prompts(self, df: pd.DataFrame) -> None:
        """Write the prompt table. Existing prompts must keep their ids and order (extension only)."""
        for col in ("prompt_id", "idx", "text", "n_prompt_tokens"):
            if col not in df.columns:
                raise DataError(f"prompt table lacks column {col!r}")
        if df["prompt_id"].duplicated().any():
            raise DataError("prompt table has duplicate prompt_id values")
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
        nums = [int(m.group(1)) for p in self.shard_paths() if (m := re.match(r"part-(\d+)", p.name))]
        return self.samples_dir / f"part-{(max(nums) + 1 if nums else 0):05d}.parquet"

    def append_samples(self, rows: Iterable[dict[str, Any]] | pd.DataFrame) -> Path | None:
        """Write one new shard atomically. Returns its path (None if ``rows`` is empty)."""
        df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
        if df.empty:
            return None
        bad = set(df["stop_reason"]) - set(STOP_REASONS)
        if bad:
            raise DataError(f"stop_reason must be one of {STOP_REASONS}, got {sorted(bad)}")
        if "seed" not in df.columns:
            df = df.assign(seed=-1)
        if "text" not in df.columns:
            df = df.assign(text="")
        if "token_ids" not in df.columns:
            df = df.assign(token_ids=[[] for _ in range(len(df))])
        done = self.done_keys()
        keys = list(zip(df["prompt_id"], df["sample_idx"], strict=True))
        if len(set(keys)) != len(keys) or any(k in done for k in keys):
            raise DataError("refusing to write duplicate (prompt_id, sample_idx) samples")
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
        tables = []
        for s in shards:
            t = pq.read_table(s, columns=columns)
            self._check_meta(t.schema, s)  # the file's metadata comes along even with a column subset
            tables.append(t)
        df = pa.concat_tables(tables).to_pandas()
        if "prompt_id" in df.columns and "sample_idx" in df.columns:
            order = {pid: i for i, pid in enumerate(self.prompts()["prompt_id"])} if self.has_prompts() else {}
            df["_o"] = df["prompt_id"].map(order).fillna(len(order))
            df = df.sort_values(["_o", "sample_idx"]).drop(columns="_o").reset_index(drop=True)
        return df

    def done_keys(self) -> set[tuple[str, int]]:
        """Keys of all written samples (read once, then kept up to date by :meth:`append_samples`)."""
        if self._done is None:
            df = self.samples(columns=["prompt_id", "sample_idx"])
            self._done = set(zip(df["prompt_id"].astype(str), df["sample_idx"].astype(int), strict=True))
        return self._done

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
