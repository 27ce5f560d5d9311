"""Predictions are data: one Parquet table that every predictor writes and every consumer reads.

Columns (one row per sample, or per prompt with ``sample_idx = -1`` for a prediction that does
not depend on the sample, as every prompt-only predictor's does):

=====================  ===============  ==========================================================
column                 type             meaning
=====================  ===============  ==========================================================
``prompt_id``          string           the run's prompt id
``sample_idx``         int32            the sample, or -1 for "every sample of this prompt"
``pred_tokens``        float64          predicted total output tokens (at arrival, from the prompt)
``spread``             float64, null    predictive standard deviation (tokens), where known
``q10 q50 q90``        float64, null    predictive quantiles (tokens), where known
``repred_gen``         list<int32>      re-predictions during decoding: tokens generated so far ...
``repred_remaining``   list<float64>    ... and the predicted *remaining* tokens at that point
``repred_q10 q90``     list<float64>    ... and, where known, its 10% / 90% quantiles (remaining tokens)
``dist_tokens``        list<float64>    predictive distribution of the total tokens as equal-weight
                                        support points (e.g. the prompt's other samples, or
                                        quantiles at levels (i + 1/2) / n), where known
=====================  ===============  ==========================================================

How a scheduler reads a row's distribution (``lenpred.sched.dists``): ``dist_tokens`` when present;
else a two-piece normal through q10 / q50 / q90 read at 16 levels and clipped to [1, max_new_tokens];
else a normal N(pred_tokens, spread). Without any of them a row has no distribution, and
distribution-aware policies (``gittins``, ``risk``) refuse the table.

The file's Parquet metadata (key ``lenpred.predictions``) says what made it: ``made_by`` (the
predictor's registry name, or a synthetic noise model), its ``config``, the run's ``card_hash``
and card fields, ``lenpred_version`` and ``created_at``. Bench, the simulator and the service read
predictions only through :func:`read_predictions` / :meth:`Predictions.for_samples`; a sample with
no prediction is an error there, never a silent oracle.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from lenpred import __version__
from lenpred.errors import CardMismatchError, DataError
from lenpred.io.fileio import atomic_write_table

__all__ = ["Predictions", "read_predictions", "PREDICTIONS_SCHEMA", "ALL_SAMPLES"]

META_KEY = b"lenpred.predictions"
SCHEMA_VERSION = 1
ALL_SAMPLES = -1  # sample_idx of a per-prompt prediction
MAX_TOKENS = 1e7  # no answer is longer: a larger pred_tokens is a unit or scale mistake

PREDICTIONS_SCHEMA = pa.schema([
    ("prompt_id", pa.string()),
    ("sample_idx", pa.int32()),
    ("pred_tokens", pa.float64()),
    ("spread", pa.float64()),
    ("q10", pa.float64()),
    ("q50", pa.float64()),
    ("q90", pa.float64()),
    ("repred_gen", pa.list_(pa.int32())),
    ("repred_remaining", pa.list_(pa.float64())),
    ("dist_tokens", pa.list_(pa.float64())),
    ("repred_q10", pa.list_(pa.float64())),
    ("repred_q90", pa.list_(pa.float64())),
])
COLUMNS = tuple(f.name for f in PREDICTIONS_SCHEMA)
OPTIONAL = ("spread", "q10", "q50", "q90", "repred_gen", "repred_remaining", "dist_tokens", "repred_q10", "repred_q90")
LIST_COLUMNS = ("repred_gen", "repred_remaining", "dist_tokens", "repred_q10", "repred_q90")


@dataclass
class Predictions:
    """A validated predictions table and what made it.

    Build one with :meth:`from_frame` (validates), write it with :meth:`write`, read with
    :func:`read_predictions`. ``frame`` always has every column of :data:`PREDICTIONS_SCHEMA`.
    """

    frame: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_frame(
        cls,
        df: pd.DataFrame,
        *,
        made_by: str,
        config: Mapping[str, Any] | None = None,
        card: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
        where: str = "predictions",
    ) -> Predictions:
        frame = _normalise(df, where)
        meta: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "made_by": made_by,
            "config": dict(config or {}),
            "lenpred_version": __version__,
            "created_at": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        if card is not None:
            from lenpred.io.artifacts import card_fields

            meta["card_hash"] = card_fields(card, "run")["card_hash"]
        meta.update(extra or {})
        return cls(frame, meta)

    @property
    def made_by(self) -> str:
        return str(self.meta.get("made_by", "?"))

    @property
    def card_hash(self) -> str | None:
        return self.meta.get("card_hash")

    def __len__(self) -> int:
        return len(self.frame.index)

    @property
    def has_quantiles(self) -> bool:
        return bool(self.frame["q50"].notna().any())

    @property
    def has_repredictions(self) -> bool:
        return bool(self.frame["repred_gen"].map(len).gt(0).any())

    # ---------------------------------------------------------------- I/O
    def to_table(self) -> pa.Table:
        t = pa.Table.from_pandas(self.frame[list(COLUMNS)], schema=PREDICTIONS_SCHEMA, preserve_index=False)
        md = dict(t.schema.metadata or {})
        md[META_KEY] = json.dumps(self.meta, sort_keys=True).encode()
        md.pop(b"pandas", None)
        return t.replace_schema_metadata(md)

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write atomically (temp file + rename): the old file or the complete new one, never half."""
        p = Path(path)
        if p.is_dir():
            raise DataError(f"{p} is a directory", "pass a file path ending in .parquet for the predictions")
        atomic_write_table(p, self.to_table())
        return p

    def check_card(self, card: Mapping[str, Any], what: str = "predictions") -> None:
        from lenpred.io.artifacts import card_fields

        want = card_fields(card, "run")["card_hash"]
        if self.card_hash is None:
            raise CardMismatchError(f"{what} record no run card hash", "write them with lenpred predict")
        if self.card_hash != want:
            raise CardMismatchError(
                f"{what} were made for run card {self.card_hash}, this run's card is {want}",
                "predict on this run (lenpred predict --run RUN), or pass the run they were made for",
            )

    # ---------------------------------------------------------------- joining
    def for_samples(self, keys: pd.DataFrame, what: str = "predictions") -> pd.DataFrame:
        """Predictions aligned to ``keys`` (columns ``prompt_id``, ``sample_idx``), row for row.

        A per-sample row wins over the prompt's per-prompt (``sample_idx = -1``) row. Every key must
        get a prediction: a missing one is an error naming how many and the first of them.
        """
        if not {"prompt_id", "sample_idx"} <= set(keys.columns):
            raise DataError("keys need prompt_id and sample_idx columns", "pass a frame with prompt_id and sample_idx")
        k = keys[["prompt_id", "sample_idx"]].astype({"prompt_id": str, "sample_idx": np.int64}).reset_index(drop=True)
        f = self.frame.astype({"sample_idx": np.int64})
        per_sample = f[f["sample_idx"] != ALL_SAMPLES]
        per_prompt = f[f["sample_idx"] == ALL_SAMPLES].drop(columns="sample_idx")
        a = k.merge(per_sample, on=["prompt_id", "sample_idx"], how="left", indicator="_hit")
        b = k.merge(per_prompt, on="prompt_id", how="left")
        use_b = (a["_hit"] != "both").to_numpy()
        out = a.drop(columns="_hit")
        for c in COLUMNS[2:]:
            out[c] = np.where(use_b, b[c].to_numpy(dtype=object), out[c].to_numpy(dtype=object))
        missing = out["pred_tokens"].isna().to_numpy()
        if missing.any():
            first = k.iloc[int(np.argmax(missing))]
            raise DataError(
                f"{what} ({self.made_by}) have no prediction for {int(missing.sum())} of {len(k)} samples "
                f"(first: prompt {first['prompt_id']!r}, sample {int(first['sample_idx'])})",
                "predict on the same run and prompts, or drop those samples from the workload",
            )
        for c in ("pred_tokens", "spread", "q10", "q50", "q90"):
            out[c] = out[c].astype(float)
        for c in LIST_COLUMNS:
            out[c] = [x if isinstance(x, list | tuple | np.ndarray) else [] for x in out[c]]
        return out

    @property
    def has_repred_quantiles(self) -> bool:
        return bool(self.frame["repred_q10"].map(len).gt(0).any())

    def repredictions(self, row: pd.Series) -> tuple[tuple[int, float], ...]:
        """``(tokens generated, predicted remaining)`` pairs of one aligned row."""
        return tuple((int(g), float(r)) for g, r in zip(row["repred_gen"], row["repred_remaining"], strict=True))


