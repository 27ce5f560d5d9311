"""The ``outlets`` head on planted-truth trajectories (tests/outlets/eval_synth.py).

The draft block is a noisy linear image of log1p(L - t): a linear readout of it is close to the best
any head can do (the planted noise sets that error), and the head must come near it. The fused block
carries only the prompt latent, so a head on it cannot beat the per-prompt information (the carried
oracle); a head whose labels were shuffled learns nothing and cannot beat the carried constant.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lenpred.errors import CardMismatchError, ConfigError, DataError, NotFittedError
from lenpred.outlets.baselines import CarriedConstant, carried_oracle
from lenpred.outlets.head import OutletsHead
from lenpred.outlets.spec import VARIANTS, row_weights, two_piece_moments
from lenpred.outlets.store import Trajectory
from lenpred.predictors.io import load_head
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
    # per row: each prompt split over its samples, every row of a sample the same (a long answer counts
    # as often as it has rows)
    raw = np.array([1 / 2, 1 / 2, 1 / 2, 1 / 2, 1, 1])
    np.testing.assert_allclose(row_weights(idx, "row"), raw / raw.mean())
    with pytest.raises(ValueError, match="per must be 'sample' or 'row'"):
        row_weights(idx, "prompt")


def test_row_weighted_head_learns_and_round_trips(data, heads, tmp_path):
    tr, va, te = data["train"]["traj"], data["val"]["traj"], data["test"]["traj"]
    with pytest.raises(ConfigError, match="hyperparameter weights"):
        OutletsHead(weights="prompt").fit(tr)
    h = make_predictor("outlets", {**VARIANTS["outlets"], **FAST, "weights": "row"}).fit(tr, X_val=va, cap=CAP)
    y = te.index["remaining"].to_numpy(float)
    w = row_weights(te.index, "row")
    const = CarriedConstant.from_samples(data["train"]["lengths"]).predict(te.index["t"].to_numpy())
    mae = float(np.average(np.abs(h.predict(te) - y), weights=w))
    assert mae < 0.2 * float(np.average(np.abs(const.q50 - y), weights=w))  # the sample-weighted head: <= 0.1
    h.save(tmp_path / "row", card=CARD, meta={"variant": "outlets"})
    back = load_head(tmp_path / "row", card=CARD)
    assert back.weights == "row" and back.get_params() == h.get_params()
    np.testing.assert_array_equal(back.predict(te), h.predict(te))


def test_two_piece_moments_match_sampling():
    rng = np.random.default_rng(0)
    z = np.abs(rng.standard_normal(400_000))
    s1, s2, m = 10.0, 30.0, 100.0
    x = np.where(rng.random(z.size) < 0.5, m - s1 * z, m + s2 * z)
    from lenpred.stats.quantiles import Z90

    mean, sd = two_piece_moments(np.array([m - Z90 * s1]), np.array([m]), np.array([m + Z90 * s2]))
    assert abs(mean[0] - x.mean()) < 0.2 and abs(sd[0] - x.std()) < 0.2
    assert abs(np.quantile(x, 0.1) - (m - Z90 * s1)) < 0.3 and abs(np.quantile(x, 0.9) - (m + Z90 * s2)) < 0.5


# ------------------------------------------------------------------------------ row by row, online, refinement
def _sample_rows(traj: Trajectory, k: int) -> Trajectory:
    """The rows of the k-th sample of ``traj`` (in order of t)."""
    key = traj.index["prompt_id"].astype(str) + "/" + traj.index["sample_idx"].astype(str)
    return traj.take((key == key.unique()[k]).to_numpy())


def _dist_equal(a, b, rows=slice(None)) -> None:
    for f in ("mean", "spread", "q10", "q50", "q90"):
        np.testing.assert_array_equal(getattr(a, f)[rows], getattr(b, f), err_msg=f)


@pytest.mark.parametrize("name", ["outlets", "outlets-softlabel", "probe"])
def test_a_rows_prediction_does_not_depend_on_the_rows_beside_it(name, data, heads):
    """predict runs row by row: the whole test set, a shuffled subset and one sample give the same bits."""
    h, te = heads[name], data["test"]["traj"]
    full = h.predict_dist(te)
    key = te.index["prompt_id"].astype(str) + "/" + te.index["sample_idx"].astype(str)
    keep = key.isin(set(key.unique()[::3])).to_numpy()  # whole samples (the refinement is per sample)
    rows = np.flatnonzero(keep)
    shuffled = np.random.default_rng(0).permutation(rows)
    _dist_equal(full, h.predict_dist(te.take(shuffled)), shuffled)
    one = _sample_rows(te, 5)
    first = int(np.flatnonzero((key == key.unique()[5]).to_numpy())[0])
    _dist_equal(full, h.predict_dist(one), slice(first, first + one.n))


@pytest.mark.parametrize("name", ["outlets", "outlets-softlabel", "probe"])
def test_online_predictor_equals_offline_predict_bit_for_bit(name, data, heads):
    """OnlineOutlets, fed one position at a time from arrays (as a generation feeds it), gives exactly the
    offline predict_dist of those rows -- with the refinement's posterior carried between calls (probe)."""
    h, te = heads[name], data["test"]["traj"]
    for k in (0, 7, 20):
        s = _sample_rows(te, k)
        off = h.predict_dist(s)
        ts = s.index["t"].to_numpy()
        rows = {int(t): {b: v[i] for b, v in s.blocks.items()} for i, t in enumerate(ts)}
        on = h.online()
        got = [on.predict(int(t), rows.__getitem__) for t in ts]
        for f in ("mean", "spread", "q10", "q50", "q90"):
            np.testing.assert_array_equal(np.concatenate([getattr(g, f) for g in got]), getattr(off, f), err_msg=f)
    assert (h.online().refiner is not None) == (name == "probe")


