"""One way to read a run's sample lengths (and token ids), and one leave-one-out median.

Everything that needs "the lengths of a run" (the bound, the simulator's run-directory workload,
``lenpred info``, bench, the split) reads them through :func:`sample_lengths`, and everything that
needs "the median of the prompt's *other* samples" (the per-prompt oracle predictor) uses
:func:`loo_median` (flat tables) or :func:`loo_median_sorted` (dense ``(..., K)`` arrays).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd

from lenpred.data.rundir import RunDir
from lenpred.errors import DataError

__all__ = ["check_token_ids", "sample_lengths", "loo_median", "loo_median_sorted", "loo_median_positions"]

LENGTH_COLUMNS = ("prompt_id", "sample_idx", "n_tokens", "stop_reason")


def sample_lengths(
    run: RunDir | str | os.PathLike[str], extra: tuple[str, ...] = (), with_prompts: bool = True
) -> pd.DataFrame:
    """One row per sample, in run order (prompt order, then sample_idx).

    Columns: ``prompt_id``, ``sample_idx``, ``n_tokens`` (EOS excluded), ``stop_reason``,
    ``truncated`` (stopped at max_new_tokens: a censored length), and with ``with_prompts``
    ``n_prompt_tokens``; plus any ``extra`` sample columns (``text``, ``token_ids``).
    """
    rd = run if isinstance(run, RunDir) else RunDir.open(run)
    cols = list(LENGTH_COLUMNS) + [c for c in extra if c not in LENGTH_COLUMNS]
    df = rd.samples(columns=cols)
    df["prompt_id"] = df["prompt_id"].astype(str)
    df["sample_idx"] = df["sample_idx"].astype(np.int64)
    df["n_tokens"] = df["n_tokens"].astype(np.int64)
    df["truncated"] = (df["stop_reason"] == "length").to_numpy()
    if with_prompts and rd.has_prompts():
        p = rd.prompts()[["prompt_id", "n_prompt_tokens"]]
        df = df.merge(p, on="prompt_id", how="left", sort=False)
    return df.reset_index(drop=True)


def check_token_ids(run: RunDir) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(prompts, samples with ``token_ids``) of a run whose every prompt and sample has its token ids
    (what teacher forcing reads); refuses a run without them, naming what lacks them."""
    prompts = run.prompts()
    if "prompt_token_ids" not in prompts.columns:
        raise DataError(f"{run.path} has no prompt token ids (prompts.parquet lacks prompt_token_ids)",
                        "train on a run collected with a lenpred that records token ids")
    if prompts["prompt_token_ids"].map(lambda t: t is None or len(t) == 0).any():
        raise DataError(f"{run.path} has prompts without token ids", "train on a run collected with token ids")
    s = sample_lengths(run, extra=("token_ids",), with_prompts=False)
    if s.empty:
        raise DataError(f"{run.path} has no samples yet", "collect some first (`lenpred collect`)")
    has_ids = s["token_ids"].map(lambda t: t is not None and len(t) > 0)
    if not bool((has_ids | (s["n_tokens"] == 0)).all()):
        raise DataError(f"{run.path} has samples without token ids (samples.parquet token_ids are empty)",
                        "train on a run collected with an engine that records token ids (hf or llamacpp)")
    return prompts, s


def loo_median_positions(k: int) -> tuple[np.ndarray, np.ndarray]:
    """For each sorted position r of K values, the two sorted positions whose mean is the median of
    the K - 1 values left when position r is taken out."""
    r = np.arange(k)
    a, b = (k - 2) // 2, (k - 1) // 2  # middle positions among the K - 1 that remain
    return np.where(a < r, a, a + 1), np.where(b < r, b, b + 1)


def loo_median_sorted(s: np.ndarray) -> np.ndarray:
    """``s``: (..., K) values sorted on the last axis, K >= 2. Returns (..., K): for each value, the
    median of the other K - 1 values of its row."""
    k = s.shape[-1]
    if k < 2:
        raise ValueError("a leave-one-out median needs at least 2 values per group")
    pa, pb = loo_median_positions(k)
    return 0.5 * (s[..., pa] + s[..., pb])


def loo_median(values: Any, groups: Any, fill: float = np.nan) -> np.ndarray:
    """For each value, the median of the *other* values of its group (``fill`` where a group has
    one value). ``values`` and ``groups`` are (n,) and aligned; order is kept."""
    v = np.asarray(values, dtype=float)
    g = pd.Series(np.asarray(groups)).astype(str).to_numpy()
    out = np.full(v.shape, fill, dtype=float)
    codes, uniq = pd.factorize(g)
    sizes = np.bincount(codes, minlength=len(uniq))
    for k in np.unique(sizes):
        if k < 2:
            continue
        rows = np.flatnonzero(sizes[codes] == k)  # every value in a group of size k
        order = np.lexsort((v[rows], codes[rows]))  # by group, then value
        idx = rows[order].reshape(-1, k)  # (G, k): positions of each group's sorted values
        out[idx] = loo_median_sorted(v[idx])
    return out
