"""Config files, metrics, the sweep, and `lenpred simulate` on a tiny config."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lenpred.cli import main
from lenpred.errors import ConfigError
from lenpred.sim.arm import ArmPolicy
from lenpred.sim.config import ClusterConfig, SimConfig
from lenpred.sim.engine import simulate
from lenpred.sim.profiles import LatencyProfile
from lenpred.sim.request import Request
from lenpred.sim.summary import summarize
from lenpred.sim.sweep import run_sweep

TINY = {
    "name": "tiny",
    "seed": 3,
    "cluster": {"mode": "disaggregated", "n_prefill": 1, "n_decode": 2, "profile": "llama8b-h100",
                "kv_capacity_tokens": 6000},
    "workload": {"n_requests": 300, "arrival": {"process": "poisson", "rate": 5.0},
                 "lengths": {"source": "synthetic", "output_median": 150}},
    "prediction": {"model": "lognormal", "rel_mae": 0.3},
    "policies": [
        {"name": "fcfs-rr"},
        {"name": "sjf-lpt", "queue": "sjf", "dispatch": "least-predicted-tokens"},
        {"name": "oracle", "queue": "sjf", "dispatch": "least-predicted-tokens", "prediction": {"model": "oracle"}},
    ],
    "sweep": {"loads": [0.7, 1.1], "load_unit": "capacity", "probe_requests": 200},
}


def write(tmp_path: Path, cfg: dict) -> Path:
    p = tmp_path / "cfg.json"
    p.write_text(json.dumps(cfg))
    return p


def test_summary_of_the_hand_trace(toy_profile: LatencyProfile) -> None:
    reqs = [Request(0, 0.0, 100, 3, 3), Request(1, 0.0, 200, 2, 2)]
    res = simulate(reqs, ClusterConfig(mode="colocated"), ArmPolicy(), profile=toy_profile)
    s = summarize(res, slo_ttft_s=0.5, slo_tpot_s=0.0135)
    assert s["short_threshold_tokens"] == 2.5 and "median" in s["short_definition"]
    assert s["n_short"] == 1  # the 2-token request
    assert s["latency"]["short"]["e2e"]["p50"] == pytest.approx(0.41502)
    assert s["latency"]["long"]["ttft"]["p50"] == pytest.approx(0.4)
    # TPOT: A (0.42704 - 0.4) / 2 = 0.01352, B 0.01502 / 1
    assert s["latency"]["all"]["tpot"]["mean"] == pytest.approx((0.01352 + 0.01502) / 2)
    assert s["latency"]["all"]["queue"]["p99"] == pytest.approx(0.0)
    assert s["makespan_s"] == pytest.approx(0.42704)
    assert s["throughput_rps"] == pytest.approx(2 / 0.42704)
    assert s["slo"]["attainment"] == pytest.approx(0.0)  # TPOTs 13.52 and 15.02 ms, both above 13.5
    s2 = summarize(res, slo_ttft_s=0.5, slo_tpot_s=0.014, short_threshold=100)
    assert s2["slo"]["attainment"] == pytest.approx(0.5) and s2["n_short"] == 2
    assert s2["decode_imbalance"]["tokens_max_over_mean"] == 1.0


def test_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^config\.colour: unknown key -- fix: valid keys: name, seed, cluster"):
        SimConfig.from_dict({"colour": "blue"}, "config")
    with pytest.raises(ConfigError, match=r"cluster\.n_gpus: unknown key -- fix: valid keys: mode, n_prefill"):
        SimConfig.from_dict({"cluster": {"n_gpus": 3}})
    with pytest.raises(ConfigError, match=r"policies\[1\]\.colour: unknown key -- fix: valid keys: name, queue"):
        SimConfig.from_dict({"policies": [{"name": "a"}, {"name": "b", "colour": 1}]})
    with pytest.raises(ConfigError, match="unique"):
        SimConfig.from_dict({"policies": [{"name": "a"}, {"name": "a"}]})
    with pytest.raises(ConfigError, match="baseline"):
        SimConfig.from_dict({"sweep": {"baseline": "nope"}})
    with pytest.raises(ConfigError, match="loads must all be > 0"):
        SimConfig.from_dict({"sweep": {"loads": [1.0, 0]}})
    with pytest.raises(ConfigError, match="rate must be > 0"):
        SimConfig.from_dict({"workload": {"arrival": {"rate": 0}}})
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(ConfigError, match="not valid JSON"):
        SimConfig.load(bad)
    with pytest.raises(ConfigError, match="not found"):
        SimConfig.load(tmp_path / "missing.json")
    cfg = SimConfig.from_dict(TINY)
    assert SimConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


def test_sweep_compares_policies() -> None:
    cfg = SimConfig.from_dict(TINY)
    res = run_sweep(cfg)
    assert res.capacity_rps is not None and res.capacity_rps > 0
    rows = res.table()
    assert [r["load"] for r in rows] == [0.7, 1.1]
    for r in rows:
        assert r["rate_rps"] == pytest.approx(r["load"] * res.capacity_rps)
        assert {"fcfs-rr", "sjf-lpt", "sjf-lpt change", "oracle", "oracle change"} <= set(r)
    # over saturation, running short requests first must help short requests a lot
    over = rows[-1]
    assert over["oracle change"] < -0.3 and over["sjf-lpt change"] < -0.3
    # every arm saw the same requests
    n = {run.summary["n_completed"] for run in res.runs}
    assert n == {300}


def test_cli_runs_a_tiny_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    rc = main(["simulate", "--config", str(write(tmp_path, TINY)), "--out", str(out), "--quiet"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "short requests" in printed and "fcfs-rr" in printed and "sjf-lpt change" in printed
    data = json.loads((out / "results.json").read_text())
    from lenpred.sim.workload import build_workload

    wl = build_workload(SimConfig.from_dict(TINY).workload, seed=TINY["seed"])
    assert data["short_threshold_tokens"] == float(np.median(wl.output))  # the median true length
    assert [(r["policy"], r["load"]) for r in data["runs"]] == [
        (p["name"], load) for load in (0.7, 1.1) for p in TINY["policies"]]
    # the plots are real images of the size asked for (90 dpi), not blank canvases
    import matplotlib.image as mpimg

    for name, shape in (("latency_cdf.png", (504, 648)), ("p99_vs_load.png", (360, 540))):
        img = mpimg.imread(out / name)
        assert img.shape[:2] == shape, name
        assert len(np.unique(img.reshape(-1, img.shape[-1]), axis=0)) > 50, name  # lines, text, colours
    # table.md: title, blank line, header, separator, one row per load; 7 columns each
    lines = (out / "table.md").read_text().splitlines()
    assert len(lines) == 6 and lines[0].startswith("tiny: P99 end-to-end latency")
    assert [ln.count("|") for ln in lines[2:]] == [8, 8, 8, 8]
    assert lines[4].startswith("| 0.7x |") and lines[5].startswith("| 1.1x |")
    assert json.loads((out / "config.json").read_text())["name"] == "tiny"


def test_cli_overrides_and_requests_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o2"
    rc = main(["simulate", "--config", str(write(tmp_path, TINY)), "--out", str(out), "--quiet",
               "--loads", "1.0", "--n-requests", "120", "--no-plots"])
    assert rc == 0
    data = json.loads((out / "results.json").read_text())
    assert data["config"]["workload"]["n_requests"] == 120 and data["config"]["sweep"]["loads"] == [1.0]
    assert not (out / "latency_cdf.png").exists()
    # replay a request table with its own predictions
    reqs = tmp_path / "reqs.csv"
    rng = np.random.default_rng(0)
    n = 50
    lines = ["arrival_s,prompt_tokens,output_tokens,predicted_tokens"]
    lines += [f"{0.05 * i},{rng.integers(10, 200)},{o},{o * 1.1:.1f}" for i, o in
              enumerate(rng.integers(5, 300, n))]
    reqs.write_text("\n".join(lines) + "\n")
    rc = main(["simulate", "--requests", str(reqs), "--out", str(tmp_path / "o3"), "--quiet", "--no-plots"])
    assert rc == 0
    data = json.loads((tmp_path / "o3" / "results.json").read_text())
    assert data["runs"][0]["summary"]["n_completed"] == n
    assert data["config"]["prediction"]["model"] == "input"
    # predictions present and no policy named: FCFS + RR (a reference column), the recommended late binding (the
    # baseline: no prediction) and the same queue ordered by the prediction
    from lenpred.sched.recommended import PREDICTION_ARM, RECOMMENDED

    pols = data["config"]["policies"]
    assert [p["name"] for p in pols] == ["fcfs-rr", RECOMMENDED["name"], PREDICTION_ARM["name"]]
    assert data["baseline"] == RECOMMENDED["name"] and pols[1]["queue"]["name"] == "fcfs"
    assert pols[1]["max_outstanding"] == pols[2]["max_outstanding"] == 256  # the profile's batch limit
    assert (pols[2]["queue"]["name"], pols[2]["queue"]["aging"], pols[2]["dispatch"]) == ("sjf", 100.0, "least-requests")


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate"]) == 1
    assert "no config given" in capsys.readouterr().err
    bad = dict(TINY, cluster={"profile": "a100-magic"})
    assert main(["simulate", "--config", str(write(tmp_path, bad)), "--out", str(tmp_path / "x")]) == 1
    err = capsys.readouterr().err
    assert "unknown latency profile 'a100-magic'" in err and "llama8b-h100" in err and err.count("\n") == 1
    bad = dict(TINY, policies=[{"name": "x", "queue": "lifo"}])
    assert main(["simulate", "--config", str(write(tmp_path, bad)), "--out", str(tmp_path / "x")]) == 1
    assert "use one of: boost2, fcfs, gboost, gittins, hrrn, las, mlfq, oracle, risk, sjf, srpt, trail, uniboost" in capsys.readouterr().err
    assert main(["simulate", "--config", str(write(tmp_path, TINY)), "--loads", "0,1"]) == 1
    assert "loads must all be > 0" in capsys.readouterr().err


def test_cli_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--list"]) == 0
    out = capsys.readouterr().out
    assert "distserve-opt13b" in out and "least-predicted-tokens" in out and "lognormal" in out


def test_a_replayed_trace_keeps_its_own_times_unless_a_load_is_asked_for(tmp_path: Path) -> None:
    from lenpred.sim.sweep import replay_config
    from lenpred.sim.workload import read_requests

    reqs = tmp_path / "reqs.csv"
    # 41 requests over 20 s: a mean rate of 2 requests/s, in file order that is not arrival order
    times = [0.5 * i for i in range(41)]
    times[3], times[7] = times[7], times[3]
    lines = ["arrival_s,prompt_tokens,output_tokens,predicted_tokens"]
    lines += [f"{t},{20 + i},{10 + 7 * i},{10 + 7 * i}" for i, t in enumerate(times)]
    reqs.write_text("\n".join(lines) + "\n")
    cfg = SimConfig.from_dict(dict(TINY, workload={"arrival": {"rate": 5.0}}, sweep={}))  # rate 5: not the trace's
    said: list[str] = []
    cfg2, wl = replay_config(cfg, reqs)
    res = run_sweep(cfg2, progress=said.append, workload=wl)
    run = res.runs[0]
    assert run.load is None and run.rate_rps == pytest.approx(2.0)
    assert all("load" not in m and "2.0 req/s on average" in m for m in said)
    # exactly the requests as the file says: the same end-to-end times as simulating them directly
    direct = simulate(read_requests(reqs), cfg.cluster, cfg.policies[0].policy, seed=cfg.seed)
    np.testing.assert_array_equal(run.e2e, direct.t_finish - direct.arrival)
    # asked for explicitly, a load rescales the trace to that mean rate (here 4 req/s: twice as dense)
    cfg3, wl3 = replay_config(cfg.nested("sweep", loads=(4.0,)), reqs, loads_given=True)
    assert wl3.arrival_times(4.0) == pytest.approx(np.sort(times) / 2)
    assert run_sweep(cfg3, workload=wl3).runs[0].rate_rps == 4.0
