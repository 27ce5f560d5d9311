"""Plain tables of decode lengths (CSV or Parquet) as input to the bound, for lengths sampled elsewhere.

A user who sampled with another tool (a vLLM benchmark log, an evaluation harness) has one row per
response; ``lenpred bound lengths.csv`` gives the bound without a run directory. Columns:

``prompt_id`` (required)
    which prompt the response answers; a prompt needs 2 or more rows (8 or more recommended).
``n_tokens`` (required)
    response length in tokens (EOS excluded): a whole number >= 0.
``stop_reason`` (optional)
    ``eos`` (or OpenAI's / vLLM's ``stop``) for a response that ended, ``length`` for one cut at
    ``max_new_tokens`` (a censored length). Without the column, a response with
    ``n_tokens >= max_new_tokens`` counts as cut, every other one as ended.
``max_new_tokens`` (optional)
    the cap the responses were sampled with: one value for the whole table (the bound is defined
    under one sampling card). Or pass it as ``--max-new-tokens``. Needed when some responses were cut.
``sample_idx``, ``text`` (optional)
    the sample's index within its prompt (else the row order), and the decoded response (for the
    segment-count check; without it that check is reported as not tested).

Rows are analysed sorted by (prompt_id, sample_idx), so the order of the rows does not change a figure.

Every problem is a :class:`~lenpred.errors.DataError` naming the column, the line (CSV lines count
from 1 with the header as line 1; Parquet rows from 1) and the fix. Nothing is guessed silently: a
fractional or negative count, an unknown stop reason or two caps in one table are refused.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field

from lenpred.config import Config
from lenpred.data.rundir import card_hash
from lenpred.errors import DataError
from lenpred.stats.lengths import LengthsOrigin, RunLengths, from_samples

__all__ = ["LengthTableOptions", "is_length_table", "read_length_table", "STOP_REASONS"]

REQUIRED = ("prompt_id", "n_tokens")
OPTIONAL = ("stop_reason", "max_new_tokens", "sample_idx", "text")
# what each accepted stop reason means: True = cut at the cap (censored)
STOP_REASONS = {"eos": False, "stop": False, "length": True}
SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
_COLUMNS_FIX = (
    "a length table has one row per response with columns prompt_id and n_tokens "
    "(optional: stop_reason, max_new_tokens, sample_idx, text)"
)


class LengthTableOptions(Config):
    """How to read a plain length table (``lenpred bound TABLE``)."""

    max_new_tokens: int | None = Field(
        None, description="the cap the lengths were sampled with, for a table without a max_new_tokens column"
    )


def is_length_table(path: str | os.PathLike[str]) -> bool:
    """A file whose suffix names a table format (a run directory is a directory)."""
    p = Path(path)
    return p.suffix.lower() in SUFFIXES and not p.is_dir()


def read_length_table(
    source: pd.DataFrame | str | os.PathLike[str],
    min_samples: int = 2,
    *,
    max_new_tokens: int | None = None,
) -> RunLengths:
    """Read and validate a length table; returns the lengths the bound analysis takes."""
    if isinstance(source, pd.DataFrame):
        df, name, where = source.copy(), "<DataFrame>", _Rows("row", 0)
        digest = hashlib.sha256(pd.util.hash_pandas_object(source, index=False).to_numpy().tobytes()).hexdigest()
    else:
        df, name, where = _read(Path(source))
        digest = _sha256(Path(source))
    if df.empty:
        raise DataError(f"{name} has no rows", _COLUMNS_FIX)
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        have = ", ".join(map(str, df.columns)) or "none"
        raise DataError(f"{name} lacks column(s) {', '.join(missing)} (it has: {have})", _COLUMNS_FIX)

    pid = df["prompt_id"]
    empty = pid.isna() | (pid.astype(str).str.strip() == "")
    if empty.any():
        raise DataError(f"{name}: prompt_id is empty on {where(empty)}", "give every row the id of its prompt")
    n_tokens = _whole_numbers(df["n_tokens"], "n_tokens", name, where, minimum=0)
    cap = _cap(df, name, where, max_new_tokens)
    if "stop_reason" in df.columns:
        truncated = _stop_reasons(df["stop_reason"], name, where)
        if truncated.any() and cap is None:
            raise DataError(
                f"{name} has {int(truncated.sum())} responses cut at the cap (stop_reason 'length') but no "
                "max_new_tokens",
                "add a max_new_tokens column or pass --max-new-tokens N (the cap they were sampled with)",
            )
    else:
        # without stop reasons, a response that reached the cap is taken as cut there (it may have ended
        # with EOS on its last token; the bound cannot tell, and counting it as censored is the safe side)
        truncated = n_tokens >= cap if cap is not None else np.zeros(len(df), dtype=bool)
    inferred = cap is None
    if cap is None:  # nothing was cut: every length is observed, and the longest one bounds the cap
        cap = max(int(n_tokens.max()), 1)
    over = n_tokens > cap
    if over.any():
        i = int(np.flatnonzero(over)[0])
        raise DataError(
            f"{name}: n_tokens is {int(n_tokens[i])} on {where.at(i)}, above max_new_tokens {cap}",
            "check the max_new_tokens column / --max-new-tokens: it is the cap the lengths were sampled with",
        )
    sample_idx = _sample_idx(df, pid.astype(str), name, where)

    table = pd.DataFrame(
        {
            "prompt_id": pid.astype(str).to_numpy(),
            "sample_idx": sample_idx,
            "n_tokens": n_tokens,
            "truncated": truncated,
        }
    )
    if "text" in df.columns:
        table["text"] = df["text"].fillna("").astype(str).to_numpy()
    # prompts by id, samples by index: the figures do not depend on the order of the rows (a benchmark
    # log lists responses as they finish); the bootstrap and the imputation draw in this order
    table = table.sort_values(["prompt_id", "sample_idx"], kind="stable").reset_index(drop=True)
    card = _card(name, digest, cap, inferred)
    origin = LengthsOrigin(cap=cap, card=card, card_hash=card["card_hash"], path=name, source="table")
    return from_samples(table, origin, min_samples=min_samples, fix_corrupt="fix the n_tokens column")


# --------------------------------------------------------------------------------------------- reading
class _Rows:
    """Names rows in messages: CSV line numbers (header = line 1) or 1-based Parquet / DataFrame rows."""

    def __init__(self, word: str, offset: int) -> None:
        self.word, self.offset = word, offset

    def at(self, i: int) -> str:
        return f"{self.word} {i + 1 + self.offset}"

    def __call__(self, mask: Any) -> str:
        idx = np.flatnonzero(np.asarray(mask))
        first = self.at(int(idx[0]))
        return first if len(idx) == 1 else f"{first} (and {len(idx) - 1} more)"


def _read(path: Path) -> tuple[pd.DataFrame, str, _Rows]:
    if path.is_dir():
        raise DataError(f"{path} is a directory, not a length table", "pass a run directory or a .csv/.parquet file")
    if not path.is_file():
        raise DataError(f"length table {path} does not exist", "check the path")
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise DataError(f"{path}: unknown table format {path.suffix!r}", "use a .csv or .parquet file")
    if kind == "csv":
        try:
            # every cell as text: numbers are parsed below, so a bad cell is named instead of coerced
            df = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
        except UnicodeDecodeError as e:
            raise DataError(f"{path} is not UTF-8 text (byte {e.start})", "save the table as UTF-8 CSV") from None
        except (pd.errors.ParserError, pd.errors.EmptyDataError) as e:
            raise DataError(f"{path} is not a readable CSV table ({str(e).strip().splitlines()[0]})",
                            _COLUMNS_FIX) from None
        df.columns = [str(c).strip() for c in df.columns]
        return df.replace({"": None}), str(path), _Rows("line", 1)
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        df = pq.read_table(path).to_pandas()
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path} is not a readable Parquet file ({str(e).splitlines()[0]})",
                        "pass a Parquet file written by pandas / pyarrow, or a CSV") from None
    return df, str(path), _Rows("row", 0)


def _sha256(path: Path) -> str:
    from lenpred.io.fileio import file_sha256

    return file_sha256(path)


def _numbers(col: pd.Series, name: str, table: str, where: _Rows) -> np.ndarray:
    """float values of a column; a missing or non-numeric cell is an error naming its line."""
    if col.isna().any():
        raise DataError(f"{table}: {name} is empty on {where(col.isna())}", f"give every row a {name}")
    if pd.api.types.is_bool_dtype(col):
        raise DataError(f"{table}: {name} holds true/false values, not numbers", f"store {name} as integers")
    values = pd.to_numeric(col, errors="coerce")
    bad = values.isna()
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise DataError(
            f"{table}: {name} is {col.iloc[i]!r} on {where.at(i)}, not a number", f"store {name} as integers"
        )
    return values.to_numpy(dtype=float)


def _whole_numbers(col: pd.Series, name: str, table: str, where: _Rows, minimum: int) -> np.ndarray:
    v = _numbers(col, name, table, where)
    frac = ~np.isfinite(v) | (v != np.round(v))
    if frac.any():
        i = int(np.flatnonzero(frac)[0])
        raise DataError(
            f"{table}: {name} is {col.iloc[i]} on {where.at(i)}: token counts are whole numbers",
            f"store {name} as integers (a fractional count is not a length in tokens)",
        )
    low = v < minimum
    if low.any():
        i = int(np.flatnonzero(low)[0])
        raise DataError(
            f"{table}: {name} is {int(v[i])} on {where.at(i)}, below {minimum}", f"fix the {name} column"
        )
    return v.astype(np.int64)


def _cap(df: pd.DataFrame, table: str, where: _Rows, given: int | None) -> int | None:
    if given is not None and given < 1:
        raise DataError(f"--max-new-tokens {given} must be positive", "pass the cap the lengths were generated under (1 or more)")
    if "max_new_tokens" not in df.columns:
        return given
    caps = _whole_numbers(df["max_new_tokens"], "max_new_tokens", table, where, minimum=1)
    values = list(dict.fromkeys(caps.tolist()))
    if len(values) > 1:
        i = int(np.flatnonzero(caps != caps[0])[0])
        raise DataError(
            f"{table}: max_new_tokens differs between rows ({values[0]} on {where.at(0)}, {values[1]} on "
            f"{where.at(i)}); the bound is defined under one sampling card",
            "split the table by max_new_tokens and run `lenpred bound` on each part",
        )
    cap = int(values[0])
    if given is not None and given != cap:
        raise DataError(
            f"--max-new-tokens {given} contradicts the table's max_new_tokens column ({cap})",
            "leave --max-new-tokens out: the column gives the cap",
        )
    return cap


def _stop_reasons(col: pd.Series, table: str, where: _Rows) -> np.ndarray:
    valid = ", ".join(f"{k}" + (" (= eos)" if k == "stop" else "") for k in STOP_REASONS)
    if col.isna().any():
        raise DataError(f"{table}: stop_reason is empty on {where(col.isna())}", f"use one of: {valid}")
    text = col.astype(str).str.strip().str.lower()
    bad = ~text.isin(list(STOP_REASONS))
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise DataError(
            f"{table}: stop_reason {col.iloc[i]!r} on {where.at(i)} is not one lenpred knows",
            f"use one of: {valid}",
        )
    return text.map(STOP_REASONS).to_numpy(dtype=bool)


def _sample_idx(df: pd.DataFrame, pid: pd.Series, table: str, where: _Rows) -> np.ndarray:
    if "sample_idx" not in df.columns:
        return pid.groupby(pid, sort=False).cumcount().to_numpy(dtype=np.int64)
    idx = _whole_numbers(df["sample_idx"], "sample_idx", table, where, minimum=0)
    dup = pd.DataFrame({"p": pid.to_numpy(), "i": idx}).duplicated()
    if dup.any():
        i = int(np.flatnonzero(dup.to_numpy())[0])
        raise DataError(
            f"{table}: prompt {pid.iloc[i]!r} has sample_idx {int(idx[i])} twice (again on {where.at(i)})",
            "give each response of a prompt its own sample_idx, or drop the column",
        )
    return idx


def _card(name: str, digest: str, cap: int, inferred: bool) -> dict[str, Any]:
    """A minimal card for a table: its identity is the file's content and the cap."""
    card: dict[str, Any] = {
        "model": {"id": None},
        "prompts": {"source": "length-table", "path": name, "sha256": digest},
        "sampling": {"max_new_tokens": cap, **({"max_new_tokens_inferred": True} if inferred else {})},
        "engine": {"name": "external"},
    }
    card["card_hash"] = card_hash(card)
    return card
