"""The affine law sd = alpha * mu + b: recovered from per-prompt estimates despite their noise."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from stats_helpers import covers

from lenpred.stats.affine import fit_affine, theil_sen_slope
from lenpred.stats.config import BoundConfig
from lenpred.stats.results import AffineFit, AffineUnavailable

# sd of the estimates over 10-12 seeds (measured with the generators below): what the estimator can
# promise at these sizes. Tolerances are 3 of them (plus the measured finite-sample bias).
SD_ALPHA_3000, SD_B_3000 = 0.0025, 0.8  # 3000 normal prompts x 8, sd = 0.25 mu + 20
SD_ALPHA_300, SD_B_300 = 0.010, 2.8  # the ramp run: 300 prompts x 8, sd = 0.15 mu + 12


def _fit(x: np.ndarray, n_boot: int = 200) -> AffineFit | AffineUnavailable:
    return fit_affine(
        x.mean(1),
        x.std(1, ddof=1),
        np.full(len(x), x.shape[1]),
        stats.skew(x, axis=1, bias=False),
        BoundConfig(n_boot=n_boot, n_boot_robust=20, ci=0.95),
        np.random.default_rng(0),
    )


def test_exact_affine_law_normal_samples() -> None:
    """Many prompts, K = 8 normal samples: corrected alpha and b are unbiased, the naive fit is not."""
    rng = np.random.default_rng(5)
    mu = rng.uniform(100, 500, 3000)
    sigma = 0.25 * mu + 20.0
    x = rng.normal(mu[:, None], sigma[:, None], (3000, 8))
    f = _fit(x)
    assert isinstance(f, AffineFit)
    assert f.alpha == pytest.approx(0.25, abs=3 * SD_ALPHA_3000)
    assert f.b == pytest.approx(20.0, abs=0.6 + 3 * SD_B_3000)  # 0.6: the mean bias over seeds
    assert not f.b == pytest.approx(16.0, abs=0.6 + 3 * SD_B_3000)  # a 20% error in b would be caught
    assert covers(f.alpha_ci, 0.25) and not covers(f.alpha_ci, 0.23)
    assert f.robust.alpha == pytest.approx(0.25, abs=0.01)
    # the naive fit of s on the sample mean is attenuated by c4(8) and by the noise in the means
    assert f.uncorrected_ols.alpha < 0.235
    assert 0.5 < f.reliability < 1.0 and not f.reliability_floored
    assert f.r2_denoised > 0.9 > f.r2


def test_too_few_prompts_is_reported_not_raised() -> None:
    x = np.array([[1.0, 2.0, 3.0], [2.0, 3.0, 5.0]])
    f = _fit(x)
    assert isinstance(f, AffineUnavailable) and f.n_prompts == 2 and "prompts" in f.reason


def test_theil_sen_without_distinct_x_is_nan_not_a_warning() -> None:
    """A bootstrap resample of a tiny run can draw one prompt only: no pair has dx != 0."""
    with np.errstate(all="raise"):
        assert np.isnan(theil_sen_slope(np.array([3.0, 3.0, 3.0]), np.array([1.0, 2.0, 4.0])))
    # robust: one wild point among five moves 4 of the 10 pairwise slopes, not the median
    assert theil_sen_slope(np.arange(5.0), np.array([1.0, 3.0, 5.0, 7.0, 100.0])) == 2.0


def test_ramping_hazard_alpha_b(ramp_run) -> None:
    af, t = ramp_run.summary.affine, ramp_run.truth.summary()
    assert isinstance(af, AffineFit)
    assert t["alpha"] == pytest.approx(0.15, abs=0.002)  # the generator's law, up to discretisation
    assert t["b"] == pytest.approx(12.0, abs=0.2)
    assert af.alpha == pytest.approx(t["alpha"], abs=3 * SD_ALPHA_300)
    assert af.b == pytest.approx(t["b"], abs=3 * SD_B_300)
    # ... and the same tolerance tells the affine law from a proportional one (b = 0) or a b twice as large
    assert abs(af.b - 0.0) > 3 * SD_B_300 and abs(af.b - 2 * t["b"]) > 3 * SD_B_300
    assert covers(af.alpha_ci, t["alpha"])
    assert covers(af.b_ci, t["b"]) and not covers(af.b_ci, 0.0)
    assert af.robust.alpha == pytest.approx(t["alpha"], abs=0.04)


def test_segment_sum_alpha_is_count_cv(segment_run) -> None:
    s, t = segment_run.summary, segment_run.truth.summary()
    af, seg, avc = s.affine, s.segments, s.alpha_vs_segment_cv
    assert t["segment_cv"] == pytest.approx(0.30, abs=0.01)
    assert t["alpha"] == pytest.approx(t["segment_cv"], abs=0.01)  # the theory's claim, exactly true here
    assert af.alpha == pytest.approx(t["alpha"], abs=0.045)
    assert covers(af.alpha_ci, t["alpha"])
    assert seg.cv_mean == pytest.approx(t["segment_cv"], abs=0.02)
    assert avc.agree is True and avc.ratio == pytest.approx(af.alpha / seg.cv_mean)
    v = s.verdicts["alpha_is_segment_cv"]
    assert v.status == "HOLDS"
    assert f"alpha = {af.alpha:.3f} vs CV of the paragraph count = {seg.cv_mean:.3f}" in v.detail
    assert s.verdicts["affine_law"].status == "HOLDS"
    assert f"alpha = {af.alpha:.3f}" in s.verdicts["affine_law"].detail


def test_noisy_means_are_flagged(geometric_run) -> None:
    """Geometric lengths with K = 24: the means' own noise (sd / sqrt(K) ~ 46 tokens) exceeds their spread
    across prompts (mu in 150..300), so no slope correction is trustworthy and the verdict says so."""
    s = geometric_run.summary
    assert s.affine.reliability_floored is True
    assert s.verdicts["affine_law"].status == "UNRELIABLE"
    assert s.alpha_vs_segment_cv.determined is False
    assert s.verdicts["alpha_is_segment_cv"].status == "UNDETERMINED"