def test_online_refinement_positions_must_increase(data, heads):
    te = _sample_rows(data["test"]["traj"], 0)
    rows = {int(t): {b: v[i] for b, v in te.blocks.items()} for i, t in enumerate(te.index["t"])}
    on = heads["probe"].online()
    on.predict(48, rows.__getitem__)
    with pytest.raises(DataError, match="must increase"):
        on.predict(32, rows.__getitem__)
    on2 = heads["outlets"].online()
    with pytest.raises(DataError, match="no block 'draft'"):
        on2.predict(0, lambda t: {"fused": te.blocks["fused"][0]})


def test_refinement_folds_checkpoints_only(data, heads):
    """By hand on one sample: the posterior is carried through t = 0, the fixed token counts and the
    stride grid (48 in the synthetic spec); a fraction row is one step from the latest checkpoint, and
    its evidence is not carried on (dropping it changes no other row)."""
    from lenpred.outlets.baselines import transition_matrix
    from lenpred.outlets.rownet import refine_checkpoints

    h = heads["probe"]
    assert refine_checkpoints(h.feature_spec_) == (48, (32, 64, 128, 256, 512))
    ts = np.array([0, 10, 32, 40, 48, 60, 96])  # checkpoints: 0, 32, 48, 96; fractions: 10, 40, 60
    idx = pd.DataFrame({"prompt_id": "p", "sample_idx": 0, "t": ts})
    lik = np.random.default_rng(3).dirichlet(np.ones(h.n_bins), size=ts.size)
    got = h._refine(lik, idx)

    def step(post, d, li):
        v = li * (post @ transition_matrix(h.edges_, float(d)))
        return v / v.sum()

    p0 = lik[0] / lik[0].sum()
    p32 = step(p0, 32, lik[2])
    p48 = step(p32, 16, lik[4])
    want = [p0, step(p0, 10, lik[1]), p32, step(p32, 8, lik[3]), p48, step(p48, 12, lik[5]), step(p48, 48, lik[6])]
    np.testing.assert_allclose(got, np.array(want), rtol=1e-12, atol=0)
    cp = np.isin(ts, [0, 32, 48, 96])
    np.testing.assert_array_equal(h._refine(lik[cp], idx[cp]), got[cp])  # fractions carry nothing
    # rows in any order, two samples interleaved: the same per sample
    both = pd.concat([idx, idx.assign(sample_idx=1)], ignore_index=True)
    order = np.random.default_rng(1).permutation(2 * ts.size)
    out = h._refine(np.vstack([lik, lik[::-1]])[order], both.iloc[order].reset_index(drop=True))
    np.testing.assert_array_equal(out[np.argsort(order)][: ts.size], got)


