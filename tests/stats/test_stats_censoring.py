"""Right-censored normal fit and imputation of the tail beyond max_new_tokens."""

from __future__ import annotations

import numpy as np
import pytest

from lenpred.stats.censoring import fit_censored_normal, impute_censored


def test_censored_fit_recovers_mean_and_sd() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(300.0, 60.0, 4000)
    cap = 340.0  # ~25% censored
    cens = x > cap
    mu, sigma = fit_censored_normal(x[~cens], np.full(int(cens.sum()), cap))
    assert mu == pytest.approx(300.0, abs=3.0)
    assert sigma == pytest.approx(60.0, abs=3.0)
    # ignoring the censoring would be far off
    assert x[~cens].mean() < 285.0


def test_uncensored_fit_is_plain_mle() -> None:
    x = np.array([10.0, 12.0, 14.0])
    assert fit_censored_normal(x, np.array([])) == pytest.approx((12.0, float(np.std(x))))


def test_imputation_keeps_observed_and_fills_beyond_cap() -> None:
    rng = np.random.default_rng(1)
    lengths = np.array([100.0, 120.0, 140.0, 200.0, 200.0])
    cens = np.array([False, False, False, True, True])
    out = impute_censored(lengths, cens, 12, rng)
    assert out.shape == (12, 5)
    assert (out[:, :3] == lengths[:3]).all()
    assert (out[:, 3:] >= 200.0).all() and out[:, 3:].std() > 0
    same = impute_censored(lengths[:3], cens[:3], 4, rng)
    assert (same == lengths[:3]).all()


def test_censoring_points_may_differ() -> None:
    """A sample cut early (say by a context limit) is imputed above its own cut, not above the cap."""
    rng = np.random.default_rng(2)
    lengths = np.array([100.0, 110.0, 120.0, 130.0, 90.0])
    cens = np.array([False, False, False, False, True])
    out = impute_censored(lengths, cens, 50, rng)
    assert (out[:, 4] >= 90.0).all() and out[:, 4].min() < 110.0


def test_tail_check_tells_tails_from_loops(censored_run, tmp_path) -> None:
    """Truncations from a long tail pass the check; a runaway mode (loops) that always hits the cap fails it,
    and then the headline bound is the capped one and the theory is checked on EOS samples."""
    from lenpred.stats import BoundConfig, analyse_run
    from lenpred.stats import synthetic as sim

    tc = censored_run.summary.tail_check
    assert tc.tested and tc.consistent and tc.observed_truncated > 100
    assert tc.ratio == pytest.approx(tc.observed_truncated / tc.expected_truncated)
    assert censored_run.summary.headline == "censored" == censored_run.summary.theory_variant

    truth = sim.write_synthetic_run(tmp_path / "loops", sim.ramping_hazard(120, seed=6),
                                    sim.Sampling(k=8, max_new_tokens=900, seed=6, runaway=0.08))
    a = analyse_run(tmp_path / "loops", BoundConfig(n_boot=200, n_boot_robust=20, n_normal_reference=500))
    s = a.summary
    assert not s.tail_check.consistent and s.tail_check.ratio > 20
    assert s.headline == "capped" and s.theory_variant == "eos"
    assert "separate mode" in s.variant_choice
    assert any(c.startswith(f"{s.tail_check.observed_truncated} truncations where") for c in s.cautions)
    t = truth.summary()
    assert s.variants["capped"].oracle_mae == pytest.approx(t["capped_oracle_mae"], rel=0.1)
    # the responses that end still show the theory's normal law and its ramp (loops left out of the
    # hazard: kept at risk for ever they would dilute the late hazard)
    assert s.verdicts["normal_law"].status == "HOLDS"
    assert s.verdicts["hazard_ramp"].status == "HOLDS"
    assert s.hazard.normalized.late_early_ratio >= 2.0
    assert s.variants["eos"].oracle_mae == pytest.approx(t["oracle_mae"], rel=0.1)


def test_tail_check_counts_only_the_prompts_it_can_fit() -> None:
    """A prompt with fewer than 3 EOS samples cannot be fitted; its truncations are not counted, and a
    check that fitted no prompt says so (tested is False) instead of reporting '0 truncated'."""
    from lenpred.stats.censoring import tail_check

    fit = (np.array([100.0, 110.0, 120.0, 130.0, 140.0]), np.zeros(5, dtype=bool))
    unfit = (np.array([50.0, 200.0, 200.0]), np.array([False, True, True]))
    tc = tail_check([fit, unfit], cap=200)
    assert tc.n_prompts == 1 and tc.observed_truncated == 0 and tc.tested
    none = tail_check([unfit, unfit], cap=200)
    assert none.n_prompts == 0 and not none.tested
