"""The ``outlets`` head on planted-truth trajectories (tests/outlets/eval_synth.py).

The draft block is a noisy linear image of log1p(L - t): a linear readout of it is close to the best
any head can do (the planted noise sets that error), and the head must come near it. The fused block
carries only the prompt latent, so a head on it cannot beat the per-prompt information (the carried
oracle); a head whose labels were shuffled learns nothing and cannot beat the carried constant.
"""

from __future__ import annotations

import numpy as np
import pytest

from lenpred.errors import CardMismatchError, ConfigError, DataError, NotFittedError
from lenpred.outlets.baselines import CarriedConstant, carried_oracle
from lenpred.outlets.store import Trajectory
from lenpred.predictors.io import load_head
from lenpred.predictors.outlets import VARIANTS, OutletsHead, row_weights, two_piece_moments
from lenpred.predictors.registry import make_predictor
from outlets.eval_synth import CAP, CARD, parts

FAST = {"epochs": 30}


@pytest.fixture(scope="module")
def data():
    return parts(n_train=160, n_val=40, n_test=40)


@pytest.fixture(scope="module")
def heads(data):
    tr, va = data["train"]["traj"], data["val"]["traj"]
    out = {}
    for v in ("outlets", "outlets-fused", "probe", "outlets-softlabel"):
        out[v] = make_predictor("outlets", {**VARIANTS[v], **FAST}).fit(tr, X_val=va, cap=CAP)
    return out


def _mae(pred, traj) -> float:
    y = traj.index["remaining"].to_numpy(float)
    return float(np.average(np.abs(pred - y), weights=row_weights(traj.index)))


def _baselines(data):
    te = data["test"]["traj"]
    const = CarriedConstant.from_samples(data["train"]["lengths"]).predict(te.index["t"].to_numpy())
    oracle = carried_oracle(te.index, data["test"]["lengths"], fallback=const)
    return _mae(const.q50, te), _mae(oracle.q50, te)


def test_head_reaches_the_planted_error_and_beats_the_carried_constant(data, heads):
    tr, te = data["train"]["traj"], data["test"]["traj"]
    const, oracle = _baselines(data)
    mae = _mae(heads["outlets"].predict(te), te)
    # the planted limit: least squares from the draft block (and progress) to log1p(remaining)
    def design(traj: Trajectory) -> np.ndarray:
        t = traj.index["t"].to_numpy(float)
        return np.column_stack([traj.block("draft"), t, np.log1p(t), np.ones(traj.n)])

    coef, *_ = np.linalg.lstsq(design(tr), np.log1p(tr.index["remaining"].to_numpy(float)), rcond=None)
    readout = _mae(np.expm1(design(te) @ coef), te)
    assert readout < 5.0 < const  # the planted noise allows a few tokens; the constant is ~70 off
    assert mae <= 1.6 * readout + 1.0, f"head {mae:.2f}, linear readout {readout:.2f}"
    assert mae <= 0.1 * const and mae <= 0.15 * oracle, (mae, const, oracle)


def test_fused_head_is_held_to_the_prompt_information(data, heads):
    te = data["test"]["traj"]
    _, oracle = _baselines(data)
    fused = _mae(heads["outlets-fused"].predict(te), te)
    # the fused block only knows the prompt latent: no better than the per-prompt oracle (LOO over 7
    # samples is ~8% above the true oracle), far worse than the draft head
    assert fused >= 0.85 * oracle, (fused, oracle)
    assert fused > 5 * _mae(heads["outlets"].predict(te), te)


def test_head_with_shuffled_labels_learns_nothing(data):
    tr, va, te = data["train"]["traj"], data["val"]["traj"], data["test"]["traj"]
    const, _ = _baselines(data)
    y = np.random.default_rng(0).permutation(tr.index["remaining"].to_numpy(float))
    broken = OutletsHead(epochs=8).fit(tr, y, X_val=va, cap=CAP)
    assert _mae(broken.predict(te), te) >= 0.85 * const


def test_probe_and_softlabel_heads_learn(data, heads):
    te = data["test"]["traj"]
    const, oracle = _baselines(data)
    assert _mae(heads["probe"].predict(te), te) < 0.7 * oracle  # target.10 carries the remaining length, noisier
    assert _mae(heads["outlets-softlabel"].predict(te), te) < 0.15 * const
    p = heads["probe"].predict_proba(te)
    assert p.shape == (te.n, 10) and np.allclose(p.sum(1), 1.0)
    assert heads["probe"].blocks_ == {"x": ["target.10"]}  # the "target" selector resolved


@pytest.mark.parametrize("name", ["outlets", "outlets-fused", "probe", "outlets-softlabel"])
def test_quantiles_ordered_and_within_what_can_remain(name, data, heads):
    te = data["test"]["traj"]
    d = heads[name].predict_dist(te)
    top = CAP - te.index["t"].to_numpy(float)
    assert (d.q10 <= d.q50 + 1e-9).all() and (d.q50 <= d.q90 + 1e-9).all()
    assert (d.q10 >= 0).all() and (d.q90 <= top + 1e-9).all() and (d.mean <= top + 1e-9).all()
    np.testing.assert_allclose(heads[name].predict_total(te), te.index["t"].to_numpy() + heads[name].predict(te))


def test_regression_interval_is_calibrated_on_validation(data, heads):
    h = heads["outlets"]
    for part, lo, hi in (("val", 0.78, 0.82), ("test", 0.6, 0.95)):
        traj = data[part]["traj"]
        d = h.predict_dist(traj)
        y = traj.index["remaining"].to_numpy(float)
        cover = np.average((y >= d.q10) & (y <= d.q90), weights=row_weights(traj.index))
        assert lo <= cover <= hi, (part, cover)


