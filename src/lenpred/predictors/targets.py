"""What a head is trained to predict: each prompt's sampled output lengths, ragged, with the cap.

A prompt of a run has K_i >= 1 samples. :class:`Targets` keeps them as one (n, K_max) array padded
with NaN, plus a mask of the samples that stopped at ``max_new_tokens`` (the cap).

**Truncated samples count as the cap.** A sample cut at ``max_new_tokens`` generated exactly ``cap``
tokens; its *natural* length L is censored (L >= cap), but what a server generates under this card,
and what a scheduler needs to know, is min(L, cap). Heads therefore predict the generated count
min(L, cap): a truncated sample is the value ``cap`` in every target (median, histogram bin, affine
fit), and every predictive distribution lives on [0, cap]. The censored natural length is the business
of :mod:`lenpred.stats` (bound, hazard), not of the heads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from lenpred.errors import DataError

__all__ = ["Targets", "as_targets"]


@dataclass(frozen=True)
class Targets:
    """``values[i, k]``: generated tokens of prompt i's k-th sample (NaN past its K_i samples)."""

    values: np.ndarray  # (n, K_max) float64, NaN-padded
    truncated: np.ndarray  # (n, K_max) bool, False on padding
    cap: float | None = None  # max_new_tokens of the card, if known

    def __post_init__(self) -> None:
        v = np.asarray(self.values, dtype=np.float64)
        if v.ndim != 2:
            raise DataError(f"targets must be (n, K), got shape {v.shape}", "pass one row of sample lengths per prompt")
        t = np.asarray(self.truncated, dtype=bool)
        if t.shape != v.shape:
            raise DataError(f"targets: truncated mask {t.shape} does not match values {v.shape}",
                            "give the truncated mask the shape of the values")
        have = ~np.isnan(v)
        if v.shape[0] and not have.any(axis=1).all():
            i = int(np.argmin(have.any(axis=1)))
            raise DataError(f"targets: row {i} has no sample", "give every prompt at least one sample")
        if np.isinf(v).any() or (v[have] < 0).any():
            raise DataError("targets must be finite token counts >= 0", "pass sample lengths in tokens (NaN for no sample)")
        if self.cap is not None:
            v = np.where(have, np.minimum(v, self.cap), np.nan)  # generated count = min(L, cap)
        object.__setattr__(self, "values", v)
        object.__setattr__(self, "truncated", t & have)

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_lengths(cls, lengths: pd.DataFrame, prompt_ids: Sequence[str], cap: float | None) -> Targets:
        """From :func:`lenpred.data.lengths.sample_lengths` rows, one target row per ``prompt_ids``."""
        ids = pd.Index(np.asarray(prompt_ids).astype(str))
        df = lengths[lengths["prompt_id"].isin(ids)]
        missing = ids.difference(pd.Index(df["prompt_id"].unique()))
        if len(missing):
            raise DataError(f"{len(missing)} prompt(s) have no samples (first: {missing[0]!r})",
                            "train and evaluate only on prompts with collected samples")
        row = ids.get_indexer(df["prompt_id"])  # (m,) target row of each sample
        rank = df.groupby("prompt_id").cumcount().to_numpy()  # k-th sample of its prompt
        k_max = int(rank.max()) + 1 if len(rank) else 1
        values = np.full((len(ids), k_max), np.nan)
        trunc = np.zeros((len(ids), k_max), dtype=bool)
        values[row, rank] = df["n_tokens"].to_numpy(dtype=np.float64)
        trunc[row, rank] = df["truncated"].to_numpy(dtype=bool)
        return cls(values, trunc, cap)

    # ---------------------------------------------------------------- views
    @property
    def n(self) -> int:
        return int(self.values.shape[0])

    @property
    def counts(self) -> np.ndarray:
        """(n,) samples per prompt."""
        return (~np.isnan(self.values)).sum(axis=1)

    def median(self) -> np.ndarray:
        """(n,) per-prompt median of the samples (the MAE-optimal point target)."""
        return np.nanmedian(self.values, axis=1)

    def mean(self) -> np.ndarray:
        return np.nanmean(self.values, axis=1)

    def sd(self) -> np.ndarray:
        """(n,) per-prompt sample sd (ddof=1); NaN for a prompt with one sample."""
        k = self.counts
        out = np.full(self.n, np.nan)
        ok = k >= 2
        out[ok] = np.nanstd(self.values[ok], axis=1, ddof=1)
        return out

    def flat(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every sample as (row (m,), value (m,), weight (m,)), weight 1/K_i so each prompt counts once."""
        row, col = np.nonzero(~np.isnan(self.values))
        w = 1.0 / self.counts[row]
        return row, self.values[row, col], w

    def subset(self, idx: np.ndarray) -> Targets:
        return Targets(self.values[idx], self.truncated[idx], self.cap)


def as_targets(y: Any, n: int, cap: float | None = None, what: str = "y") -> Targets:
    """Accept :class:`Targets`, an (n,) array (one sample per prompt) or an (n, K) NaN-padded array."""
    if isinstance(y, Targets):
        t = y
    else:
        try:
            v = np.asarray(y, dtype=np.float64)
        except (TypeError, ValueError):
            raise DataError(f"{what} must be token counts (an array), got {type(y).__name__}",
                            "pass a numeric array of lengths in tokens") from None
        if v.ndim == 1:
            v = v[:, None]
        if v.ndim != 2:
            raise DataError(f"{what} must be (n,) or (n, K), got shape {v.shape}",
                            "pass one length per prompt, or one row of sample lengths per prompt")
        t = Targets(v, np.zeros(v.shape, dtype=bool) if cap is None else v >= cap, cap)
    if t.n != n:
        raise DataError(f"{what} has {t.n} rows but X has {n}", "give one target row per input row")
    return t
