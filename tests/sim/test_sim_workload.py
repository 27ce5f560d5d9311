"""Workloads: arrival processes, traces, run directories, and how predictions are joined to them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lenpred.errors import ConfigError, DataError
from lenpred.sim.arrivals import unit_arrivals
from lenpred.sim.config import ArrivalConfig, LengthConfig, PredictionConfig, WorkloadConfig
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
        wl.requests(0.0, wl.predictions(PredictionConfig()))


def test_workload_scales_with_load_and_is_seeded() -> None:
    wl = build_workload(WorkloadConfig(n_requests=500), seed=1)
    a = wl.arrival_times(10.0)
    b = wl.arrival_times(20.0)
    np.testing.assert_allclose(a, 2 * b)
    wl2 = build_workload(WorkloadConfig(n_requests=500), seed=1)
    np.testing.assert_array_equal(wl.output, wl2.output)
    assert not np.array_equal(wl.output, build_workload(WorkloadConfig(n_requests=500), seed=2).output)
    reqs = wl.requests(10.0, wl.predictions(PredictionConfig(), seed=1))
    again = wl.requests(20.0, wl.predictions(PredictionConfig(), seed=1))
    assert [r.pred for r in reqs] == [r.pred for r in again]
    assert [r.pred for r in reqs] != [r.pred for r in wl.requests(10.0, wl.predictions(PredictionConfig(), seed=2))]


def test_trace_roundtrip(tmp_path: Path) -> None:
    wl = build_workload(WorkloadConfig(n_requests=20))
    reqs = wl.requests(5.0, wl.predictions(PredictionConfig(repredict_every=16)))
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
    with pytest.raises(DataError, match=r"prompt_tokens is below 1 in 1 row\(s\), first row 2 \(line 3\): 0"):
        build_workload(wc)
    # the same checks hold for a config's trace workload as for --requests (tests/bad_inputs/sim.py)
    pd.DataFrame({"prompt_tokens": [1, 2], "output_tokens": [3, 2.5]}).to_csv(p, index=False)
    with pytest.raises(DataError, match=r"not a whole number of tokens in 1 row\(s\), first row 2 \(line 3\): 2.5"):
        build_workload(wc)
    p2 = tmp_path / "t.jsonl"  # rows of a JSONL file are its lines (no header)
    pd.DataFrame({"prompt_tokens": [1, 2], "output_tokens": [3, 2], "arrival_s": [0.0, -2.0]}).to_json(
        p2, orient="records", lines=True)
    with pytest.raises(DataError, match=r"first row 2: -2 -- fix"):
        read_requests(p2)


def test_trace_arrivals_are_rescaled(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    pd.DataFrame({"arrival_s": [10.0, 11.0, 12.0, 14.0], "prompt_tokens": [5] * 4,
                  "output_tokens": [5, 6, 7, 8], "predicted_tokens": [1, 2, 3, 4]}).to_csv(p, index=False)
    wc = WorkloadConfig(n_requests=4, arrival=ArrivalConfig(process="trace"),
                        lengths=LengthConfig(source="trace", path=str(p)))
    wl = build_workload(wc)
    assert wl.trace_rate == pytest.approx(3 / 4)
    np.testing.assert_allclose(wl.arrival_times(1.5), [0, 0.5, 1.0, 2.0])
    reqs = wl.requests(1.5, wl.predictions(PredictionConfig(model="input")))
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
    reqs = wl.requests(1.0, wl.predictions(PredictionConfig(model="prompt-median")))
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