def test_truncated_rows_are_served_remaining(data, heads):
    te = data["test"]["traj"]
    tr = te.index["truncated"].to_numpy(bool)
    assert tr.any()
    # the label of a truncated sample is what a server generates: exactly cap - t
    np.testing.assert_array_equal(te.index["remaining"].to_numpy()[tr], CAP - te.index["t"].to_numpy()[tr])
    assert (heads["outlets"].predict(te)[tr] <= CAP - te.index["t"].to_numpy()[tr] + 1e-9).all()


@pytest.mark.parametrize("name", ["outlets", "probe"])
def test_save_load_gives_identical_predictions(name, data, heads, tmp_path):
    h, te = heads[name], data["test"]["traj"]
    h.save(tmp_path / name, card=CARD, meta={"variant": name})
    back = load_head(tmp_path / name, card=CARD)
    assert type(back) is OutletsHead and back.get_params() == h.get_params()
    np.testing.assert_array_equal(back.predict(te), h.predict(te))
    d0, d1 = h.predict_dist(te), back.predict_dist(te)
    for f in ("mean", "spread", "q10", "q50", "q90"):
        np.testing.assert_array_equal(getattr(d1, f), getattr(d0, f), err_msg=f)
    assert back.feature_spec_ == h.feature_spec_ and back.cap_ == CAP
    assert sorted(p.name for p in (tmp_path / name).iterdir()) == ["meta.json", "state.json", "weights.safetensors"]


def _with_spec(traj: Trajectory, **changes) -> Trajectory:
    import copy

    spec = copy.deepcopy(traj.spec)
    for dotted, v in changes.items():
        cur = spec
        *path, leaf = dotted.split("__")
        for p in path:
            cur = cur[p]
        cur[leaf] = v
    return Trajectory(traj.index, traj.blocks, spec)


def test_refuses_features_of_another_draft_head_or_target(data, heads):
    h, te = heads["outlets"], data["test"]["traj"]
    with pytest.raises(CardMismatchError, match=r"another draft head .*\(draft\.sha256: 'eeee"):
        h.predict(_with_spec(te, draft__sha256="e" * 64))
    with pytest.raises(CardMismatchError, match=r"another target model .*target\.fingerprint"):
        h.predict(_with_spec(te, target__fingerprint="sha256:other"))
    with pytest.raises(CardMismatchError, match=r"another trajectory spec .*layers\.target"):
        h.predict(_with_spec(te, layers__target=11))
    # where positions were taken, and where the draft head lives, do not change what a row means
    h.predict(_with_spec(te, positions__stride=64, draft__path="/elsewhere"))


def test_refuses_other_inputs(data, heads):
    h, te = heads["outlets"], data["test"]["traj"]
    with pytest.raises(DataError, match="reads trajectory features"):
        h.predict(np.zeros((3, 16)))
    narrow = Trajectory(te.index, {**te.blocks, "draft": te.blocks["draft"][:, :8]}, te.spec)
    with pytest.raises(DataError, match="block 'draft' has width 8"):
        h.predict(narrow)
    no_draft = Trajectory(te.index, {k: v for k, v in te.blocks.items() if k != "draft"}, te.spec)
    with pytest.raises(DataError, match="no block 'draft'"):
        h.predict(no_draft)
    with pytest.raises(DataError, match="regression head"):
        h.predict_proba(te)


def test_unfitted_and_bad_hyperparameters(data, tmp_path):
    te = data["test"]["traj"]
    h = OutletsHead()
    for call in (lambda: h.predict(te), lambda: h.predict_dist(te), lambda: h.save(tmp_path / "h")):
        with pytest.raises(NotFittedError, match="this outlets head is not fitted"):
            call()
    assert not (tmp_path / "h").exists()
    with pytest.raises(ConfigError, match="refine needs loss=softlabel"):
        OutletsHead(refine=True).fit(te)
    with pytest.raises(ConfigError, match="hyperparameter loss"):
        OutletsHead(loss="l2").fit(te)
    assert not [a for a in vars(OutletsHead()) if a.endswith("_")]


def test_row_weights_count_each_prompt_once():
    import pandas as pd

    idx = pd.DataFrame({"prompt_id": ["a"] * 4 + ["b"] * 2, "sample_idx": [0, 0, 0, 1, 0, 0]})
    w = row_weights(idx)
    raw = np.array([1 / 6, 1 / 6, 1 / 6, 1 / 2, 1 / 2, 1 / 2])  # a: 2 samples (3 rows, 1 row); b: 1 sample, 2 rows
    np.testing.assert_allclose(w, raw / raw.mean())


def test_two_piece_moments_match_sampling():
    rng = np.random.default_rng(0)
    z = np.abs(rng.standard_normal(400_000))
    s1, s2, m = 10.0, 30.0, 100.0
    x = np.where(rng.random(z.size) < 0.5, m - s1 * z, m + s2 * z)
    from lenpred.predictors.dist import Z90

    mean, sd = two_piece_moments(np.array([m - Z90 * s1]), np.array([m]), np.array([m + Z90 * s2]))
    assert abs(mean[0] - x.mean()) < 0.2 and abs(sd[0] - x.std()) < 0.2
    assert abs(np.quantile(x, 0.1) - (m - Z90 * s1)) < 0.3 and abs(np.quantile(x, 0.9) - (m + Z90 * s2)) < 0.5
