"""The oracle bound: estimators on known laws and on synthetic runs with an exact answer."""

from __future__ import annotations

import numpy as np
import pytest
from stats_helpers import covers

from lenpred.data.lengths import loo_median_sorted
from lenpred.stats.oracle import mae_estimates
from lenpred.stats.results import VariantBound


@pytest.mark.parametrize("k", [2, 3, 4, 5, 8, 9])
def test_leave_one_out_median_matches_brute_force(k: int) -> None:
    rng = np.random.default_rng(k)
    x = rng.integers(0, 50, size=(1, 6, k)).astype(float)  # ties included on purpose
    brute = np.array(
        [[abs(x[0, p, j] - np.median(np.delete(x[0, p], j))) for j in range(k)] for p in range(6)]
    )
    got = mae_estimates(x)
    np.testing.assert_allclose(got["mae_loo"], brute.mean(1))
    # the one leave-one-out median (lenpred.data.lengths) is the one the bound uses
    s = np.sort(x[0], axis=1)
    np.testing.assert_allclose(np.abs(s - loo_median_sorted(s)).mean(1), brute.mean(1))
    ins = np.abs(x[0] - np.median(x[0], axis=1, keepdims=True)).mean(1)
    np.testing.assert_allclose(got["mae_insample"], ins)
    np.testing.assert_allclose(got["mae_oracle"], np.sqrt(ins * brute.mean(1)))


@pytest.mark.parametrize(
    ("name", "draw", "truth"),
    [
        ("normal", lambda rng, s: rng.normal(0.0, 1.0, s), np.sqrt(2 / np.pi)),
        ("exponential", lambda rng, s: rng.exponential(1.0, s), np.log(2.0)),
    ],
)
def test_bracket_and_point_estimate(name: str, draw, truth: float) -> None:
    """E[in-sample] < oracle < E[LOO] for any law; the geometric mean is within 1.5% at K = 8."""
    rng = np.random.default_rng(0)
    est = mae_estimates(draw(rng, (1, 20_000, 8)))
    ins, loo, geo = (est[k].mean() / truth for k in ("mae_insample", "mae_loo", "mae_oracle"))
    assert ins < 0.95 and loo > 1.05, (name, ins, loo)  # both biases are real at K = 8 ...
    assert abs(geo - 1.0) < 0.015, (name, geo)  # ... and the correction removes them


def _check_bound(run, variant: str = "censored", tol: float = 0.06, per_sample_relative: bool = True) -> None:
    """Tolerances are ~3 standard errors of each figure for runs of this size (checked over seeds)."""
    v = run.summary.variants[variant]
    assert isinstance(v, VariantBound)
    t = run.truth.summary()
    assert covers(v.oracle_mae_ci, t["oracle_mae"])
    assert v.oracle_mae == pytest.approx(t["oracle_mae"], rel=tol)
    if run.truth.k <= 8:  # the bracket holds in expectation; at K = 8 its width (~9%) dwarfs the noise
        assert v.oracle_mae_insample < t["oracle_mae"] < v.oracle_mae_loo
    assert v.relative_mae == pytest.approx(t["relative_mae"], rel=tol)
    if per_sample_relative:
        assert v.mean_relative_error == pytest.approx(t["mean_relative_error"], rel=2 * tol)
    assert v.oracle_mse == pytest.approx(t["oracle_mse"], rel=2 * tol)
    assert v.oracle_rmse**2 == pytest.approx(v.oracle_mse)
    # the mean of K samples has noise sd / sqrt(K): ~1% here for near-normal lengths, ~1.6% for geometric
    assert v.mean_length == pytest.approx(t["mean_length"], rel=0.05 if run.truth.k > 8 else 0.03)


def test_bound_recovers_truth_ramping_hazard(ramp_run) -> None:
    _check_bound(ramp_run)
    # without truncation the three treatments coincide
    vs = ramp_run.summary.variants
    assert vs["eos"].oracle_mae == vs["capped"].oracle_mae == vs["censored"].oracle_mae


def test_bound_recovers_truth_segment_sum(segment_run) -> None:
    _check_bound(segment_run)


def test_bound_recovers_truth_geometric(geometric_run) -> None:
    # a skewed law with K = 24: the correction still lands on the exact bound. (The mean of |L - m| / L
    # is not checked: with geometric lengths it is dominated by the rare one-token responses.)
    _check_bound(geometric_run, tol=0.05, per_sample_relative=False)


def test_censoring_aware_bound(censored_run) -> None:
    """Truncated samples: censoring-aware ~ latent truth, capped ~ served truth, EOS-only biased low."""
    s = censored_run.summary
    assert 0.05 < s.counts.truncated_share < 0.13
    assert s.counts.truncated_samples == round(s.counts.truncated_share * s.counts.samples)
    truth = censored_run.truth.per_prompt.set_index("prompt_id")
    cens = s.variants["censored"]
    kept = censored_run.analysis.variants_per_prompt["censored"]["prompt_id"]
    assert cens.n_prompts == len(kept) < 300  # prompts with half or more truncated are dropped ...
    assert cens.dropped_prompts["half_or_more_truncated"] > 0
    assert sum(cens.dropped_prompts.values()) == 300 - len(kept)
    pp = censored_run.analysis.variants_per_prompt["censored"]
    assert cens.imputed_samples == int(pp["n_truncated"].sum()) > 0
    latent = truth.loc[kept, "mae"].mean()  # ... so the truth is over the kept prompts
    assert cens.oracle_mae == pytest.approx(latent, rel=0.05)

    capped = s.variants["capped"]
    assert capped.n_prompts == 300
    assert capped.oracle_mae == pytest.approx(truth["capped_mae"].mean(), rel=0.05)
    assert capped.oracle_mae < truth["mae"].mean()

    eos = s.variants["eos"]
    assert eos.oracle_mae < 0.95 * truth["mae"].mean()  # dropping the long samples shrinks the spread


def test_per_prompt_table(ramp_run) -> None:
    pp = ramp_run.analysis.per_prompt
    truth = ramp_run.truth.per_prompt.set_index("prompt_id").loc[pp["prompt_id"]]
    for col in (
        "mean",
        "median",
        "sd",
        "mad_median",
        "q10",
        "q25",
        "q75",
        "q90",
        "trunc_share",
        "mae_oracle",
    ):
        assert col in pp
    assert len(pp) == 300 and (pp["k"] == 8).all() and (pp["trunc_share"] == 0).all()
    assert ramp_run.summary.cautions == []  # complete run, enough prompts and samples, no truncation
    assert np.corrcoef(pp["mean"], truth["mean"])[0, 1] > 0.95
    assert (
        (pp["q10"] <= pp["q25"]).all()
        and (pp["q25"] <= pp["median"]).all()
        and (pp["median"] <= pp["q75"]).all()
    )
