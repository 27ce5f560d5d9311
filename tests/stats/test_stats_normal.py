"""The normal law: found where the theory predicts it (ramping hazard), absent where it does not."""

from __future__ import annotations

import numpy as np
import pytest

from lenpred.stats.normal import NORMAL_CENTRAL_MASS, normal_reference


def covers(ci: tuple[float, float], value: float, slack: float = 0.25) -> bool:
    """``value`` inside the 95% interval widened by ``slack`` of its width on each side (~99% coverage):
    one synthetic run is one draw, and a test must not fail on the 5% of draws a 95% interval misses."""
    lo, hi = ci
    return lo - slack * (hi - lo) < value < hi + slack * (hi - lo)


def test_normal_reference_is_calibrated() -> None:
    ref = normal_reference({8: 1}, 4000, np.random.default_rng(0))
    assert ref["shapiro_reject_share"] == pytest.approx(0.05, abs=0.015)
    assert ref["mae_ratio_aggregate"] == pytest.approx(1.0, abs=0.02)
    assert ref["central_mass"] == pytest.approx(NORMAL_CENTRAL_MASS, abs=0.02)
    assert abs(ref["skew_mean"]) < 0.05 and abs(ref["excess_kurtosis_mean"]) < 0.1
    # with K = 8, even exactly normal prompts agree within 10% only about half the time
    assert 0.35 < ref["share_within_10pct"] < 0.7


def test_ramping_hazard_is_normal(ramp_run) -> None:
    nl = ramp_run.summary["normal_law"]
    obs, ref = nl["observed"], nl["if_normal"]
    # the Weibull ramp (shape 3.6) is close to, not exactly, normal: compare with its exact ratio
    t = ramp_run.truth.per_prompt
    exact = float(t["mae"].sum() / (np.sqrt(2 / np.pi) * t["sd"]).sum())
    assert exact == pytest.approx(1.0, abs=0.02)
    assert obs["mae_ratio_aggregate"] == pytest.approx(1.0, abs=0.04)
    assert covers(obs["mae_ratio_aggregate_ci"], exact)
    assert obs["shapiro_reject_share"] < 0.1
    assert abs(obs["share_within_10pct"] - ref["share_within_10pct"]) < 0.12
    assert ramp_run.summary["verdicts"]["normal_law"].startswith("HOLDS:")


def test_segment_sum_is_normal(segment_run) -> None:
    assert segment_run.summary["verdicts"]["normal_law"].startswith("HOLDS")


def test_constant_hazard_is_not_normal(geometric_run) -> None:
    """Geometric lengths: E|L - median| = ln 2 * mu, not sqrt(2/pi) * sd; skew 2; Shapiro-Wilk rejects."""
    nl = geometric_run.summary["normal_law"]
    obs, ref = nl["observed"], nl["if_normal"]
    assert obs["mae_ratio_aggregate"] == pytest.approx(np.log(2) / np.sqrt(2 / np.pi), abs=0.04)
    assert obs["mae_ratio_aggregate_ci"][1] < 0.95
    assert obs["shapiro_reject_share"] > 0.4 > ref["shapiro_reject_share"]
    assert obs["skew_mean"] > 1.0
    assert obs["excess_kurtosis_mean"] > 1.5
    assert obs["share_within_10pct"] < ref["share_within_10pct"]
    assert geometric_run.summary["verdicts"]["normal_law"].startswith("DOES NOT HOLD")
