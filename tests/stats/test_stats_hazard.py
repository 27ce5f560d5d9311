"""The hazard: exact on a hand-checkable case, the ramp of a ramping process, flat for a memoryless one."""

from __future__ import annotations

import numpy as np
import pytest

from lenpred.stats.hazard import hazard_curve


def test_hand_checked_hazard_with_censoring() -> None:
    # lengths 1, 2, 2, 3 stop by EOS; one sample is truncated at the cap 3 (at risk at 1..3, never stops)
    length = np.array([1, 2, 2, 3, 3])
    event = np.array([True, True, True, True, False])
    h = hazard_curve(length, event, bin_width=1, min_at_risk=1, cap=3)
    t = h.table.frame().set_index("start")
    assert t.loc[1, "hazard"] == pytest.approx(1 / 5)  # 1 stop among 5 at risk
    assert t.loc[2, "hazard"] == pytest.approx(2 / 4)
    assert t.loc[3, "hazard"] == pytest.approx(1 / 2)  # the truncated sample is at risk and does not stop
    assert t.loc[0, "hazard"] == 0.0
    assert h.constant_hazard == pytest.approx(4 / (5 + 5 + 4 + 2))  # stops / sample-steps at risk (t=0..3)


def test_ramping_hazard_matches_exact_and_ramps(ramp_run) -> None:
    hz = ramp_run.summary.hazard
    exact = ramp_run.truth.pooled_hazard()
    table = hz.pooled.table.frame()
    at_risk = ramp_run.truth.pmf.sum(0)[::-1].cumsum()[::-1]
    z = []
    for _, row in table[table["stops"] >= 10].iterrows():
        a, b = int(row["start"]), int(row["end"])
        # the exact per-step hazard averaged with the exact at-risk weights of the bin
        want = float((exact[a:b] * at_risk[a:b]).sum() / at_risk[a:b].sum())
        z.append((row["hazard"] - want) / np.sqrt(want * (1 - want) / row["exposure"]))
    z = np.array(z)
    assert len(z) >= 15
    assert np.abs(z).max() < 4.0 and np.mean(z**2) < 2.0  # binomial noise around the exact hazard
    assert hz.pooled.late_early_ratio > 2.0
    assert hz.pooled.spearman_rho > 0.8
    assert hz.normalized.late_early_ratio > 5.0
    assert all(b.late_early_ratio > 2.0 for b in hz.buckets) and len(hz.buckets) == 4
    # the buckets split the prompts by median length: together they hold every sample
    assert sum(b.n_samples for b in hz.buckets) == ramp_run.summary.counts.samples
    v = ramp_run.summary.verdicts["hazard_ramp"]
    assert v.status == "HOLDS" and f"ratio {hz.normalized.late_early_ratio:.1f}" in v.detail


def test_constant_hazard_is_flat(geometric_run) -> None:
    hz = geometric_run.summary.hazard
    # pooled over prompts of different lengths a constant hazard does not rise (it tends to fall: the
    # short prompts leave first) ...
    assert hz.pooled.late_early_ratio < 1.3
    # ... while in normalised time it is flat at ln 2 stops per median length
    nh = hz.normalized
    assert 0.67 < nh.late_early_ratio < 1.5
    assert nh.constant_hazard == pytest.approx(np.log(2), rel=0.15)
    v = geometric_run.summary.verdicts["hazard_ramp"]
    assert v.status == "DOES NOT HOLD" and v.detail.startswith("the hazard is roughly constant")


def test_hazard_past_the_median(segment_run, geometric_run) -> None:
    # a near-normal law's hazard keeps climbing past the median; a memoryless one stays flat. (The
    # segment run has CV 0.3; the ramp run's CV ~0.2 leaves too few samples beyond 1.6 medians.)
    assert segment_run.summary.hazard.normalized.tail_mid_ratio > 1.1
    assert 0.7 < geometric_run.summary.hazard.normalized.tail_mid_ratio < 1.4


@pytest.mark.parametrize(
    ("ratio", "status", "starts"),
    [(2.0, "HOLDS", "the stopping probability ramps up"), (1.99, "DOES NOT HOLD", "the hazard is roughly"),
     (0.66, "DOES NOT HOLD", "the hazard falls"), (float("nan"), "UNDETERMINED", "too few samples")],
)
def test_hazard_verdict_thresholds(geometric_run, ratio: float, status: str, starts: str) -> None:
    """The ramp verdict's rule at its edges (2 for a ramp, 1/1.5 for a fall), on a real result."""
    from lenpred.stats.verdicts import hazard_verdict

    hz = geometric_run.summary.hazard
    changed = hz.model_copy(update={"normalized": hz.normalized.model_copy(update={"late_early_ratio": ratio})})
    v = hazard_verdict(changed)
    assert v.status == status and v.detail.startswith(starts)
    assert "nan" not in v.detail  # an undefined figure reads "n/a"
