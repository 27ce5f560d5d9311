"""Length sources: where a workload's prompt and true output lengths come from.

* ``synthetic``: lognormal prompt and output lengths, clipped to the configured limits;
* ``sharegpt``: token counts of ShareGPT's first prompts and reference answers (cached as Parquet
  under ``lenpred.io.paths.home()/sim``), filtered as vLLM's serving benchmark does;
* ``rundir``: the sampled response lengths of a lenpred run directory, one row per sample (read
  through :func:`lenpred.data.lengths.sample_lengths`, the one run-reading path);
* ``trace``: a request table (CSV, Parquet or JSONL), see :func:`read_trace`.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pyarrow import ArrowException

from lenpred.errors import DataError
from lenpred.sim.config import LengthConfig

TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens", "predicted_tokens", "predicted_spread",
                 "repredictions")


def synthetic_lengths(n: int, cfg: LengthConfig, rng: np.random.Generator) -> pd.DataFrame:
    """Lognormal prompt and output lengths, clipped to the configured limits."""
    p = rng.lognormal(math.log(cfg.prompt_median), cfg.prompt_sigma, n)
    o = rng.lognormal(math.log(cfg.output_median), cfg.output_sigma, n)
    p = np.clip(np.rint(p), cfg.min_tokens, cfg.max_prompt_tokens).astype(np.int64)
    o = np.clip(np.rint(o), cfg.min_tokens, None).astype(np.int64)
    o = np.minimum(o, np.maximum(cfg.max_total_tokens - p, cfg.min_tokens))
    return pd.DataFrame({"prompt_tokens": p, "output_tokens": o})


def sharegpt_token_table(tokenizer: str = "smollm2-135m", batch: int = 512) -> pd.DataFrame:
    """Token counts of every ShareGPT record's first prompt and reference answer (raw text, no chat
    template, as vLLM's serving benchmark counts them). Cached as Parquet under ``home()/sim``."""
    from lenpred.data.sharegpt import load_sharegpt
    from lenpred.io.paths import home

    df = load_sharegpt()
    digest = hashlib.sha256(("\n".join(df["id"].astype(str))).encode()).hexdigest()[:12]
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in tokenizer)
    cache = home() / "sim" / f"sharegpt-lengths-{slug}-{digest}.parquet"
    if cache.is_file():
        return pd.read_parquet(cache)
    from lenpred.models import load_tokenizer

    tok = load_tokenizer(tokenizer)

    def count(texts: list[str]) -> np.ndarray:
        out = np.empty(len(texts), dtype=np.int64)
        for i in range(0, len(texts), batch):
            ids = tok(texts[i : i + batch], add_special_tokens=False)["input_ids"]
            out[i : i + len(ids)] = [len(x) for x in ids]
        return out

    table = pd.DataFrame({
        "id": df["id"].astype(str).to_numpy(),
        "prompt_tokens": count(df["prompt"].fillna("").astype(str).tolist()),
        "output_tokens": count(df["answer"].fillna("").astype(str).tolist()),
    })
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp")
    table.to_parquet(tmp, index=False)
    tmp.replace(cache)
    return table


def filter_lengths(df: pd.DataFrame, cfg: LengthConfig) -> pd.DataFrame:
    p, o = df["prompt_tokens"], df["output_tokens"]
    keep = (p >= cfg.min_tokens) & (o >= cfg.min_tokens) & (p <= cfg.max_prompt_tokens)
    keep &= (p + o) <= cfg.max_total_tokens
    out = df[keep].reset_index(drop=True)
    if out.empty:
        raise DataError(f"no request left after the length filters ({len(df)} before)",
                        "loosen min_tokens / max_prompt_tokens / max_total_tokens")
    return out


def rundir_lengths(path: str, cfg: LengthConfig) -> pd.DataFrame:
    """One row per sample of a run directory, sorted by prompt id: ``prompt_id``, ``sample_idx``,
    ``prompt_tokens``, ``output_tokens`` (the sampled length). With ``include_truncated`` off,
    only samples that stopped at EOS; with ``roles``, only the prompts of those roles in the run's
    split (``split``: its file, default RUN/split.json)."""
    from lenpred.data.lengths import sample_lengths

    df = sample_lengths(path)
    if "n_prompt_tokens" not in df.columns:
        raise DataError(f"run directory {path} has no prompt table", "finish collecting it, or pass another run")
    if cfg.roles is not None:
        from lenpred.data.split import load_split

        sp = load_split(path, cfg.split, require_complete=False)
        keep = set().union(*(sp.ids(r) for r in cfg.roles))
        df = df[df["prompt_id"].isin(keep)]
        if df.empty:
            raise DataError(f"run directory {path}: no sample of a prompt with role {', '.join(cfg.roles)} in its split",
                            f"check workload.lengths.roles, or run `lenpred split {path}`")
    if not cfg.include_truncated:
        df = df[df["stop_reason"] == "eos"]
    df = df.dropna(subset=["n_prompt_tokens"])  # samples of prompts the prompt table does not list
    if df.empty:
        raise DataError(f"run directory {path} has no samples to build a workload from",
                        "collect samples first (lenpred collect), or set include_truncated to true")
    df = df.rename(columns={"n_prompt_tokens": "prompt_tokens", "n_tokens": "output_tokens"})
    df = df.sort_values(["prompt_id"], kind="stable").reset_index(drop=True)
    df["prompt_tokens"] = df["prompt_tokens"].astype(np.int64)
    return df[["prompt_id", "sample_idx", "prompt_tokens", "output_tokens"]]