def read_predictions(path: str | os.PathLike[str], card: Mapping[str, Any] | None = None) -> Predictions:
    """Read and validate a predictions file; with ``card``, refuse one made for another run."""
    p = Path(path)
    if p.is_dir():
        raise DataError(f"predictions {p} is a directory", "pass the .parquet file `lenpred predict` wrote")
    if not p.is_file():
        raise DataError(f"predictions file {p} not found", "check the path (`lenpred predict --out` writes it)")
    try:
        t = pq.read_table(p)
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{p} is not a readable Parquet file ({e})".splitlines()[0],
                        "pass a predictions table written by lenpred") from None
    raw = (t.schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise DataError(f"{p} is a Parquet file but not a lenpred predictions table (no {META_KEY.decode()} metadata)",
                        "write predictions with `lenpred predict`, or build them with Predictions.from_frame")
    try:
        meta = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{p}: its {META_KEY.decode()} metadata is not valid JSON ({e})",
                        "re-create the table with `lenpred predict` (or Predictions.write)") from None
    if not isinstance(meta, dict):
        raise DataError(f"{p}: its {META_KEY.decode()} metadata is a JSON {type(meta).__name__}, not an object",
                        "re-create the table with `lenpred predict` (or Predictions.write)")
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise DataError(f"{p} has predictions schema version {meta.get('schema_version')!r}, expected {SCHEMA_VERSION}",
                        "re-create it with this version of lenpred")
    preds = Predictions(_normalise(t.to_pandas(), str(p)), meta)
    if card is not None:
        preds.check_card(card, what=f"predictions {p}")
    return preds


