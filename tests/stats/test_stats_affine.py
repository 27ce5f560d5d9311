"""The affine law sd = alpha * mu + b: recovered from per-prompt estimates despite their noise."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from lenpred.stats.affine import fit_affine


def covers(ci: tuple[float, float], value: float, slack: float = 0.25) -> bool:
    """``value`` inside the 95% interval widened by ``slack`` of its width on each side (~99% coverage):
    one synthetic run is one draw, and a test must not fail on the 5% of draws a 95% interval misses."""
    lo, hi = ci
    return lo - slack * (hi - lo) < value < hi + slack * (hi - lo)


def _fit(x: np.ndarray, **kw):
    return fit_affine(
        x.mean(1),
        x.std(1, ddof=1),
        np.full(len(x), x.shape[1]),
        stats.skew(x, axis=1, bias=False),
        n_boot=kw.get("n_boot", 200),
        n_boot_robust=20,
        ci=0.95,
        rng=np.random.default_rng(0),
    )


def test_exact_affine_law_normal_samples() -> None:
    """Many prompts, K = 8 normal samples: corrected alpha and b are unbiased, the naive fit is not."""
    rng = np.random.default_rng(5)
    mu = rng.uniform(100, 500, 3000)
    sigma = 0.25 * mu + 20.0
    x = rng.normal(mu[:, None], sigma[:, None], (3000, 8))
    f = _fit(x)
    assert f["alpha"] == pytest.approx(0.25, abs=0.012)
    assert f["b"] == pytest.approx(20.0, abs=4.0)
    assert covers(f["alpha_ci"], 0.25)
    assert f["robust"]["alpha"] == pytest.approx(0.25, abs=0.02)
    # the naive fit of s on the sample mean is attenuated by c4(8) and by the noise in the means
    assert f["uncorrected_ols"]["alpha"] < 0.235
    assert 0.5 < f["reliability"] < 1.0 and not f["reliability_floored"]
    assert f["r2_denoised"] > 0.9 > f["r2"]


def test_too_few_prompts_is_reported_not_raised() -> None:
    x = np.array([[1.0, 2.0, 3.0], [2.0, 3.0, 5.0]])
    f = _fit(x)
    assert f["available"] is False and "prompts" in f["reason"]


def test_ramping_hazard_alpha_b(ramp_run) -> None:
    af, t = ramp_run.summary["affine"], ramp_run.truth.summary()
    assert t["alpha"] == pytest.approx(0.15, abs=0.002)  # the generator's law, up to discretisation
    assert af["alpha"] == pytest.approx(t["alpha"], abs=0.035)
    assert af["b"] == pytest.approx(t["b"], abs=10.0)
    assert covers(af["alpha_ci"], t["alpha"])
    assert covers(af["b_ci"], t["b"])
    assert af["robust"]["alpha"] == pytest.approx(t["alpha"], abs=0.04)


def test_segment_sum_alpha_is_count_cv(segment_run) -> None:
    s, t = segment_run.summary, segment_run.truth.summary()
    af, seg = s["affine"], s["segments"]
    assert t["segment_cv"] == pytest.approx(0.30, abs=0.01)
    assert t["alpha"] == pytest.approx(t["segment_cv"], abs=0.01)  # the theory's claim, exactly true here
    assert af["alpha"] == pytest.approx(t["alpha"], abs=0.045)
    assert covers(af["alpha_ci"], t["alpha"])
    assert seg["cv_mean"] == pytest.approx(t["segment_cv"], abs=0.02)
    assert s["alpha_vs_segment_cv"]["agree"] is True
    assert s["verdicts"]["alpha_is_segment_cv"].startswith("HOLDS")
    assert s["verdicts"]["affine_law"].startswith("HOLDS")


def test_noisy_means_are_flagged(geometric_run) -> None:
    """Geometric lengths with K = 24: the means' own noise (sd / sqrt(K) ~ 46 tokens) exceeds their spread
    across prompts (mu in 150..300), so no slope correction is trustworthy and the verdict says so."""
    af = geometric_run.summary["affine"]
    assert af["reliability_floored"] is True
    assert geometric_run.summary["verdicts"]["affine_law"].startswith("UNRELIABLE")
    assert geometric_run.summary["alpha_vs_segment_cv"]["determined"] is False