def parse_repredictions(x: Any) -> tuple[tuple[int, float], ...]:
    """A trace cell of re-predictions (a JSON string or a list of pairs) as a tuple of pairs."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ()
    if isinstance(x, str):
        x = json.loads(x) if x.strip() else []
    return tuple((int(g), float(r)) for g, r in x)


def read_trace(path: str | Path) -> pd.DataFrame:
    """A request table from CSV, Parquet or JSONL, validated. Columns: ``prompt_tokens``,
    ``output_tokens`` (required, whole numbers >= 1); ``arrival_s`` (seconds >= 0),
    ``predicted_tokens``, ``predicted_spread``, ``repredictions`` (a JSON list of
    [tokens_generated, predicted_remaining] pairs), ``id`` (optional). Problems name the row,
    counted from 1 (and for CSV the file line, the header being line 1)."""
    p = Path(path)
    if p.is_dir():
        raise DataError(f"request table {p} is a directory", "pass a .csv, .parquet or .jsonl file")
    if not p.is_file():
        raise DataError(f"request file {p} not found", "check the path")
    suffix = p.suffix.lower()
    if suffix not in (".parquet", ".csv", ".jsonl", ".json"):
        raise DataError(f"{p}: unknown request file type {suffix!r}", "use .csv, .parquet or .jsonl")
    if p.stat().st_size == 0:
        raise DataError(f"request table {p} is empty", f"write a header ({', '.join(TRACE_COLUMNS[:3])}) "
                        "and one row per request")
    try:
        if suffix == ".parquet":
            df = pd.read_parquet(p)
        elif suffix == ".csv":
            df = pd.read_csv(p)
        else:
            df = pd.read_json(p, lines=suffix == ".jsonl")
    except (ValueError, OSError, ArrowException) as e:
        raise DataError(f"cannot read {p} ({e})".splitlines()[0],
                        "write it as CSV with a header, Parquet, or JSON lines") from None
    if "arrival" in df.columns and "arrival_s" not in df.columns:
        df = df.rename(columns={"arrival": "arrival_s"})
    missing = [c for c in ("prompt_tokens", "output_tokens") if c not in df.columns]
    if missing:
        raise DataError(f"{p} lacks column(s) {missing}", f"columns: {', '.join(TRACE_COLUMNS)}")
    if df.empty:
        raise DataError(f"request table {p} has a header but no requests", "add one row per request")
    df = df.reset_index(drop=True)
    where = _RowNamer(p, header=suffix == ".csv")
    for c in ("prompt_tokens", "output_tokens"):
        v = _numeric(df, c, where)
        frac = v != np.floor(v)
        if frac.any():
            i = int(np.argmax(frac))
            raise DataError(f"{p}: {c} is not a whole number of tokens in {int(frac.sum())} row(s), first "
                            f"{where(i)}: {_cell(df[c].iloc[i])}", "token counts are integers; round them where they are made")
        small = v < 1
        if small.any():
            i = int(np.argmax(small))
            raise DataError(f"{p}: {c} is below 1 in {int(small.sum())} row(s), first {where(i)}: "
                            f"{_cell(df[c].iloc[i])}",
                            "every request needs at least one prompt and one output token; drop such rows")
        df[c] = v.astype(np.int64)
    if "arrival_s" in df.columns:
        v = _numeric(df, "arrival_s", where)
        bad = ~np.isfinite(v) | (v < 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise DataError(f"{p}: arrival_s is negative or not finite in {int(bad.sum())} row(s), first "
                            f"{where(i)}: {_cell(df['arrival_s'].iloc[i])}", "arrival times are seconds >= 0")
        df["arrival_s"] = v
    return df


class _RowNamer:
    """'row N' (counted from 1), with the file line for a CSV file with a header."""

    def __init__(self, path: Path, header: bool) -> None:
        self.path = path
        self.header = header

    def __call__(self, i: int) -> str:
        return f"row {i + 1} (line {i + 2})" if self.header else f"row {i + 1}"


def _cell(x: Any) -> str:
    return repr(x.item() if isinstance(x, np.generic) else x)


def _numeric(df: pd.DataFrame, col: str, where: _RowNamer) -> np.ndarray:
    """Column ``col`` as float64; a missing or non-numeric cell is an error naming its row."""
    v = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
    bad = np.isnan(v)
    if bad.any():
        i = int(np.argmax(bad))
        cell = df[col].iloc[i]
        what = "missing" if pd.isna(cell) else _cell(cell)
        raise DataError(f"{where.path}: {col} is missing or not a number in {int(bad.sum())} row(s), first "
                        f"{where(i)}: {what}", f"give every request a numeric {col}")
    return v
