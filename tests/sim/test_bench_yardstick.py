"""benchmarks/bench_yardstick.py's own logic: the grid, arms, flags, resumable rows and the report's
ratios (no simulation runs here)."""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_yardstick as y
from benchmarks.report import yardstick_report as rep
from lenpred.errors import ConfigError, DataError
from lenpred.report.yardstick import read_cells


def _args(*argv: str):  # the script's namespace
    return y.resolve(y.parse(list(argv)))


def test_default_grid_is_the_issues_grid() -> None:
    """2 clusters x 2 batches x 5 seeds x (4 steady loads + 4 episodes x 2 arrivals + goodput)."""
    cells = y.grid(_args())
    assert len(cells) == 2 * 2 * 5 * (4 + 8 + 1) == len({c.key for c in cells})
    assert cells[0].key == "steady|1+2|b256|0.9|poisson|s0"
    assert {c.batch for c in cells} == {256, 16} and {c.cluster for c in cells} == {"1+2", "4+8"}


def test_the_default_arms_hold_every_prediction_free_arm() -> None:
    names = list(_args().arm_objs)
    assert {"fcfs @jsq/-", "fcfs @p2/-", "fcfs @lol/-", "fcfs @lkv/-", "fcfs late/-"} <= set(names)
    assert {"sjf aging100 late/mlp", "gboost late/outlets", "fcfs @jsq+pred/mlp", "gboost late/true"} <= set(names)


def test_subset_flags_and_arms() -> None:
    a = _args("--clusters", "4+8", "--batches", "16", "--regimes", "episode", "--episodes", "1.5x120s",
              "--arrivals", "gamma3", "--seeds", "3", "--arms", "sjf/true;srpt/mlp:aging=300")
    assert [c.key for c in y.grid(a)] == ["episode|4+8|b16|1.5x120s|gamma3|s3"]
    assert list(a.arm_objs) == ["fcfs+rr/-", "sjf/true", "srpt aging300/mlp"]  # the baseline always runs
    assert a.arm_objs["srpt aging300/mlp"].params == (("aging", 300.0),)


def test_the_report_goes_to_the_work_folder_unless_named() -> None:
    """A partial run or an --augment of a few rows must not overwrite the committed docs/yardstick report."""
    assert _args("--work", "out/ys-a").out == "out/ys-a"
    assert _args("--work", "out/ys-a", "--augment", "docs/yardstick/steady-cells.jsonl").out == "out/ys-a"
    assert _args("--work", "out/ys-a", "--out", "docs/yardstick").out == "docs/yardstick"