# ---------------------------------------------------------------- validation
def _normalise(df: pd.DataFrame, where: str) -> pd.DataFrame:
    if not isinstance(df, pd.DataFrame):
        raise DataError(f"{where}: expected a DataFrame, got {type(df).__name__}",
                        f"pass a pandas DataFrame with the columns {', '.join(COLUMNS)}")
    for c in ("prompt_id", "pred_tokens"):
        if c not in df.columns:
            raise DataError(f"{where} lacks column {c!r}", f"columns: {', '.join(COLUMNS)}")
    unknown = sorted(set(df.columns) - set(COLUMNS))
    if unknown:
        raise DataError(f"{where} has unknown column(s) {unknown}", f"columns: {', '.join(COLUMNS)}")
    n = len(df.index)
    out = pd.DataFrame({"prompt_id": df["prompt_id"].astype(str).to_numpy()})
    if "sample_idx" in df:
        s = pd.to_numeric(df["sample_idx"], errors="coerce")
        if s.isna().any() or (s != np.floor(s)).any() or (s < ALL_SAMPLES).any():
            raise DataError(f"{where}: sample_idx must be integers >= 0 (or -1 for every sample of a prompt)", "rewrite the table with `lenpred predict`, or with Predictions.from_frame after correcting it")
        out["sample_idx"] = s.astype(np.int32).to_numpy()
    else:
        out["sample_idx"] = np.full(n, ALL_SAMPLES, dtype=np.int32)
    _numeric(df, "pred_tokens", where)
    pred = df["pred_tokens"].astype("float64").to_numpy()
    bad = ~np.isfinite(pred) | (pred < 0) | (pred > MAX_TOKENS)
    if bad.any():
        i = int(np.argmax(bad))
        raise DataError(f"{where}: pred_tokens must be finite and >= 0, at most {MAX_TOKENS:,.0f} tokens ({int(bad.sum())} "
                        f"row(s) are not; first: row {i}, value {df['pred_tokens'].iloc[i]!r})",
                        "write token counts (a predicted length in tokens), not scores or log values")
    out["pred_tokens"] = pred
    for c in ("spread", "q10", "q50", "q90"):
        if c in df:
            _numeric(df, c, where)
        v = df[c].astype("float64").to_numpy() if c in df else np.full(n, np.nan)
        if (v[~np.isnan(v)] < 0).any() or (v[~np.isnan(v)] > MAX_TOKENS).any() or np.isinf(v).any():
            raise DataError(f"{where}: column {c} must be finite and >= 0, at most {MAX_TOKENS:,.0f} tokens",
                            "write token counts (a length in tokens), not scores or log values")
        out[c] = v
    q = out[["q10", "q50", "q90"]].to_numpy()
    has = ~np.isnan(q)
    if (has.any(axis=1) & ~has.all(axis=1)).any():
        raise DataError(f"{where}: a row has some of q10, q50, q90 but not all", "give all of q10, q50, q90 for a row, or none")
    ok = ~has.all(axis=1) | ((q[:, 0] <= q[:, 1] + 1e-9) & (q[:, 1] <= q[:, 2] + 1e-9))
    if not ok.all():
        raise DataError(f"{where}: quantiles must satisfy q10 <= q50 <= q90 ({int((~ok).sum())} row(s) do not)",
                        "sort each row's quantiles (a predictor's crossing quantiles: sort them before writing)")
    gens = _lists(df, "repred_gen", n, where)
    rems = _lists(df, "repred_remaining", n, where)
    for i, (g, r) in enumerate(zip(gens, rems, strict=True)):
        if not g and not r:  # most tables carry no re-predictions: keep those rows cheap
            continue
        if len(g) != len(r):
            raise DataError(f"{where}: row {i} has {len(g)} repred_gen values but {len(r)} repred_remaining",
                            "give one repred_remaining per repred_gen")
        if len(g) and (any(b < a for a, b in zip(g, g[1:], strict=False)) or g[0] < 0):
            raise DataError(f"{where}: row {i}: repred_gen must be non-negative and non-decreasing",
                            "list the re-predictions in the order of tokens generated (0 or more)")
        if any(not (math.isfinite(x) and x >= 0) for x in r):
            raise DataError(f"{where}: row {i}: repred_remaining must be finite and >= 0",
                            "write remaining token counts (0 or more), not scores or log values")
    out["repred_gen"] = [[int(x) for x in g] if len(g) else [] for g in gens]
    out["repred_remaining"] = [[float(x) for x in r] if len(r) else [] for r in rems]
    q10s, q90s = _lists(df, "repred_q10", n, where), _lists(df, "repred_q90", n, where)
    for i, (r, lo, hi) in enumerate(zip(rems, q10s, q90s, strict=True)):
        if not len(lo) and not len(hi):
            continue
        if not (len(lo) == len(hi) == len(r)):
            raise DataError(f"{where}: row {i} has {len(r)} repred_remaining but {len(lo)} repred_q10 and {len(hi)} "
                            "repred_q90", "give both quantiles for every re-prediction of a row, or none")
        try:
            a, m, b = (np.asarray(v, dtype=float) for v in (lo, r, hi))
        except (TypeError, ValueError):
            a = m = b = np.array([np.nan])
        if not (np.isfinite(a).all() and np.isfinite(b).all() and (a >= 0).all()
                and (a <= m + 1e-9).all() and (m <= b + 1e-9).all()):
            raise DataError(f"{where}: row {i}: each re-prediction needs finite 0 <= repred_q10 <= repred_remaining <= "
                            "repred_q90", "write the remaining tokens' quantiles, sorted")
    out["repred_q10"] = [[float(x) for x in v] if len(v) else [] for v in q10s]
    out["repred_q90"] = [[float(x) for x in v] if len(v) else [] for v in q90s]
    dists = _lists(df, "dist_tokens", n, where)
    for i, d in enumerate(dists):
        try:
            ok = not len(d) or bool(np.isfinite(v := np.asarray(d, dtype=float)).all() and (v >= 0).all())
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise DataError(f"{where}: row {i}: dist_tokens must be a list of finite numbers >= 0",
                            "write the predictive distribution's support as token counts (0 or more)")
    out["dist_tokens"] = [sorted(float(x) for x in d) if len(d) else [] for d in dists]
    dup = out.duplicated(["prompt_id", "sample_idx"])
    if dup.any():
        d = out[dup].iloc[0]
        raise DataError(f"{where}: duplicate prediction for prompt {d['prompt_id']!r}, sample {int(d['sample_idx'])}",
                        "keep one prediction per (prompt_id, sample_idx)")
    return out


