"""Length sources: where a workload's prompt and true output lengths come from.

* ``synthetic``: lognormal prompt and output lengths, clipped to the configured limits;
* ``sharegpt``: token counts of ShareGPT's first prompts and reference answers (cached as Parquet
  under ``lenpred.paths.home()/sim``), filtered as vLLM's serving benchmark does;
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
    from lenpred.paths import home

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
    only samples that stopped at EOS."""
    from lenpred.data.lengths import sample_lengths

    df = sample_lengths(path)
    if "n_prompt_tokens" not in df.columns:
        raise DataError(f"run directory {path} has no prompt table", "finish collecting it, or pass another run")
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
    """A request table from CSV, Parquet or JSONL. Columns: ``prompt_tokens``, ``output_tokens``
    (required); ``arrival_s``, ``predicted_tokens``, ``predicted_spread``, ``repredictions`` (a JSON
    list of [tokens_generated, predicted_remaining] pairs), ``id`` (optional)."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"request file {p} not found")
    suffix = p.suffix.lower()
    try:
        if suffix == ".parquet":
            df = pd.read_parquet(p)
        elif suffix == ".csv":
            df = pd.read_csv(p)
        elif suffix in (".jsonl", ".json"):
            df = pd.read_json(p, lines=suffix == ".jsonl")
        else:
            raise DataError(f"{p}: unknown request file type {suffix!r}", "use .csv, .parquet or .jsonl")
    except (ValueError, OSError) as e:
        raise DataError(f"cannot read {p} ({e})".splitlines()[0]) from e
    if "arrival" in df.columns and "arrival_s" not in df.columns:
        df = df.rename(columns={"arrival": "arrival_s"})
    missing = [c for c in ("prompt_tokens", "output_tokens") if c not in df.columns]
    if missing:
        raise DataError(f"{p} lacks column(s) {missing}", f"columns: {', '.join(TRACE_COLUMNS)}")
    for c in ("prompt_tokens", "output_tokens"):
        if df[c].isna().any():
            raise DataError(f"{p}: column {c} has missing values")
    return df.reset_index(drop=True)
