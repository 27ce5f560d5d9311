"""benchmarks/bench_sim_real.py and the run-directory workload restricted to split roles, on a tiny
synthetic run (planted truth) with a real ridge head's predictions."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from lenpred.bench import evaluate
from lenpred.data.split import load_split
from lenpred.errors import ConfigError, DataError
from lenpred.predictors.pipeline import predict_run, train_on_run
from lenpred.sim.config import LengthConfig, SimConfig, WorkloadConfig
from lenpred.sim.workload import build_workload
from predictors.synth import CARD, write_run

ROOT = Path(__file__).resolve().parents[2]


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


sr = _module("bench_sim_real")

SMALL = {  # the committed experiment's arms on a cluster small enough for a test
    "name": "real_small", "seed": 0,
    "cluster": {"mode": "disaggregated", "n_prefill": 1, "n_decode": 2, "profile": "llama8b-h100", "max_batch": 16},
    "workload": {"n_requests": 600, "arrival": {"process": "poisson", "rate": 1.0},
                 "lengths": {"source": "rundir", "path": "x", "roles": ["test"], "min_tokens": 1}},
    "prediction": {"model": "oracle"},
    "policies": [{"name": "fcfs+rr", "queue": "fcfs", "dispatch": "round-robin"},
                 {"name": "sjf+lpt prompt-median", "queue": "sjf", "dispatch": "least-predicted-tokens",
                  "prediction": {"model": "prompt-median"}},
                 {"name": "sjf+lpt true lengths", "queue": "sjf", "dispatch": "least-predicted-tokens",
                  "prediction": {"model": "oracle"}}],
    "sweep": {"loads": [1.0, 1.3], "load_unit": "capacity", "baseline": "fcfs+rr", "probe_requests": 200},
    "plots": False,
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("simreal")
    r = write_run(root, "sr", n_small=120, n_big=30)
    head = root / "ridge"
    train_on_run("ridge", None, r["run"], r["features"], out=head)
    preds, _ = predict_run(head, r["run"], r["features"], ["test"])
    r["preds"] = preds.write(root / "ridge.parquet")
    r["head"] = head
    cfg = root / "small.json"
    cfg.write_text(json.dumps(SMALL))
    r["config"] = cfg
    r["root"] = root
    return r


def test_rundir_workload_keeps_only_the_roles_asked_for(run):
    sp = load_split(run["run"], require_complete=False)
    lc = LengthConfig(source="rundir", path=str(run["run"]), roles=("test",), min_tokens=1)
    wl = build_workload(WorkloadConfig(n_requests=500, lengths=lc), seed=0)
    assert set(wl.keys["prompt_id"]) <= sp.test and set(wl.population["prompt_id"]) == set(sp.test)
    both = build_workload(WorkloadConfig(n_requests=500, lengths=lc.replace(roles=("train", "val"))), seed=0)
    assert not set(both.population["prompt_id"]) & sp.test
    every = build_workload(WorkloadConfig(n_requests=500, lengths=lc.replace(roles=None)), seed=0)
    assert set(every.population["prompt_id"]) == set(sp.roles)  # unset: as before, every prompt


def test_roles_config_errors(run, tmp_path):
    with pytest.raises(ConfigError, match="roles are train, val, test"):
        LengthConfig(source="rundir", path="x", roles=("holdout",))
    with pytest.raises(ConfigError, match="source 'rundir' only"):
        LengthConfig(source="sharegpt", roles=("test",))
    assert LengthConfig.from_dict(LengthConfig(source="rundir", path="x", roles=("test",)).to_dict()).roles == ("test",)
    with pytest.raises(DataError, match="split"):
        lc = LengthConfig(source="rundir", path=str(run["run"]), roles=("test",), split=str(tmp_path / "none.json"))
        build_workload(WorkloadConfig(n_requests=10, lengths=lc))


def test_committed_experiment_builds_the_arms(run):
    cfg = sr.build_config(sr.DEFAULT_CONFIG, str(run["run"]), [("ridge", str(run["preds"]))])
    assert [p.name for p in cfg.policies] == ["fcfs+rr", "sjf+lpt ridge", "sjf+lpt prompt-median",
                                              "sjf+lpt true lengths"]
    assert cfg.policies[1].prediction.model == "table" and cfg.policies[1].prediction.path == str(run["preds"])
    assert cfg.workload.lengths.path == str(run["run"]) and cfg.workload.lengths.roles == ("test",)
    ref = SimConfig.load(ROOT / "experiments" / "sim" / "reproduction.json")
    assert cfg.cluster == ref.cluster and cfg.sweep == ref.sweep  # the reproduction's cluster and loads


def test_end_to_end_table_and_prediction_errors(run, tmp_path, capsys):
    out = tmp_path / "out"
    assert sr.main(["--run", str(run["run"]), "--config", str(run["config"]), "--predictions", f"ridge={run['preds']}",
                    "--heads", f"ridge2={run['head']}", "--features", str(run["features"]), "--out", str(out)]) == 0
    s = json.loads((out / "real_predictions.json").read_text())
    arms = {a["arm"]: a for a in s["arms"]}
    noise = [a for a in arms if "lognormal" in a]
    assert list(arms) == ["fcfs+rr", "sjf+lpt ridge", *noise, "sjf+lpt ridge2", "sjf+lpt prompt-median",
                          "sjf+lpt true lengths"] and len(noise) == 1
    # the matched noise model has the first table's relative error (in expectation: a few hundred samples here)
    rel = arms["sjf+lpt ridge"]["rel_mae_samples"]
    assert arms[noise[0]]["prediction"]["rel_mae"] == pytest.approx(rel, abs=1e-3)
    assert arms[noise[0]]["rel_mae_samples"] == pytest.approx(rel, rel=0.15)
    del arms[noise[0]]
    # known answers: the bench's own figures on the same test prompts
    sp = load_split(run["run"], require_complete=False)
    from lenpred.predictions import read_predictions

    bench = evaluate(run["run"], [read_predictions(run["preds"])], names=["ridge"], n_boot=10)
    assert arms["sjf+lpt ridge"]["mae"] == pytest.approx(bench.row("ridge").metrics.mae)
    assert arms["sjf+lpt ridge2"]["mae"] == pytest.approx(bench.row("ridge").metrics.mae)  # same head, predicted here
    assert arms["sjf+lpt prompt-median"]["mae"] == pytest.approx(bench.row("prompt-median (oracle)").metrics.mae)
    assert arms["sjf+lpt true lengths"]["mae"] == 0.0 and arms["fcfs+rr"]["mae"] is None
    assert s["bound"]["oracle_mae"] == pytest.approx(bench.bound.oracle_mae)
    assert s["workload"]["prompts"] == len(sp.test)
    rows = s["table_short_p99_e2e"]
    assert [r["load"] for r in rows] == [1.0, 1.3]
    for r in rows:
        assert all(np.isfinite(r[a]) for a in arms) and "fcfs+rr change" not in r
        assert r["sjf+lpt ridge change"] == pytest.approx(r["sjf+lpt ridge2 change"])
    # at the highest load ordering by true length helps short requests over FCFS
    assert rows[-1]["sjf+lpt true lengths"] < rows[-1]["fcfs+rr"]
    text = capsys.readouterr().out
    assert "P99 end-to-end latency" in text and "sjf+lpt ridge" in text
    assert (out / "results.json").is_file() and (out / "table.md").is_file()
    assert sr.main(["--run", str(run["run"]), "--config", str(run["config"]), "--predictions", f"ridge={run['preds']}",
                    "--no-matched-noise", "--loads", "1.0", "--out", str(tmp_path / "out2")]) == 0
    s2 = json.loads((tmp_path / "out2" / "real_predictions.json").read_text())
    assert [a["arm"] for a in s2["arms"]] == ["fcfs+rr", "sjf+lpt ridge", "sjf+lpt prompt-median", "sjf+lpt true lengths"]


def test_bad_predictions_are_refused_with_one_line(run, tmp_path, capsys):
    other = copy.deepcopy(CARD)
    other["sampling"]["temperature"] = 0.5
    o = write_run(tmp_path, "other", n_small=20, n_big=10, card=other)
    train_on_run("ridge", None, o["run"], o["features"], out=tmp_path / "oh")
    foreign, _ = predict_run(tmp_path / "oh", o["run"], o["features"], ["test"])
    foreign.write(tmp_path / "foreign.parquet")
    assert sr.main(["--run", str(run["run"]), "--config", str(run["config"]),
                    "--predictions", f"x={tmp_path / 'foreign.parquet'}", "--out", str(tmp_path / "o1")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "card" in err
    # a table without every test prompt (val prompts only)
    part, _ = predict_run(run["head"], run["run"], run["features"], ["val"])
    part.write(tmp_path / "val.parquet")
    assert sr.main(["--run", str(run["run"]), "--config", str(run["config"]),
                    "--predictions", f"v={tmp_path / 'val.parquet'}", "--out", str(tmp_path / "o2")]) == 1
    assert "error: " in capsys.readouterr().err
    assert sr.main(["--run", str(run["run"]), "--config", str(run["config"]), "--out", str(tmp_path / "o3")]) == 1
    assert "no predictions" in capsys.readouterr().err
    assert sr.main(["--run", str(run["run"]), "--predictions", "noequals", "--out", str(tmp_path / "o4")]) == 1
    assert "NAME=PATH" in capsys.readouterr().err
    for d in ("o1", "o2", "o3", "o4"):
        assert not (tmp_path / d / "results.json").exists()
