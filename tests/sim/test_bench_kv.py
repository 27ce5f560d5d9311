"""benchmarks/bench_kv.py's own logic: the arms, the budget rule, the goal check and the report."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from benchmarks import bench_kv as bk


def test_arms_differ_only_in_the_rules() -> None:
    assert bk.ARMS[0] == bk.BASE and bk.BASE.victim == "latest" and bk.BASE.admission == "fits-now"
    assert len({a.name for a in bk.ARMS}) == len(bk.ARMS) == 15
    tables = {"outlets": "o.parquet", "mlp": "m.parquet"}
    for a in bk.ARMS:
        cfg = a.config(tables)  # every arm is a valid PolicyConfig: FCFS, round robin
        assert (cfg.policy.queue.name, cfg.policy.dispatch, cfg.policy.victim, cfg.policy.admission) == ("fcfs", "round-robin", a.victim, a.admission)
    assert bk.OUTLETS_ARMS == ["victim outlets", "admit outlets", "both outlets", "horizon outlets",
                               "victim+horizon outlets"]


def test_budget_rule_by_hand() -> None:
    wl = SimpleNamespace(prompt=np.array([100, 300]), output=np.array([200, 600]))
    # mean(prompt + output / 2) = mean(200, 600) = 400; 0.5 x 256 x 400
    assert bk.kv_budget(wl, 256, 0.5) == 51200 and bk.kv_budget(wl, 256, 0.25) == 25600


def _row(arm: str, seed: int, pre: float, p99: float, short: float) -> dict:
    return {"arm": arm, "policy": "fcfs", "budget_share": 0.5, "load": 0.9, "seed": seed, "n_requests": 100, "preempt_mean": pre, "preempt_share": 0.1,
            "p99_s": p99, "short_p99_s": short, "attainment": 0.9, "goodput_rps": 1.0}


def test_goal_needs_every_seed(tmp_path: Path) -> None:
    rows = [_row("vllm-default", s, 1.0, 10.0, 5.0) for s in (0, 1)]
    rows += [_row("victim outlets", 0, 0.7, 9.0, 5.0), _row("victim outlets", 1, 0.5, 9.0, 5.0)]  # met in both
    rows += [_row("admit outlets", 0, 0.5, 9.0, 5.0), _row("admit outlets", 1, 0.71, 9.0, 5.0)]  # cut 29% in seed 1
    rows += [_row("both outlets", 0, 0.5, 10.0, 5.0), _row("both outlets", 1, 0.5, 9.0, 5.1)]  # P99 equal; short worse
    s = bk.summarize_cells(rows)["K 0.5, load 0.9"]["arms"]
    assert s["victim outlets"]["goal_all_seeds"] and s["victim outlets"]["goal_seeds"] == 2
    assert not s["admit outlets"]["goal_all_seeds"] and s["admit outlets"]["goal_seeds"] == 1
    assert s["both outlets"]["goal_seeds"] == 0
    assert s["victim outlets"]["ratio_to_default"]["preempt_mean"] == pytest.approx(
        {"min": 0.5, "max": 0.7, "mean": 0.6})
    work = tmp_path / "work"
    work.mkdir()
    (work / "cells.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"cut by a kill')
    js, md = bk.write_report(work, tmp_path / "out")
    assert len(json.loads(js.read_text())["rows"]) == len(rows)
    text = md.read_text()
    assert "K 0.5, load 0.9: victim outlets meet it" in text and "| admit outlets |" in text and "| 1/2 |" in text


def test_bad_loads_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:  # not numbers: argparse's error (benchmarks/flags.py), exit 2
        bk.main(["--loads", "0.9,x"])
    assert e.value.code == 2 and "argument --loads: 'x' is not a number -- fix: " in capsys.readouterr().err
    assert bk.main(["--loads", "0"]) == 1
    assert bk.main(["--budgets", "1.5"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("fix:" in e for e in err)


def test_episode_row_over_every_request_equals_the_summary() -> None:
    # the episode's masked figures, over every request, are the steady cells' figures
    from lenpred.sim.arm import ArmPolicy
    from lenpred.sim.config import ClusterConfig
    from lenpred.sim.engine import simulate
    from lenpred.sim.profiles import LatencyProfile
    from lenpred.sim.request import Request

    rng = np.random.default_rng(0)
    n = 200
    t = np.cumsum(rng.exponential(1 / 80.0, n))
    o = np.clip(rng.lognormal(np.log(80), 0.9, n), 2, 600).astype(int)
    reqs = [Request(i, t[i], 100, int(o[i]), float(o[i])) for i in range(n)]
    toy = LatencyProfile(name="toy", prefill=(0.1, 0.001, 0.0), decode=(0.01, 1e-5, 0.001), kv_bytes_per_token=1000,
                         kv_capacity_tokens=100_000, max_batch=16, max_prefill_tokens=4096)
    res = simulate(reqs, ClusterConfig(n_decode=2, kv_capacity_tokens=3000), ArmPolicy(), profile=toy)
    thr = float(np.median(o))
    a, b = bk.cell_row(res, thr), bk.episode_row(res, thr, np.ones(n, dtype=bool))
    assert a["preempt_mean"] > 0
    for k in a:
        assert b[k] == pytest.approx(a[k], rel=1e-9), k