def _numeric(df: pd.DataFrame, col: str, where: str) -> None:
    """Refuse a column stored as text (or bools): a table whose numbers are strings was written wrong."""
    s = df[col]
    if s.isna().all() and not pd.api.types.is_bool_dtype(s):
        return  # an all-empty optional column reads as object
    if not pd.api.types.is_numeric_dtype(s) or pd.api.types.is_bool_dtype(s):
        first = s[s.notna()].iloc[0]
        raise DataError(f"{where}: column {col} holds {type(first).__name__} values (first: {first!r}), not numbers",
                        f"store {col} as a float column")


def _lists(df: pd.DataFrame, col: str, n: int, where: str) -> list[Sequence[Any]]:
    if col not in df:
        return [[]] * n  # shared empty lists: read-only here
    out = []
    for i, x in enumerate(df[col].tolist()):
        if x is None or (isinstance(x, float) and math.isnan(x)):
            out.append([])
        elif isinstance(x, str):
            try:
                out.append(list(json.loads(x)) if x.strip() else [])
            except json.JSONDecodeError:
                raise DataError(f"{where}: row {i}: {col} is not a JSON list", "rewrite the table with `lenpred predict`, or with Predictions.from_frame after correcting it") from None
        elif isinstance(x, list | tuple | np.ndarray):
            out.append(list(x))
        else:
            raise DataError(f"{where}: row {i}: {col} must be a list, got {type(x).__name__}", "rewrite the table with `lenpred predict`, or with Predictions.from_frame after correcting it")
    return out