def test_history_pool_known_answers():
    """Each row: the mean of its sample's earlier rows, its change since the previous one, log1p(count);
    rows in any order, samples kept apart, zeros at a sample's first row."""
    from lenpred.outlets.head import history_pool

    idx = pd.DataFrame({"prompt_id": ["a", "b", "a", "a", "b"], "sample_idx": [0, 0, 0, 0, 0], "t": [32, 16, 0, 16, 0]})
    x = np.array([[7.0, 1.0], [5.0, 5.0], [1.0, 3.0], [3.0, 2.0], [2.0, 2.0]], dtype=np.float32)
    h = history_pool(x, idx)
    assert h.shape == (5, 5) and h.dtype == np.float32
    np.testing.assert_allclose(h[2], [0, 0, 0, 0, 0])  # a, t=0: no history
    np.testing.assert_allclose(h[3], [1, 3, 2, -1, np.log1p(1)])  # a, t=16: mean of t=0; x - x(t=0)
    np.testing.assert_allclose(h[0], [2, 2.5, 4, -1, np.log1p(2)])  # a, t=32: mean of t=0,16; x - x(t=16)
    np.testing.assert_allclose(h[4], [0, 0, 0, 0, 0])  # b, t=0
    np.testing.assert_allclose(h[1], [2, 2, 3, 3, np.log1p(1)], rtol=1e-6)  # b, t=16
    assert history_pool(np.zeros((0, 3), np.float32), idx.iloc[:0]).shape == (0, 7)


def test_history_head_learns_round_trips_and_refuses_other_rows(data, tmp_path):
    """outlets-history reads each sample's earlier rows: it learns the planted signal, round trips, refuses a
    trajectory whose rows are placed by another scheme (naming --rows) and has no online twin."""
    tr, va, te = data["train"]["traj"], data["val"]["traj"], data["test"]["traj"]
    with pytest.raises(ConfigError, match="hyperparameter history"):
        OutletsHead(history="gru").fit(tr)
    blocks = {"blocks": ("draft",)} if "draft_running" not in tr.blocks else {}
    h = make_predictor("outlets", {**VARIANTS["outlets-history"], **blocks, **FAST}).fit(tr, X_val=va, cap=CAP)
    const, _ = _baselines(data)
    assert _mae(h.predict(te), te) < 0.3 * const
    assert h.d_in_ == 3 * sum(te.block(b).shape[1] for b in h.blocks_["x"]) + 1 + 2  # x, pool (2d + 1), progress
    h.save(tmp_path / "hist", card=CARD, meta={"variant": "outlets-history"})
    back = load_head(tmp_path / "hist", card=CARD)
    assert back.history == "pool" and back.history_rows_ == h.history_rows_
    np.testing.assert_array_equal(back.predict(te), h.predict(te))
    other = "live" if h.history_rows_ != "live" else "fraction"
    with pytest.raises(DataError, match=rf"trained on {h.history_rows_} rows; the trajectory has {other} rows.*--rows"):
        h.predict(_with_spec(te, positions__rows=other))
    with pytest.raises(DataError, match="no online twin"):
        h.online()
