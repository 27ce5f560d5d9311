"""Baselines at trajectory positions: hand-checked conditioning on survival, TRAIL's refinement."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lenpred.errors import DataError
from lenpred.outlets.baselines import (
    CarriedConstant,
    Remaining,
    carried_oracle,
    carry_prefill,
    refine_sequence,
    refine_trajectories,
    transition_matrix,
    two_piece_carry,
)
from lenpred.predictions import Predictions
from lenpred.stats.quantiles import Z90

EDGES3 = np.array([0.0, 10.0, 20.0, 30.0])


# ---------------------------------------------------------------- TRAIL's Bayesian refinement
def test_transition_moves_one_bin_down_at_the_rate_tokens_are_generated():
    # 5 tokens in bins 10 wide: half of each bin's mass moves one bin down; bin 0 keeps what falls out
    np.testing.assert_allclose(transition_matrix(EDGES3, 5), [[1, 0, 0], [0.5, 0.5, 0], [0, 0.5, 0.5]])
    np.testing.assert_allclose(transition_matrix(EDGES3, 5, absorb=False), [[0.5, 0, 0], [0.5, 0.5, 0], [0, 0.5, 0.5]])
    np.testing.assert_allclose(transition_matrix(EDGES3, 10), [[1, 0, 0], [1, 0, 0], [0, 1, 0]])
    np.testing.assert_allclose(transition_matrix(EDGES3, 15), [[1, 0, 0], [1, 0, 0], [0.5, 0.5, 0]])
    np.testing.assert_allclose(transition_matrix(EDGES3, 0), np.eye(3))
    post = np.array([0.2, 0.3, 0.5])
    np.testing.assert_allclose(post @ transition_matrix(EDGES3, 5), [0.35, 0.4, 0.25])


def test_refinement_by_hand():
    lik = np.array([[0.2, 0.3, 0.5], [0.5, 0.25, 0.25]])
    post = refine_sequence(lik, np.array([0.0, 5.0]), EDGES3)
    np.testing.assert_allclose(post[0], [0.2, 0.3, 0.5])
    raw = np.array([0.5 * 0.35, 0.25 * 0.4, 0.25 * 0.25])  # likelihood x (posterior @ transition)
    np.testing.assert_allclose(post[1], raw / raw.sum())
    # complete disagreement (zero overlap) falls back to the new evidence rather than dividing by 0
    post = refine_sequence(np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]), np.array([0.0, 1.0]), EDGES3)
    np.testing.assert_allclose(post[1], [1.0, 0.0, 0.0])


def test_refine_trajectories_per_sample_in_any_row_order():
    rng = np.random.default_rng(0)
    idx = pd.DataFrame({"prompt_id": ["a"] * 3 + ["b"] * 2, "sample_idx": [0, 0, 0, 0, 0], "t": [0, 5, 12, 0, 7]})
    p = rng.dirichlet(np.ones(3), size=5)
    want = np.vstack([refine_sequence(p[:3], np.array([0.0, 5, 12]), EDGES3),
                      refine_sequence(p[3:], np.array([0.0, 7]), EDGES3)])
    perm = rng.permutation(5)
    got = refine_trajectories(p[perm], idx.iloc[perm].reset_index(drop=True), EDGES3)
    np.testing.assert_allclose(got, want[perm])


# ---------------------------------------------------------------- the carried oracle
def _three() -> pd.DataFrame:
    return pd.DataFrame({"prompt_id": "p", "sample_idx": [0, 1, 2], "n_tokens": [10, 20, 40]})


def test_carried_oracle_hand_checked_on_three_samples():
    idx = pd.DataFrame({"prompt_id": "p", "sample_idx": [0, 1, 1, 2, 2], "t": [5, 0, 15, 8, 30]})
    r = carried_oracle(idx, _three())
    # (s0, t=5): others {20, 40} -> {15, 35}: median 25, 10/90% at 17 / 33
    # (s1, t=0): others {10, 40} -> median 25;  (s1, t=15): only 40 survives -> 25
    # (s2, t=8): others {10, 20} -> {2, 12}: median 7;  (s2, t=30): nothing survives -> fallback (1 token)
    np.testing.assert_allclose(r.q50, [25, 25, 25, 7, 1])
    np.testing.assert_allclose(r.q10[:1], [17])
    np.testing.assert_allclose(r.q90[:1], [33])
    assert r.fallback_rows == 1
    fb = Remaining(np.full(5, 3.0), np.full(5, 4.0), np.full(5, 5.0))
    r = carried_oracle(idx, _three(), fallback=fb)
    np.testing.assert_allclose(r.q50, [25, 25, 25, 7, 4])
    np.testing.assert_allclose([r.q10[-1], r.q90[-1]], [3, 5])


def test_carried_oracle_at_start_is_the_loo_prompt_median():
    from lenpred.data.lengths import loo_median

    rng = np.random.default_rng(1)
    s = pd.DataFrame({"prompt_id": np.repeat(["a", "b", "c"], 8), "sample_idx": np.tile(np.arange(8), 3),
                      "n_tokens": rng.integers(0, 300, 24)})
    s.loc[[0, 1, 9], "n_tokens"] = 0  # empty responses count at t = 0
    idx = s[["prompt_id", "sample_idx"]].assign(t=0)
    np.testing.assert_allclose(carried_oracle(idx, s).q50, loo_median(s["n_tokens"], s["prompt_id"]))


def test_carried_oracle_needs_the_prompts_samples():
    idx = pd.DataFrame({"prompt_id": ["zz"], "sample_idx": [0], "t": [0]})
    with pytest.raises(DataError, match="no samples of prompt 'zz'"):
        carried_oracle(idx, _three())


# ---------------------------------------------------------------- the carried constant
def test_carried_constant_by_hand():
    c = CarriedConstant(np.array([10.0, 20.0, 40.0]))
    r = c.predict(np.array([0.0, 15.0, 50.0]))
    assert r.q50[0] == 20.0  # median of {10, 20, 40}
    assert r.q50[1] == 15.0  # {5, 25}: the weighted-quantile midpoint rule
    assert r.q50[2] == 1.0  # nobody in training lasted that long
    # each prompt weighted once: prompt x's two samples count half each
    s = pd.DataFrame({"prompt_id": ["x", "x", "y"], "n_tokens": [10, 12, 100]})
    np.testing.assert_allclose(CarriedConstant.from_samples(s).weights, [0.5, 0.5, 1.0])


# ---------------------------------------------------------------- carrying a prefill distribution
def _mc_conditional(x: np.ndarray, t: float) -> np.ndarray:
    rest = x[x > t] - t
    return np.quantile(rest, [0.1, 0.5, 0.9])


@pytest.mark.parametrize("s1,s2,t", [(40.0, 40.0, 0.0), (40.0, 40.0, 150.0), (20.0, 60.0, 120.0), (60.0, 20.0, 90.0),
                                     (30.0, 50.0, 260.0)])
def test_two_piece_carry_matches_monte_carlo(s1, s2, t):
    rng = np.random.default_rng(0)
    m, cap = 200.0, 300.0
    z = np.abs(rng.standard_normal(2_000_000))
    x = np.clip(np.where(rng.random(z.size) < 0.5, m - s1 * z, m + s2 * z), 0.0, cap)  # served: clipped at the cap
    got = two_piece_carry(np.array([m - Z90 * s1]), np.array([m]), np.array([m + Z90 * s2]), np.array([t]), cap)
    want = _mc_conditional(x, t)
    for g, w in zip(got, want, strict=True):
        assert abs(g[0] - w) < 0.6, (g[0], w)


def test_two_piece_carry_far_in_the_tail_goes_to_zero_not_to_the_cap():
    r10, r50, r90 = two_piece_carry(np.array([100 - Z90 * 10]), np.array([100.0]), np.array([100 + Z90 * 10]),
                                    np.array([600.0]), 2048.0)
    assert 0 < r50[0] < 1.0 and r90[0] < 2.0 and r10[0] <= r50[0]  # 50 sd out: a light normal tail
    assert np.isfinite([r10[0], r50[0], r90[0]]).all()


def test_carry_prefill_from_a_predictions_table():
    idx = pd.DataFrame({"prompt_id": ["a", "a", "b", "c"], "sample_idx": [0, 0, 3, 1], "t": [0, 50, 10, 20]})
    frame = pd.DataFrame({"prompt_id": ["a", "b", "c"], "pred_tokens": [100.0, 80.0, 60.0],
                          "q10": [70.0, np.nan, np.nan], "q50": [100.0, np.nan, np.nan], "q90": [150.0, np.nan, np.nan],
                          "spread": [np.nan, 10.0, np.nan]})
    r = carry_prefill(Predictions.from_frame(frame, made_by="m"), idx, cap=512.0)
    # a at t = 0: its own quantiles (nothing to condition on); at t = 50 conditioned on survival
    np.testing.assert_allclose([r.q10[0], r.q50[0], r.q90[0]], [70.0, 100.0, 150.0])
    want = two_piece_carry(np.array([70.0]), np.array([100.0]), np.array([150.0]), np.array([50.0]), 512.0)
    np.testing.assert_allclose([r.q10[1], r.q50[1], r.q90[1]], [w[0] for w in want])
    assert r.q50[1] > 50.0
    # b: a spread only -> a normal; c: a point only -> about max(pred - t, 0), and the note says so
    want = two_piece_carry(np.array([80 - Z90 * 10]), np.array([80.0]), np.array([80 + Z90 * 10]), np.array([10.0]), 512.0)
    assert abs(r.q50[2] - want[1][0]) < 1e-9
    assert abs(r.q50[3] - 40.0) < 1.0
    assert "point only" in r.note and "spread" in r.note and "quantiles" in r.note
    with pytest.raises(DataError, match="no prediction for 1 of 5 samples"):
        carry_prefill(Predictions.from_frame(frame, made_by="m"),
                      pd.concat([idx, pd.DataFrame({"prompt_id": ["d"], "sample_idx": [0], "t": [0]})]), 512.0)
