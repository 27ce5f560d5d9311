"""Workloads: arrival processes, prediction noise at a chosen error, traces, run directories."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lenpred.errors import ConfigError, DataError
from lenpred.sim.arrivals import unit_arrivals
from lenpred.sim.config import ArrivalConfig, LengthConfig, PredictionConfig, WorkloadConfig
from lenpred.sim.predictions import lognormal_sigma, make_repredictions, predict_lengths
from lenpred.sim.workload import build_workload, read_requests, requests_to_frame


def test_poisson_and_gamma_arrivals() -> None:
    rng = np.random.default_rng(0)
    t = unit_arrivals(50_000, ArrivalConfig(process="poisson"), rng)
    gaps = np.diff(t)
    assert t[0] == 0 and (gaps >= 0).all()
    assert gaps.mean() == pytest.approx(1.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)
    g = np.diff(unit_arrivals(50_000, ArrivalConfig(process="gamma", cv=3.0), rng))
    assert g.mean() == pytest.approx(1.0, rel=0.05)
    assert g.std() / g.mean() == pytest.approx(3.0, rel=0.1)
    assert (unit_arrivals(5, ArrivalConfig(process="burst"), rng) == 0).all()


def test_zero_rate_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="rate must be > 0"):
        ArrivalConfig(rate=0)
    wl = build_workload(WorkloadConfig(n_requests=10))
    with pytest.raises(ConfigError, match="rate must be > 0"):
        wl.requests(0.0, PredictionConfig())


def test_workload_scales_with_load_and_is_seeded() -> None:
    wl = build_workload(WorkloadConfig(n_requests=500), seed=1)
    a = wl.arrival_times(10.0)
    b = wl.arrival_times(20.0)
    np.testing.assert_allclose(a, 2 * b)
    wl2 = build_workload(WorkloadConfig(n_requests=500), seed=1)
    np.testing.assert_array_equal(wl.output, wl2.output)
    assert not np.array_equal(wl.output, build_workload(WorkloadConfig(n_requests=500), seed=2).output)
    reqs = wl.requests(10.0, PredictionConfig(), seed=1)
    assert [r.pred for r in reqs] == [r.pred for r in wl.requests(20.0, PredictionConfig(), seed=1)]


@pytest.mark.parametrize("rel", [0.1, 0.3, 0.6])
def test_lognormal_noise_hits_the_relative_mae(rel: float) -> None:
    rng = np.random.default_rng(0)
    true = rng.integers(10, 2000, 200_000)
    pred, spread = predict_lengths(true, PredictionConfig(model="lognormal", rel_mae=rel), rng)
    assert np.abs(pred - true).mean() / true.mean() == pytest.approx(rel, rel=0.02)
    assert np.median(np.log(pred / true)) == pytest.approx(0.0, abs=0.01)  # median-unbiased
    assert spread is not None and (spread > 0).all()
    assert lognormal_sigma(0.0) == 0.0


def test_additive_noise_hits_the_mae() -> None:
    rng = np.random.default_rng(0)
    true = rng.integers(500, 1000, 200_000)  # far from the floor at 1
    pred, _ = predict_lengths(true, PredictionConfig(model="additive", mae=40.0, rel_mae=None), rng)
    assert np.abs(pred - true).mean() == pytest.approx(40.0, rel=0.02)
    pred2, _ = predict_lengths(true, PredictionConfig(model="additive", rel_mae=0.1), rng)
    assert np.abs(pred2 - true).mean() == pytest.approx(0.1 * true.mean(), rel=0.02)


def test_other_prediction_models() -> None:
    true = np.array([10, 20, 30])
    rng = np.random.default_rng(0)
    assert predict_lengths(true, PredictionConfig(model="oracle"), rng)[0].tolist() == [10, 20, 30]
    assert predict_lengths(true, PredictionConfig(model="constant"), rng)[0].tolist() == [20, 20, 20]
    with pytest.raises(DataError, match="predicted_tokens"):
        predict_lengths(true, PredictionConfig(model="input"), rng)
    with pytest.raises(ConfigError, match="rundir"):
        predict_lengths(true, PredictionConfig(model="prompt-median"), rng)
    with pytest.raises(ConfigError, match="rel_mae or mae"):
        PredictionConfig(model="additive", rel_mae=None)
    with pytest.raises(ConfigError, match="unknown value"):
        PredictionConfig(model="crystal-ball")


def test_repredictions() -> None:
    out = np.array([5, 100])
    rp = make_repredictions(out, PredictionConfig(model="oracle", repredict_every=32), np.random.default_rng(0))
    assert rp[0] == ()
    assert rp[1] == ((32, 68.0), (64, 36.0), (96, 4.0))
    noisy = make_repredictions(out, PredictionConfig(repredict_every=10), np.random.default_rng(0))
    assert [g for g, _ in noisy[1]] == list(range(10, 100, 10))


def test_trace_roundtrip(tmp_path: Path) -> None:
    wl = build_workload(WorkloadConfig(n_requests=20))
    reqs = wl.requests(5.0, PredictionConfig(repredict_every=16), seed=0)
    df = requests_to_frame(reqs)
    for suffix in ("csv", "parquet", "jsonl"):
        path = tmp_path / f"reqs.{suffix}"
        if suffix == "csv":
            df.to_csv(path, index=False)
        elif suffix == "parquet":
            df.to_parquet(path)
        else:
            df.to_json(path, orient="records", lines=True)
        back = read_requests(path)
        assert [r.arrival for r in back] == pytest.approx([r.arrival for r in reqs])
        assert [(r.prompt, r.output) for r in back] == [(r.prompt, r.output) for r in reqs]
        assert [r.pred for r in back] == pytest.approx([r.pred for r in reqs])
        for a, b in zip(back, reqs, strict=True):
            assert [g for g, _ in a.repred] == [g for g, _ in b.repred]
            assert [x for _, x in a.repred] == pytest.approx([x for _, x in b.repred])


def test_trace_errors(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    pd.DataFrame({"prompt_tokens": [1]}).to_csv(p, index=False)
    with pytest.raises(DataError, match="output_tokens"):
        read_requests(p)
    pd.DataFrame({"prompt_tokens": [1], "output_tokens": [3]}).to_csv(p, index=False)
    with pytest.raises(DataError, match="arrival_s"):
        read_requests(p)
    with pytest.raises(DataError, match="not found"):
        read_requests(tmp_path / "missing.csv")
    (tmp_path / "t.txt").write_text("x")
    with pytest.raises(DataError, match="unknown request file type"):
        read_requests(tmp_path / "t.txt")
    pd.DataFrame({"prompt_tokens": [1, 0], "output_tokens": [3, 3], "arrival_s": [0, 1]}).to_csv(p, index=False)
    wc = WorkloadConfig(n_requests=2, lengths=LengthConfig(source="trace", path=str(p)))
    with pytest.raises(DataError, match="zero or negative"):
        build_workload(wc)


def test_trace_arrivals_are_rescaled(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    pd.DataFrame({"arrival_s": [10.0, 11.0, 12.0, 14.0], "prompt_tokens": [5] * 4,
                  "output_tokens": [5, 6, 7, 8], "predicted_tokens": [1, 2, 3, 4]}).to_csv(p, index=False)
    wc = WorkloadConfig(n_requests=4, arrival=ArrivalConfig(process="trace"),
                        lengths=LengthConfig(source="trace", path=str(p)))
    wl = build_workload(wc)
    assert wl.trace_rate == pytest.approx(3 / 4)
    np.testing.assert_allclose(wl.arrival_times(1.5), [0, 0.5, 1.0, 2.0])
    reqs = wl.requests(1.5, PredictionConfig(model="input"))
    assert [r.pred for r in reqs] == [1, 2, 3, 4]


def test_rundir_workload_and_prompt_median(tmp_path: Path) -> None:
    from lenpred.data.rundir import RunDir

    run = RunDir.create(tmp_path / "run", {"model": {"id": "toy"}, "prompts": {}, "sampling": {}, "engine": {}})
    run.write_prompts(pd.DataFrame({"prompt_id": ["a", "b"], "idx": [0, 1], "text": ["x", "y"],
                                    "n_prompt_tokens": [11, 22]}))
    rows = [{"prompt_id": "a", "sample_idx": i, "n_tokens": n, "stop_reason": "eos"}
            for i, n in enumerate([10, 20, 30])]
    rows += [{"prompt_id": "b", "sample_idx": i, "n_tokens": n, "stop_reason": s}
             for i, (n, s) in enumerate([(100, "eos"), (200, "eos"), (512, "length")])]
    run.append_samples(rows)
    lc = LengthConfig(source="rundir", path=str(tmp_path / "run"), min_tokens=1)
    wl = build_workload(WorkloadConfig(n_requests=200, lengths=lc), seed=0)
    assert set(wl.prompt.tolist()) == {11, 22}
    assert set(wl.output.tolist()) <= {10, 20, 30, 100, 200, 512}
    reqs = wl.requests(1.0, PredictionConfig(model="prompt-median"))
    for r in reqs:  # leave-one-out median of the same prompt's other samples
        expect = {10: 25, 20: 20, 30: 15, 100: 356, 200: 306, 512: 150}[r.output]
        assert r.pred == expect
    lc2 = LengthConfig(source="rundir", path=str(tmp_path / "run"), min_tokens=1, include_truncated=False)
    assert 512 not in build_workload(WorkloadConfig(n_requests=100, lengths=lc2)).output


def test_synthetic_lengths_respect_limits() -> None:
    lc = LengthConfig(max_prompt_tokens=300, max_total_tokens=500, min_tokens=4)
    wl = build_workload(WorkloadConfig(n_requests=5000, lengths=lc))
    assert wl.prompt.min() >= 4 and wl.prompt.max() <= 300
    assert (wl.prompt + wl.output).max() <= 500 and wl.output.min() >= 4


def test_length_config_errors() -> None:
    with pytest.raises(ConfigError, match="path is required"):
        LengthConfig(source="trace")
    with pytest.raises(ConfigError, match="unknown value"):
        LengthConfig(source="wikipedia")
    assert json.dumps(LengthConfig().to_dict())
