"""The synthetic generators: exact pmfs, samplers that follow them, and runs written like an engine's."""

from __future__ import annotations

import numpy as np
import pytest

from lenpred.data.rundir import RunDir
from lenpred.stats import synthetic as sim


def _mc_check(gen, prompt: int, n: int = 100_000) -> None:
    """The sampler (the process itself) against the exact pmf of one prompt, by a large Monte Carlo."""
    p = gen.pmf()[prompt]
    t = np.arange(len(p))
    med = int(np.argmax(p.cumsum() >= 0.5))
    one = type(gen)(
        **{
            **_fields(gen),
            _array_field(gen): np.asarray(getattr(gen, _array_field(gen)))[prompt : prompt + 1],
        }
    )
    draws = one.sample(n, np.random.default_rng(7), cap=10**6)[0][0].astype(float)
    assert draws.mean() == pytest.approx(p @ t, rel=0.005)
    assert draws.std() == pytest.approx(np.sqrt(p @ t**2 - (p @ t) ** 2), rel=0.01)
    exact_mae = float(p @ np.abs(t - med))
    assert np.abs(draws - np.median(draws)).mean() == pytest.approx(exact_mae, rel=0.01)


def _array_field(gen) -> str:
    return "mu" if isinstance(gen, sim.RampingHazard) else "mean_segments"


def _fields(gen) -> dict:
    if isinstance(gen, sim.RampingHazard):
        return {"alpha": gen.alpha, "b": gen.b, "shape": gen.shape}
    return {"count_cv": gen.count_cv, "seg_mean": gen.seg_mean, "seg_sd": gen.seg_sd}


def test_ramping_hazard_law() -> None:
    gen = sim.ramping_hazard(20, alpha=0.2, b=10.0, seed=0)
    p = gen.pmf()
    assert p.sum(1) == pytest.approx(np.ones(20))
    tr = sim.truth(gen, 10**6, 8, [str(i) for i in range(20)]).per_prompt
    # sd = alpha mu + b up to discretisation (integer lengths add 1/12 to the variance, ~0.5 to the mean)
    np.testing.assert_allclose(tr["sd"], gen.sigma, rtol=0.01)
    np.testing.assert_allclose(tr["mean"], gen.mu + 0.5, atol=0.6)
    h = gen.hazard(int(gen.mu.max()))[0]
    onset = int(np.floor(gen.onset[0]))
    assert (h[: onset + 1] == 0).all() and (np.diff(h[onset + 1 :]) > 0).all()  # zero, then a ramp
    _mc_check(gen, 3)


def test_constant_hazard_is_geometric() -> None:
    gen = sim.constant_hazard(5, seed=0)
    h = gen.hazard(500)[:, 1:]
    np.testing.assert_allclose(h, h[:, :1] * np.ones_like(h), rtol=1e-9)
    tr = sim.truth(gen, 10**6, 8, list("abcde")).per_prompt
    np.testing.assert_allclose(tr["sd"], tr["mean"], rtol=0.01)  # geometric: sd ~ mean
    _mc_check(gen, 1)


def test_segment_sum_law() -> None:
    gen = sim.segment_sum(10, seed=0)
    p = gen.pmf()
    assert p.sum(1) == pytest.approx(np.ones(10))
    cv = gen.count_cv_exact()
    np.testing.assert_allclose(cv, 0.3, atol=0.01)
    _mc_check(gen, 2, n=100_000)


def test_bad_generator_parameters() -> None:
    with pytest.raises(ValueError, match="onset"):
        sim.ramping_hazard(10, alpha=0.5, b=50.0, mu_range=(20.0, 40.0))
    with pytest.raises(ValueError, match="seg_sd"):
        sim.segment_sum(10, seg_mean=25.0, seg_sd=2.0)


def test_written_run_looks_like_an_engine_run(tmp_path) -> None:
    truth = sim.write_synthetic_run(tmp_path / "r", sim.ramping_hazard(30, seed=2),
                                    sim.Sampling(k=5, max_new_tokens=300), shard_prompts=7)
    rd = RunDir.open(tmp_path / "r")
    assert len(rd.shard_paths()) == 5
    assert rd.card["sampling"]["max_new_tokens"] == 300
    s = rd.samples()
    assert len(s) == 150 and set(s["stop_reason"]) == {"eos", "length"}
    trunc = s["stop_reason"] == "length"
    assert (s.loc[trunc, "n_tokens"] == 300).all() and (s.loc[~trunc, "n_tokens"] <= 300).all()
    words = s["text"].str.split().str.len()
    assert (words == s["n_tokens"]).all()  # one word per token, truncated text cut at the cap
    assert truth.summary()["truncated_share"] == pytest.approx(trunc.mean(), abs=0.08)
    # same generator and seed: the same samples
    sim.write_synthetic_run(tmp_path / "r2", sim.ramping_hazard(30, seed=2),
                            sim.Sampling(k=5, max_new_tokens=300), shard_prompts=7)
    assert (RunDir.open(tmp_path / "r2").samples()["n_tokens"] == s["n_tokens"]).all()
