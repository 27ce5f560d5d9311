"""Response segments and the coefficient of variation of their number per prompt.

The theory writes a response as a random number N of segments (paragraphs, sentences, list items)
of random length. Then Var L = E[N] Var X + Var(N) E[X]^2, so for long answers sd(L) ~ CV(N) * E[L]
plus a constant: the slope alpha of the affine law should equal the CV of the segment count. This
module counts segments in the decoded responses and estimates CV(N) per prompt.

Only EOS samples count: a truncated response has a truncated number of segments.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from lenpred.stats.bootstrap import mean_ci
from lenpred.stats.config import SEGMENT_UNITS
from lenpred.stats.lengths import RunLengths
from lenpred.stats.perprompt import c4
from lenpred.stats.results import SegmentCV, SegmentsUnavailable

NO_TEXT = "the run stores no decoded text"

_SPLITTERS = {
    # a blank line (possibly holding spaces) separates paragraphs
    "paragraph": re.compile(r"\n[ \t\r\f\v]*\n"),
    "line": re.compile(r"\n"),
    # end punctuation followed by whitespace, or a line break (list items and headings have no period)
    "sentence": re.compile(r"(?<=[.!?])\s+|\n+"),
}


def count_segments(texts: Sequence[str], unit: str = "paragraph", regex: str | None = None) -> np.ndarray:
    """Number of non-blank segments in each text; ``regex`` (a separator pattern) overrides ``unit``."""
    if regex is not None:
        splitter = re.compile(regex)
    elif unit in _SPLITTERS:
        splitter = _SPLITTERS[unit]
    else:
        raise ValueError(f"unknown segment unit {unit!r}; use one of {SEGMENT_UNITS}")
    return np.array([sum(1 for part in splitter.split(t) if part.strip()) for t in texts], dtype=int)


def segment_table(lengths: RunLengths, unit: str, regex: str | None, min_samples: int) -> pd.DataFrame:
    """Per prompt: EOS samples used, mean and sd of the segment count, and its CV (sd / c4 / mean)."""
    eos = lengths.samples[~lengths.samples["censored"]]
    counts = count_segments(eos["text"].tolist(), unit, regex)
    df = pd.DataFrame(
        {"prompt_id": eos["prompt_id"].to_numpy(), "n": counts, "L": eos["length"].to_numpy(dtype=float)}
    )
    g = df.groupby("prompt_id", sort=False)
    t = pd.DataFrame(
        {
            "seg_k": g.size(),
            "seg_mean": g["n"].mean(),
            "seg_sd": g["n"].std(ddof=1),
            "len_mean": g["L"].mean(),
            "len_sd": g["L"].std(ddof=1),
            "seg_len_corr": g.apply(_corr, include_groups=False),
        }
    ).reset_index()
    t = t[t["seg_k"] >= min_samples]
    k = t["seg_k"].to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        t["seg_cv"] = np.where(t["seg_mean"] > 0, t["seg_sd"] / c4(k) / t["seg_mean"], np.nan)
        t["len_cv"] = np.where(t["len_mean"] > 0, t["len_sd"] / c4(k) / t["len_mean"], np.nan)
    return t.reset_index(drop=True)


def _corr(g: pd.DataFrame) -> float:
    """Within-prompt Pearson correlation of segment count and token length (NaN if either is constant)."""
    n, L = g["n"].to_numpy(float), g["L"].to_numpy(float)
    if len(n) < 3 or n.std() == 0 or L.std() == 0:
        return float("nan")
    return float(np.corrcoef(n, L)[0, 1])


def segment_cv(
    lengths: RunLengths,
    unit: str,
    regex: str | None,
    min_samples: int,
    n_boot: int,
    ci: float,
    rng: np.random.Generator,
) -> tuple[SegmentCV | SegmentsUnavailable, pd.DataFrame]:
    """Summary of the segment-count CV for one unit (with the mean CV of every built-in unit), and
    the per-prompt table it came from."""
    name = f"regex {regex!r}" if regex is not None else unit
    if not lengths.text_available:
        return SegmentsUnavailable(unit=name, reason=NO_TEXT), pd.DataFrame()
    t = segment_table(lengths, unit, regex, min_samples)
    cv = t["seg_cv"].to_numpy(float)
    cv = cv[np.isfinite(cv)]
    if cv.size == 0:
        reason = "no prompt with enough EOS samples"
        return SegmentsUnavailable(unit=name, reason=reason, all_units_cv_mean=all_units_cv(lengths, min_samples)), t
    ok = t[np.isfinite(t["seg_cv"])]
    len_cv = ok["len_cv"].to_numpy(float)
    corr = ok["seg_len_corr"].to_numpy(float)
    return SegmentCV(
        unit=name,
        n_prompts=int(cv.size),
        mean_segments=float(t["seg_mean"].mean()),
        cv_mean=float(cv.mean()),
        cv_mean_ci=mean_ci(cv, n_boot, ci, rng),
        cv_median=float(np.median(cv)),
        # Under the theory (N segments of independent length X) CV(L)^2 = CV(N)^2 + CV(X)^2 / E[N] >= CV(N)^2
        # and count and length correlate strongly; these two say how far the responses are from that.
        length_cv_mean=float(np.nanmean(len_cv)) if np.isfinite(len_cv).any() else float("nan"),
        count_length_corr_mean=float(np.nanmean(corr)) if np.isfinite(corr).any() else float("nan"),
        all_units_cv_mean=all_units_cv(lengths, min_samples),
    ), t


def all_units_cv(lengths: RunLengths, min_samples: int) -> dict[str, float]:
    """Mean segment-count CV for every built-in unit (a quick look at how much the choice matters)."""
    out: dict[str, float] = {}
    if not lengths.text_available:
        return out
    for unit in SEGMENT_UNITS:
        cv = segment_table(lengths, unit, None, min_samples)["seg_cv"].to_numpy(float)
        cv = cv[np.isfinite(cv)]
        out[unit] = float(cv.mean()) if cv.size else float("nan")
    return out
