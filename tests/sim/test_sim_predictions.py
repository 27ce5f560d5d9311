"""Predictions as data: synthetic predictors write tables, the simulator joins tables to workloads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lenpred.errors import CardMismatchError, ConfigError, DataError, UnknownKeyError
from lenpred.predictions import Predictions, read_predictions
from lenpred.sim.config import LengthConfig, PredictionConfig, SimConfig, WorkloadConfig
from lenpred.sim.noise import SYNTHETIC, lognormal_sigma, make_synthetic
from lenpred.sim.request import Request
from lenpred.sim.sweep import run_sweep
from lenpred.sim.workload import build_workload


def samples(true: np.ndarray, groups: np.ndarray | None = None) -> pd.DataFrame:
    """One row per sample; every sample its own prompt unless ``groups`` says otherwise."""
    g = pd.Series(np.arange(true.size) if groups is None else groups).astype(str)
    return pd.DataFrame({"prompt_id": g, "sample_idx": g.groupby(g).cumcount(), "n_tokens": true})


@pytest.mark.parametrize("rel", [0.1, 0.3, 0.6])
def test_lognormal_noise_hits_the_relative_mae(rel: float) -> None:
    true = np.random.default_rng(0).integers(10, 2000, 20_000)
    t = make_synthetic("lognormal", rel_mae=rel).predict_table(samples(true), seed=0)
    pred = t.frame["pred_tokens"].to_numpy()
    assert np.abs(pred - true).mean() / true.mean() == pytest.approx(rel, rel=0.02)
    assert np.median(np.log(pred / true)) == pytest.approx(0.0, abs=0.01)  # median-unbiased
    sigma = lognormal_sigma(rel)
    np.testing.assert_allclose(t.frame["spread"], pred * np.sqrt(np.expm1(sigma**2)))
    assert lognormal_sigma(0.0) == 0.0
    assert t.made_by == "synthetic:lognormal" and t.meta["config"]["rel_mae"] == rel


def test_additive_noise_hits_the_mae() -> None:
    true = np.random.default_rng(0).integers(500, 1000, 20_000)  # far from the floor at 1
    pred = make_synthetic("additive", mae=40.0).predict_table(samples(true)).frame["pred_tokens"]
    assert np.abs(pred - true).mean() == pytest.approx(40.0, rel=0.02)
    pred2 = make_synthetic("additive", rel_mae=0.1).predict_table(samples(true)).frame["pred_tokens"]
    assert np.abs(pred2 - true).mean() == pytest.approx(0.1 * true.mean(), rel=0.02)
    with pytest.raises(ConfigError, match="rel_mae or mae"):
        make_synthetic("additive").predict_table(samples(true))


def test_oracle_constant_and_prompt_median() -> None:
    true = np.array([10, 20, 30])
    assert make_synthetic("oracle").predict_table(samples(true)).frame["pred_tokens"].tolist() == [10, 20, 30]
    c = make_synthetic("constant").predict_table(samples(true)).frame
    assert c["pred_tokens"].tolist() == [20, 20, 20]
    assert c["spread"].tolist() == pytest.approx([np.std([10, 20, 30])] * 3)
    # two prompts: a = (10, 20, 40), b = (7) alone -> the global median (15) for b
    pm = make_synthetic("prompt-median").predict_table(samples(np.array([10, 20, 40, 7]), np.array(["a"] * 3 + ["b"])))
    assert pm.frame["pred_tokens"].tolist() == [30, 25, 15, 15]
    with pytest.raises(ConfigError, match="several samples per prompt"):
        make_synthetic("prompt-median").predict_table(samples(true))
    with pytest.raises(UnknownKeyError, match="additive, constant, lognormal, oracle, prompt-median"):
        make_synthetic("crystal-ball")
    assert set(SYNTHETIC.names()) == {"additive", "constant", "lognormal", "oracle", "prompt-median"}


def test_repredictions() -> None:
    true = np.array([5, 100])
    rp = make_synthetic("oracle", repredict_every=32).predict_table(samples(true)).frame
    assert rp["repred_gen"].tolist() == [[], [32, 64, 96]]
    assert rp["repred_remaining"].tolist() == [[], [68.0, 36.0, 4.0]]
    noisy = make_synthetic("lognormal", rel_mae=0.3, repredict_every=10).predict_table(samples(true)).frame
    assert noisy["repred_gen"].tolist()[1] == list(range(10, 100, 10))
    rem = np.array(noisy["repred_remaining"].tolist()[1])
    assert not np.allclose(rem, 100 - np.arange(10, 100, 10))  # the noise applies to re-predictions too


def test_same_seed_same_table_and_the_table_roundtrips(tmp_path: Path) -> None:
    true = np.random.default_rng(1).integers(5, 500, 50)
    a = make_synthetic("lognormal", repredict_every=16).predict_table(samples(true), seed=4)
    b = make_synthetic("lognormal", repredict_every=16).predict_table(samples(true), seed=4)
    c = make_synthetic("lognormal", repredict_every=16).predict_table(samples(true), seed=5)
    pd.testing.assert_frame_equal(a.frame, b.frame)
    assert not np.array_equal(a.frame["pred_tokens"], c.frame["pred_tokens"])
    back = read_predictions(a.write(tmp_path / "p.parquet"))
    np.testing.assert_array_equal(back.frame["pred_tokens"], a.frame["pred_tokens"])
    assert back.frame["repred_gen"].map(list).tolist() == a.frame["repred_gen"].tolist()


def test_a_request_without_a_prediction_is_an_error() -> None:
    with pytest.raises(DataError, match="request 3 has no predicted length"):
        Request(3, 0.0, 10, 10, None)


# ---------------------------------------------------------------- tables joined to run workloads
def make_run(root: Path, name: str = "run", model: str = "toy") -> Path:
    from lenpred.data.rundir import RunDir

    run = RunDir.create(root / name, {"model": {"id": model}, "prompts": {}, "sampling": {}, "engine": {}})
    run.write_prompts(pd.DataFrame({"prompt_id": ["a", "b"], "idx": [0, 1], "text": ["x", "y"],
                                    "n_prompt_tokens": [11, 22]}))
    rows = [{"prompt_id": "a", "sample_idx": i, "n_tokens": n, "stop_reason": "eos"} for i, n in enumerate([10, 20, 30])]
    rows += [{"prompt_id": "b", "sample_idx": i, "n_tokens": n, "stop_reason": "eos"} for i, n in enumerate([100, 200])]
    run.append_samples(rows)
    return root / name


def table_for(run: Path, pred: dict[tuple[str, int], float]) -> Predictions:
    from lenpred.data.rundir import RunDir

    df = pd.DataFrame([{"prompt_id": p, "sample_idx": s, "pred_tokens": v} for (p, s), v in pred.items()])
    return Predictions.from_frame(df, made_by="test-head", card=RunDir.open(run).card)


# true lengths: a0=10 a1=20 a2=30 b0=100 b1=200; a "head" that predicts 3x the truth
THREE_X = {("a", 0): 30.0, ("a", 1): 60.0, ("a", 2): 90.0, ("b", 0): 300.0, ("b", 1): 600.0}


def test_a_table_is_joined_by_prompt_and_sample(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    path = table_for(run, THREE_X).write(tmp_path / "preds.parquet")
    wc = WorkloadConfig(n_requests=60, lengths=LengthConfig(source="rundir", path=str(run), min_tokens=1))
    wl = build_workload(wc, seed=0)
    reqs = wl.requests(1.0, wl.predictions(PredictionConfig(model="table", path=str(path))))
    assert {r.output for r in reqs} == {10, 20, 30, 100, 200}
    assert all(r.pred == 3 * r.output for r in reqs)  # each request got its own sample's prediction
    # a per-prompt row (sample_idx -1) serves every sample of that prompt
    per_prompt = pd.DataFrame({"prompt_id": ["a", "b"], "sample_idx": [-1, -1], "pred_tokens": [5.0, 7.0]})
    from lenpred.data.rundir import RunDir

    pp = Predictions.from_frame(per_prompt, made_by="prompt-head", card=RunDir.open(run).card)
    reqs = wl.requests(1.0, pp)
    assert all(r.pred == (5.0 if r.prompt == 11 else 7.0) for r in reqs)


def test_a_table_missing_a_sample_or_made_for_another_run_is_refused(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    wc = WorkloadConfig(n_requests=60, lengths=LengthConfig(source="rundir", path=str(run), min_tokens=1))
    wl = build_workload(wc, seed=0)
    partial = {k: v for k, v in THREE_X.items() if k != ("b", 1)}
    with pytest.raises(DataError, match=r"no prediction for \d+ of 60 samples .*prompt 'b', sample 1"):
        wl.requests(1.0, table_for(run, partial))
    other = make_run(tmp_path, "other", model="another-model")
    path = table_for(other, THREE_X).write(tmp_path / "other.parquet")
    with pytest.raises(CardMismatchError, match="made for run card"):
        wl.predictions(PredictionConfig(model="table", path=str(path)))


def test_sweep_with_a_table_arm_matches_the_oracle_arm_when_the_table_is_the_truth(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    truth = {k: float(v) for k, v in zip(THREE_X, [10, 20, 30, 100, 200], strict=True)}
    path = table_for(run, truth).write(tmp_path / "truth.parquet")
    cfg = SimConfig.from_dict({
        # everything at once onto 4 batch slots: a queue forms, so the queue order matters
        "workload": {"n_requests": 200, "arrival": {"process": "burst"},
                     "lengths": {"source": "rundir", "path": str(run), "min_tokens": 1}},
        "cluster": {"max_batch": 4},
        "policies": [{"name": "oracle", "queue": "sjf", "prediction": {"model": "oracle"}},
                     {"name": "table", "queue": "sjf", "prediction": {"model": "table", "path": str(path)}},
                     {"name": "fcfs"}],
    })
    res = run_sweep(cfg)
    np.testing.assert_array_equal(res.get("oracle", None).e2e, res.get("table", None).e2e)
    assert not np.array_equal(res.get("oracle", None).e2e, res.get("fcfs", None).e2e)


def test_prediction_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown prediction model 'crystal-ball'.*use one of: additive"):
        PredictionConfig(model="crystal-ball")
    with pytest.raises(ConfigError, match="needs a path"):
        PredictionConfig(model="table")
    with pytest.raises(ConfigError, match="only read by model 'table'"):
        PredictionConfig(model="oracle", path="x.parquet")
    with pytest.raises(ConfigError, match="rel_mae or mae"):
        PredictionConfig(model="additive", rel_mae=None)
    with pytest.raises(ConfigError, match="not mae"):
        PredictionConfig(model="lognormal", mae=3.0)


def test_cli_predictions_flag_feeds_every_arm_without_its_own(tmp_path: Path) -> None:
    import json

    from lenpred.cli import main

    run = make_run(tmp_path)
    path = table_for(run, THREE_X).write(tmp_path / "preds.parquet")
    cfg = {"name": "t", "workload": {"n_requests": 40, "lengths": {"source": "rundir", "path": str(run), "min_tokens": 1}},
           "policies": [{"name": "sjf", "queue": "sjf"}, {"name": "oracle", "queue": "sjf", "prediction": {"model": "oracle"}}]}
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    out = tmp_path / "out"
    assert main(["simulate", "--config", str(tmp_path / "cfg.json"), "--predictions", str(path), "--out", str(out),
                 "--quiet", "--no-plots"]) == 0
    written = json.loads((out / "config.json").read_text())
    assert written["prediction"] == {"model": "table", "rel_mae": 0.3, "mae": None, "repredict_every": None,
                                     "path": str(path)}
    assert written["policies"][1]["prediction"]["model"] == "oracle"
    assert not (out / "latency_cdf.png").exists()
