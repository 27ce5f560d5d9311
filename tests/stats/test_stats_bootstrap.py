"""The bootstrap intervals (scipy.stats.bootstrap, percentile, paired, batched) agree with the
hand-written resampler they replaced, on the committed reference run's lengths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from lenpred.stats.bootstrap import mean_ci, percentile_ci, ratio_ci

RUN = Path(__file__).resolve().parents[2] / "data" / "runs" / "smollm2-sharegpt" / "samples.parquet"
B = 2000


def _reference_sums(v: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """The replaced implementation: (B, Q) column sums over B resamples of the rows."""
    v = v[:, None] if v.ndim == 1 else v
    return v[rng.integers(0, v.shape[0], (n_boot, v.shape[0]))].sum(1)


@pytest.fixture(scope="module")
def lengths() -> tuple[np.ndarray, np.ndarray]:
    """Per prompt on the first 400 prompts: the mean output length and the mean absolute deviation of
    its samples from that mean (a ratio statistic the bound reports)."""
    t = pq.read_table(RUN, columns=["prompt_id", "n_tokens"]).to_pandas()
    g = t.groupby("prompt_id")["n_tokens"]
    mean = g.mean().to_numpy(float)[:400]
    mad = g.apply(lambda s: float(np.abs(s - s.mean()).mean())).to_numpy(float)[:400]
    return mad, mean


def _close(a: tuple[float, float], b: tuple[float, float], rel: float) -> bool:
    return all(abs(x - y) <= rel * abs(y) for x, y in zip(a, b, strict=True))


def test_mean_ci_agrees_with_the_replaced_resampler(lengths):
    mad, _ = lengths
    old = percentile_ci(_reference_sums(mad, B, np.random.default_rng(1))[:, 0] / mad.size, 0.95)
    new = mean_ci(mad, B, 0.95, np.random.default_rng(2))
    assert _close(new, old, 0.02), (new, old)
    assert new[0] < mad.mean() < new[1]


def test_ratio_ci_agrees_and_resamples_pairs(lengths):
    mad, mean = lengths
    s = _reference_sums(np.column_stack([mad, mean]), B, np.random.default_rng(1))
    old = percentile_ci(s[:, 0] / s[:, 1], 0.95)
    new = ratio_ci(mad, mean, B, 0.95, np.random.default_rng(2))
    assert _close(new, old, 0.02), (new, old)
    # paired: a ratio of identical columns has no spread; unpaired resampling would give one
    assert ratio_ci(mean, mean, 200, 0.95, np.random.default_rng(0)) == pytest.approx((1.0, 1.0))


def test_degenerate_inputs_give_nan_not_an_error():
    assert all(np.isnan(mean_ci(np.array([1.0, np.nan]), 100, 0.9, np.random.default_rng(0))))
    assert all(np.isnan(ratio_ci(np.array([1.0]), np.array([2.0]), 100, 0.9, np.random.default_rng(0))))


def test_same_seed_same_interval(lengths):
    mad, mean = lengths
    a = ratio_ci(mad, mean, 500, 0.9, np.random.default_rng(7))
    assert a == ratio_ci(mad, mean, 500, 0.9, np.random.default_rng(7))
