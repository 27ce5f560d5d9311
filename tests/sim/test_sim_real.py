"""benchmarks/bench_sim_real.py and the run-directory workload restricted to split roles, on a tiny
synthetic run (planted truth) with a real ridge head's predictions."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks import bench_sim_real as sr
from lenpred.bench import Bootstrap, evaluate
from lenpred.data.split import load_split
from lenpred.errors import ConfigError, DataError
from lenpred.predictors.pipeline import predict_run, train_on_run
from lenpred.predictors.synthetic import CARD, write_run
from lenpred.sim.config import LengthConfig, SimConfig, WorkloadConfig
from lenpred.sim.workload import build_workload

ROOT = Path(__file__).resolve().parents[2]

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
                    "--heads", f"ridge2={run['head']}", "--features", str(run["features"]), "--aging", "50",
                    "--out", str(out)]) == 0
    s = json.loads((out / "real_predictions.json").read_text())
    arms = {a["arm"]: a for a in s["arms"]}
    noise = [a for a in arms if "lognormal" in a and "aging" not in a]
    assert len(noise) == 1
    assert list(arms) == ["fcfs+rr", "fcfs+lpt ridge", "sjf+lpt ridge", "sjf+lpt ridge aging50", "sjf+lpt ridge q10",
                          noise[0], f"{noise[0]} aging50", "fcfs+lpt ridge2", "sjf+lpt ridge2", "sjf+lpt ridge2 aging50",
                          "sjf+lpt ridge2 q10", "sjf+lpt prompt-median", "sjf+lpt true lengths",
                          "sjf+lpt true lengths aging50"]
    pols = {p["name"]: p for p in s["config"]["policies"]}
    assert pols["sjf+lpt ridge aging50"]["queue"]["aging"] == 50.0
    assert pols["sjf+lpt true lengths aging50"]["queue"]["aging"] == 50.0
    assert pols["sjf+lpt ridge q10"]["queue"]["quantile_z"] == pytest.approx(-1.2815516)
    assert pols["fcfs+lpt ridge"]["queue"] == {"name": "fcfs", "preempt": False}
    assert pols["fcfs+lpt ridge"]["dispatch"] == "least-predicted-tokens"
    assert pols["fcfs+lpt ridge"]["prediction"]["path"] == str(run["preds"])
    # the matched noise model has the first table's relative error (in expectation: a few hundred samples here)
    rel = arms["sjf+lpt ridge"]["rel_mae_samples"]
    assert arms[noise[0]]["prediction"]["rel_mae"] == pytest.approx(rel, abs=1e-3)
    assert arms[noise[0]]["rel_mae_samples"] == pytest.approx(rel, rel=0.15)
    # known answers: the bench's own figures on the same test prompts
    sp = load_split(run["run"], require_complete=False)
    from lenpred.predictions import read_predictions

    bench = evaluate(run["run"], [read_predictions(run["preds"])], names=["ridge"], boot=Bootstrap(10))
    for a in ("sjf+lpt ridge", "sjf+lpt ridge2", "fcfs+lpt ridge", "sjf+lpt ridge aging50", "sjf+lpt ridge q10"):
        assert arms[a]["mae"] == pytest.approx(bench.row("ridge").metrics.mae)  # ridge2: same head, predicted here
    assert arms["sjf+lpt prompt-median"]["mae"] == pytest.approx(bench.row("prompt-median (oracle)").metrics.mae)
    assert arms["sjf+lpt true lengths"]["mae"] == 0.0 and arms["fcfs+rr"]["mae"] is None
    # order structure: the oracle ranks perfectly and puts no short request in its top decile; a FCFS queue
    # has no key; the in-sample prompt medians are a ceiling for the prompt-level prediction
    assert arms["sjf+lpt true lengths"]["kendall_tau"] == pytest.approx(1.0)
    assert arms["sjf+lpt true lengths"]["short_in_top_decile"] == 0.0
    assert arms["fcfs+lpt ridge"]["kendall_tau"] is None and arms["fcfs+rr"]["kendall_tau"] is None
    ceiling = s["structure"]["prompt_median_in_sample"]["kendall_tau"]
    assert arms["sjf+lpt prompt-median"]["kendall_tau"] <= ceiling + 1e-9
    assert 0.0 < s["structure"]["within_prompt_variance_share"] < 1.0
    assert s["bound"]["oracle_mae"] == pytest.approx(bench.bound.oracle_mae)
    assert s["workload"]["prompts"] == len(sp.test)
    rows = s["table_short_p99_e2e"]
    assert [r["load"] for r in rows] == [1.0, 1.3]
    for r in rows:
        assert all(np.isfinite(r[a]) for a in arms) and "fcfs+rr change" not in r
        assert r["sjf+lpt ridge change"] == pytest.approx(r["sjf+lpt ridge2 change"])
    # at the highest load ordering by true length helps short requests over FCFS
    assert rows[-1]["sjf+lpt true lengths"] < rows[-1]["fcfs+rr"]
    # the per-arm rows: one per (load, arm), changes against the baseline of the same load
    long = s["rows"]
    assert len(long) == 2 * len(arms) and {r["arm"] for r in long} == set(arms)
    for r in long:
        base = next(b for b in long if b["load"] == r["load"] and b["arm"] == "fcfs+rr")
        assert r["short_change"] == pytest.approx((r["short_p99_s"] - base["short_p99_s"]) / base["short_p99_s"])
        assert r["all_change"] == pytest.approx((r["all_p99_s"] - base["all_p99_s"]) / base["all_p99_s"])
        assert r["aging"] == pols[r["arm"]]["queue"].get("aging", 0.0)
    first = {r["arm"]: r for r in long if r["load"] == 1.0}
    assert first["fcfs+lpt ridge"]["key"] == "arrival" and first["fcfs+lpt ridge"]["predictor"] == "ridge"
    assert first["sjf+lpt ridge q10"]["key"].startswith("q10") and first["fcfs+rr"]["predictor"] == "-"
    assert first["sjf+lpt true lengths"]["predictor"] == "true lengths"
    # the tail anatomy re-runs four arms at the highest load: the same simulations as the sweep
    tails = {t["arm"]: t for t in s["tail_anatomy"]}
    assert list(tails) == ["fcfs+rr", "sjf+lpt ridge", noise[0], "sjf+lpt true lengths"]
    for a, t in tails.items():
        assert t["load"] == 1.3 and t["short_p99_s"] == pytest.approx(rows[-1][a])
        assert 1 <= t["n_tail"] <= t["n_short"] and 0.0 <= t["overtakers_short_share"] <= 1.0
    assert tails["fcfs+rr"]["pred_percentile_median"] is None
    text = capsys.readouterr().out
    assert "P99 end-to-end latency" in text and "sjf+lpt ridge" in text and "tail" in text
    assert (out / "results.json").is_file() and (out / "table.md").is_file()
    assert sr.main(["--run", str(run["run"]), "--config", str(run["config"]), "--predictions", f"ridge={run['preds']}",
                    "--no-matched-noise", "--aging", "none", "--no-extra-arms", "--no-anatomy", "--loads", "1.0",
                    "--out", str(tmp_path / "out2")]) == 0
    s2 = json.loads((tmp_path / "out2" / "real_predictions.json").read_text())
    assert [a["arm"] for a in s2["arms"]] == ["fcfs+rr", "sjf+lpt ridge", "sjf+lpt prompt-median", "sjf+lpt true lengths"]
    assert s2["tail_anatomy"] == []


def test_order_structure_known_answers():
    y = np.arange(1.0, 101.0)
    short = y < 50  # 49 short
    same = sr.order_structure(y, y, short)
    assert same == {"kendall_tau": pytest.approx(1.0), "sd_ratio": pytest.approx(1.0), "short_in_top_decile": 0.0}
    rev = sr.order_structure(-y, y, short)  # the top decile of the key are the 10 shortest: all short
    assert rev["kendall_tau"] == pytest.approx(-1.0) and rev["short_in_top_decile"] == pytest.approx(10 / 49)
    assert sr.order_structure(np.ones(100), y, short)["kendall_tau"] is None
    # one key per prompt (ties): ten prompts of ten samples each, keys ranking the prompts exactly
    grouped = sr.order_structure(np.repeat(np.arange(10.0), 10), y, short)
    assert 0.0 < grouped["kendall_tau"] < 1.0


def test_workload_structure_known_answers():
    from types import SimpleNamespace

    cfg = SimpleNamespace(metrics=SimpleNamespace(short_threshold=None))
    # all variance between prompts: their medians rank the samples perfectly
    pop = pd.DataFrame({"prompt_id": list("aaabbb"), "sample_idx": [0, 1, 2, 0, 1, 2], "n_tokens": [10] * 3 + [90] * 3})
    wl = SimpleNamespace(population=pop, output=pop["n_tokens"].to_numpy())
    st = sr.workload_structure(cfg, wl)
    assert st["within_prompt_variance_share"] == 0.0 and st["prompt_median_in_sample"]["kendall_tau"] == 1.0
    # all variance within prompts: no prompt-level key ranks anything
    pop = pd.DataFrame({"prompt_id": list("aabb"), "sample_idx": [0, 1, 0, 1], "n_tokens": [10, 90, 10, 90]})
    wl = SimpleNamespace(population=pop, output=pop["n_tokens"].to_numpy())
    st = sr.workload_structure(cfg, wl)
    assert st["within_prompt_variance_share"] == pytest.approx(1.0)
    assert st["prompt_median_in_sample"]["kendall_tau"] is None and st["short_threshold_tokens"] == 50.0


def test_tail_anatomy_known_answer():
    from lenpred.sim.engine import SimResult

    # five requests, threshold 100: shorts are 0, 2, 3; request 0 (prompt a) waits for its decode slot until
    # t = 10 while all four later arrivals (two of them short) start decoding before it
    arrival = np.arange(5.0)
    admit = np.array([10.0, 1.2, 2.2, 3.2, 4.2])
    out = np.array([50, 500, 60, 70, 400])
    res = SimResult(rid=np.arange(5), arrival=arrival, prompt=np.full(5, 10), output=out,
                    pred=np.array([300.0, 500, 60, 70, 400]), t_prefill_start=arrival, t_first=arrival + 0.1,
                    t_decode_admit=admit, t_finish=admit + out * 0.01, n_preempt=np.zeros(5, int),
                    rejected=np.zeros(5, bool), mode="disaggregated")
    t = sr.tail_anatomy(res, np.array(list("aabbc")), 100.0)
    assert t["n_short"] == 3 and t["n_tail"] == 1 and t["tail_prompts"] == 1 and t["top5_prompts"] == {"a": 1}
    assert t["short_p99_s"] == pytest.approx(np.percentile([10.5, 0.8, 0.9], 99))
    assert t["pred_percentile_median"] == pytest.approx(2 / 5)  # predicted above the two other shorts only
    assert t["queue_wait_median_s"] == pytest.approx(9.9) and t["wait_share_median"] == pytest.approx(9.9 / 10.5)
    assert t["overtakers_median"] == 4 and t["overtakers_short_share"] == pytest.approx(0.5)
    assert t["true_tokens_median"] == 50 and t["e2e_median_s"] == pytest.approx(10.5)
    assert sr.tail_anatomy(res, np.array(list("aabbc")), 100.0, ranked=False)["pred_percentile_median"] is None
    assert sr.tail_anatomy(res, np.array(list("aabbc")), 1.0) == {"n_short": 0, "n_tail": 0}


def test_extra_arms_only_where_they_mean_something(run, tmp_path):
    from lenpred.predictions import Predictions, read_predictions

    p = read_predictions(run["preds"])
    bare = Predictions.from_frame(p.frame[["prompt_id", "sample_idx", "pred_tokens"]], made_by="test", card=CARD)
    bare_path = bare.write(tmp_path / "bare.parquet")
    cfg = sr.build_config(sr.DEFAULT_CONFIG, str(run["run"]), [("ridge", str(run["preds"])), ("bare", str(bare_path))])
    names = [q.name for q in sr.with_extra_arms(cfg, (100.0, 300.0)).policies]
    assert names == ["fcfs+rr", "fcfs+lpt ridge", "sjf+lpt ridge", "sjf+lpt ridge aging100", "sjf+lpt ridge aging300",
                     "sjf+lpt ridge q10", "fcfs+lpt bare", "sjf+lpt bare", "sjf+lpt bare aging100",
                     "sjf+lpt bare aging300", "sjf+lpt prompt-median", "sjf+lpt true lengths",
                     "sjf+lpt true lengths aging100", "sjf+lpt true lengths aging300"]  # no spread: no q10 arm
    assert [q.name for q in sr.with_extra_arms(cfg, (), extra=False).policies] == [q.name for q in cfg.policies]


@pytest.mark.parametrize("bad", ["x", "100,-5", "nan"])
def test_bad_aging_is_one_line(run, tmp_path, capsys, bad):
    assert sr.main(["--run", str(run["run"]), "--config", str(run["config"]), "--predictions", f"r={run['preds']}",
                    "--aging", bad, "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "--aging" in err
    assert not (tmp_path / "o").exists()


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