@pytest.mark.parametrize(("argv", "match"), [
    (["--loads", "0.9x,30"], r"mixes multiples of capacity"),
    (["--loads", "0.9,1.1"], r"--loads 1.1: steady loads must lie below capacity"),
    (["--clusters", "2+4"], r"--clusters: '2\+4' is not one of 1\+2, 4\+8"),
    (["--batches", "32"], r"--batches: 32 is not one of 256, 16"),
    (["--arms", "sjf/oracle"], r"unknown arm 'sjf/oracle'"),
    (["--n0", "5000", "--n-max", "1000"], r"must satisfy 1 <= n0 <= n-max"),
])
def test_bad_flags_fail_before_anything_runs(argv: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _args(*argv)


def test_main_reports_a_bad_flag_on_one_line(capsys, tmp_path) -> None:
    assert y.main(["--loads", "0.9x,30", "--work", str(tmp_path / "w"), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m benchmarks.bench_yardstick: error: --loads mixes") and not (tmp_path / "w").exists()


def _row(seed: int, base: float, arm: float, attain: float = 0.9) -> dict:
    figs = {"short_p99_s": base, "p99_s": 2 * base, "short_p50_s": 1.0, "attain_all": 0.8, "attain_short": 0.7,
            "attain_long": 0.9, "drain_s": 10.0, "drained": True}
    cell = {"regime": "episode", "cluster": "1+2", "batch": 16, "where": "1.3x30s", "arrival": "poisson", "seed": seed}
    return {"key": f"k{seed}", "cell": cell, "cpu_s": 2.0, "n_simulated": 1000,
            "arms": {"fcfs+rr/-": figs, "sjf/true": {**figs, "short_p99_s": arm, "attain_short": attain}}}


def test_rows_resume_and_ratios_span_the_seeds(tmp_path) -> None:
    """A line cut by a kill is skipped and the next row still stands on its own line; ratios are
    taken per seed against the baseline, then min-max over seeds."""
    jl = tmp_path / "cells.jsonl"
    y.append_row(jl, _row(0, 10.0, 5.0))
    with jl.open("a") as f:
        f.write('{"key": "cut')  # a kill mid-write
    y.append_row(jl, _row(1, 20.0, 16.0, attain=1.0))
    assert [r["key"] for r in read_cells(jl, partial=True)] == ["k0", "k1"]
    with pytest.raises(DataError, match=r"cells.jsonl line 2 is not JSON"):
        read_cells(jl)  # the cut line is an error where the file is not a run's work file
    (e,) = [x for x in rep.summarize(read_cells(jl, partial=True), "fcfs+rr/-") if x["arm"] == "sjf/true"]
    assert (e["short_p99_s"]["min"], e["short_p99_s"]["max"]) == (5.0, 16.0)
    assert (e["short_p99_s vs base"]["min"], e["short_p99_s vs base"]["max"]) == (0.5, 0.8)
    assert e["attain_short vs base"]["min"] == pytest.approx(0.2) and e["attain_short vs base"]["max"] == pytest.approx(0.3)
    paths = rep.write_report(jl, tmp_path / "out", "fcfs+rr/-")
    md = paths[1].read_text()
    assert "| 1.3x30s poisson | sjf/true | 5.00–16.00 | 0.500–0.800 |" in md
    # the headline: against the best prediction-free arm (here FCFS + RR, the only one), median (min-max), goal
    assert "| sjf/true | 0.650 (0.500–0.800) | 1.000 (1.000–1.000) | 1.000 (1.000–1.000) | 2/2 | 2/2 | - |" in md
    assert json.loads(paths[0].read_text())["baseline"] == "fcfs+rr/-"


def test_dry_run_counts_cells_and_uses_measured_rates(tmp_path) -> None:
    a = _args("--clusters", "1+2", "--batches", "16", "--regimes", "episode", "--episodes", "1.3x30s",
              "--arrivals", "poisson", "--seeds", "0,1", "--arms", ";".join(y.DEFAULT_ARMS))
    work = tmp_path / "w"
    work.mkdir()
    row = _row(0, 1.0, 1.0)
    row["key"] = "episode|1+2|b16|1.3x30s|poisson|s0"
    y.append_row(work / "cells.jsonl", row)  # 2000 us per request measured
    text = y.dry_run(a, y.grid(a), work)
    assert text.splitlines()[0].startswith("done  episode|1+2|b16|1.3x30s|poisson|s0: 8 runs")
    assert text.splitlines()[1].startswith("to do episode|1+2|b16|1.3x30s|poisson|s1: 8 runs")
    assert "1 cell(s) to run" in text and "2000 us/request (measured" in text


def test_arm_options_choose_the_dispatch_and_late_binding() -> None:
    a = _args("--arms", "fcfs/-:late;fcfs/-:dispatch=power-of-two;sjf/mlp:aging=100:late;"
                        "fcfs/mlp:dispatch=least-requests-predicted")
    assert list(a.arm_objs) == ["fcfs+rr/-", "fcfs late/-", "fcfs @p2/-", "sjf aging100 late/mlp", "fcfs @jsq+pred/mlp"]
    late = a.arm_objs["fcfs late/-"].config(None, 16)
    assert (late.dispatch, late.max_outstanding) == ("least-requests", 16)  # late binding: batch-many per instance
    sjf = a.arm_objs["sjf aging100 late/mlp"].config(None, 256)
    assert (sjf.queue.name, sjf.queue.aging, sjf.dispatch, sjf.max_outstanding) == ("sjf", 100.0, "least-requests", 256)
    assert a.arm_objs["fcfs @p2/-"].config(None, 16).max_outstanding is None  # early binding
    assert a.arm_objs["fcfs+rr/-"].config(None, 16).dispatch == "round-robin"  # the old names keep their meaning
    with pytest.raises(ConfigError, match="binds late but no batch limit"):
        a.arm_objs["fcfs late/-"].config(None)


@pytest.mark.parametrize(("arm", "match"), [
    ("fcfs/-:dispatch=least-predicted-tokens", r"dispatcher 'least-predicted-tokens' read\(s\) a predicted length"),
    ("fcfs/-:dispatch=least-requests-predicted", r"has no prediction \('-'\)"),
    ("sjf/-:late", r"the queue 'sjf' read\(s\) a predicted length"),
    ("fcfs/-:dispatch=fastest", r"unknown dispatcher 'fastest'.*least-kv, least-observed-load"),
    ("sjf/mlp:aging=fast", r"'aging=fast' is not key=number, dispatch=NAME or late"),
])
def test_an_arm_that_needs_a_prediction_it_lacks_is_refused(arm: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _args("--arms", arm)


def test_augment_adds_the_missing_arms_and_refuses_a_workload_that_differs(monkeypatch, tmp_path) -> None:
    """The committed row keeps its arms; the new ones join it at its N; the baseline's rerun must match."""
    a = _args("--arms", "fcfs/-:late")
    base = {"short_p99_s": 2.0, "p99_s": 5.0}
    row = {"key": "steady|1+2|b16|0.9|poisson|s0", "cell": {"regime": "steady", "cluster": "1+2", "batch": 16,
           "where": "0.9", "arrival": "poisson", "seed": 0}, "capacity_rps": 10.0, "rate_rps": 9.0, "n": 4000,
           "arms": {"fcfs+rr/-": dict(base)}}
    calls = []

    def fake(self, n, rate, names):
        calls.append((n, rate, list(names), self.cell.batch))
        return {"fcfs late/-": {"short_p99_s": 1.0, "p99_s": 4.0, "batches": {"p99_s": [4.0, 4.0]}},
                "fcfs+rr/-": {**rerun, "batches": {"p99_s": [5.0, 5.0]}}}

    monkeypatch.setattr(y.CellRunner, "steady_at", fake)
    monkeypatch.setattr(y, "sources", lambda _a: {"sharegpt": None})
    rerun = dict(base)
    new = y.augment_row(a, row, {}, tmp_path / "cells.jsonl")
    assert calls == [(4000, 9.0, ["fcfs late/-", "fcfs+rr/-"], 16)]
    assert new["arms"]["fcfs late/-"]["short_p99_s"] == 1.0 and new["added"]["arms"] == ["fcfs late/-"]
    assert new["arms"]["fcfs+rr/-"] == {**base, "batches": {"p99_s": [5.0, 5.0]}} and row["arms"]["fcfs+rr/-"] == base
    rerun = {"short_p99_s": 2.0000001, "p99_s": 5.0}
    with pytest.raises(ConfigError, match="cannot join this row"):
        y.augment_row(a, row, {}, tmp_path / "cells.jsonl")
