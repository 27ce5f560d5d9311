"""benchmarks/bench_value.py: the arms, the reference and goal rule by hand, the ranking figure, and a tiny run
end to end."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from benchmarks import bench_value as bv


def test_every_arm_is_a_valid_policy_and_the_free_ones_read_no_prediction() -> None:
    from lenpred.sched.dispatch import DISPATCHERS

    tables = {"mlp": "m.parquet", "outlets": "o.parquet"}
    for rn, reg in bv.REGIMES.items():
        arms = bv.arms_for(rn)
        assert len({x.name for x in arms}) == len(arms)
        assert arms[0].reference_only and arms[0].dispatch == "round-robin"
        for x in arms:
            pol = x.config(tables, reg.batch).policy
            if x.free:
                assert not DISPATCHERS.get(pol.dispatch).needs_prediction
                assert pol.admission in ("fits-now", "watermark") and pol.queue.name == "fcfs"
            assert (pol.max_outstanding == reg.batch) == x.late
    assert {x.kv_reserve for x in bv.arms_for("kv") if x.admission == "watermark"} == {0.05, 0.1, 0.2}
    assert any(x.dispatch == "least-requests-per-speed" and x.free for x in bv.arms_for("hetero"))


def _row(arm: str, pred: str, seed: int, short: float, p99: float) -> dict:
    batches = {"short_p99_s": [short] * 10, "p99_s": [p99] * 10, "short_p50_s": [1.0] * 10}
    return {"regime": "bimodal", "load": 0.95, "seed": seed, "arm": arm, "predictor": pred, "short_p99_s": short,
            "p99_s": p99, "p50_s": 1.0, "attain_all": 0.9, "batches": batches, "n_requests": 100}


def test_the_reference_is_best_free_without_round_robin_and_the_goal_needs_both_ratios() -> None:
    rows = []
    for s in (0, 1):
        rows += [_row("fcfs @rr/-", "-", s, 0.5, 5.0),  # the lowest short P99, but a reference column only
                 _row("fcfs @jsq/-", "-", s, 2.0, 10.0), _row("fcfs late/-", "-", s, 1.8, 10.4),  # within 1.05x
                 _row("fcfs @lkv/-", "-", s, 1.0, 11.0)]  # overall P99 above 1.05 x 10: never the reference
    rows += [_row("sjf aging100 late/mlp", "mlp", 0, 1.4, 10.9), _row("sjf aging100 late/mlp", "mlp", 1, 1.0, 10.0),
             _row("fcfs @lpt/outlets", "outlets", 0, 1.0, 11.0), _row("fcfs @lpt/outlets", "outlets", 1, 1.0, 11.0),
             _row("sjf aging100 late/true", "true", 0, 0.9, 9.0), _row("sjf aging100 late/true", "true", 1, 0.9, 9.0)]
    s = bv.summarize(rows)["regimes"]["bimodal"]
    c0 = s["cells"]["0.95|s0"]
    assert c0["reference"] == "fcfs late/-"
    r = c0["arms"]["sjf aging100 late/mlp"]["ratio"]
    assert r["short_p99_s"] == pytest.approx(1.4 / 1.8) and r["meets_goal"]  # 0.78x at 10.9 / 10.4 = 1.048x
    assert r["short_p99_s_batch"] == pytest.approx([1.4 / 1.8] * 3)
    assert not c0["arms"]["fcfs @lpt/outlets"]["ratio"]["meets_goal"]  # 0.56x short but 1.06x overall
    lines = {ln["level"]: ln for ln in s["lines"]}
    assert lines["mlp"]["meets"] == 2 and lines["mlp"]["arm"] == "sjf aging100 late/mlp"
    assert lines["outlets"]["meets"] == 0
    assert lines["real (mlp)"]["ratios"]["short_p99_s"] == pytest.approx([1.4 / 1.8, 1.0 / 1.8])
    assert lines["true"]["meets"] == 2


def test_ranking_auc_by_hand() -> None:
    # 4 requests queued (decode wait > 10 ms): short (< 100) ones predicted 10 and 300, long ones 200 and 400
    res = SimpleNamespace(t_finish=np.ones(5), t_decode_admit=np.array([1.0, 1.0, 1.0, 1.0, 0.0]),
                          t_first=np.zeros(5), output=np.array([50, 60, 500, 600, 50]))
    out = bv.ranking(res, 100.0, {"p": np.array([10.0, 300.0, 200.0, 400.0, 5.0])})
    # pairs (short, long): (10,200) (10,400) (300,400) ordered, (300,200) not: 3/4
    assert out["n_queued"] == 4 and out["p_queued_auc"] == pytest.approx(0.75)
    assert out["p_all_auc"] == pytest.approx(5 / 6)
    assert out["p_queued_short_above_long_median"] == 0.0  # 10 and 300 against the long median 300
    assert out["p_all_short_above_long_median"] == 0.0  # 5, 10 and 300: none above 300
    q = bv.ranking(res, 100.0, {"q": np.array([350.0, 300.0, 200.0, 400.0, 5.0])})
    assert q["q_queued_short_above_long_median"] == 0.5  # 350 is above the long ones' median 300


RUN = Path(__file__).resolve().parents[1] / "data" / "runs" / "smollm2-sharegpt" / "card.json"


@pytest.mark.skipif(not (RUN.is_file() and bv.OUTLETS_TABLE.is_file()), reason="the reference run is not here")
def test_a_tiny_run_writes_its_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the OUTLETS table stands in for the mlp head's (no head is run in a test); one regime, three arms
    monkeypatch.setattr(bv, "tables_for", lambda work: {"mlp": str(bv.OUTLETS_TABLE), "outlets": str(bv.OUTLETS_TABLE)})
    work, out = tmp_path / "work", tmp_path / "out"
    args = ["--work", str(work), "--out", str(out), "--n-requests", "300", "--seeds", "0", "--loads", "0.9",
            "--regimes", "bimodal", "--arms", "fcfs @rr/-,fcfs late/-,sjf aging100 late/mlp"]
    assert bv.main(args) == 0
    rows = [json.loads(x) for x in (work / "cells.jsonl").read_text().splitlines()]
    assert [r["arm"] for r in rows] == ["fcfs @rr/-", "fcfs late/-", "sjf aging100 late/mlp"]
    assert "ranking" in rows[1] and 0.0 <= rows[1]["ranking"]["mlp_all_auc"] <= 1.0
    v = json.loads((out / "value.json").read_text())
    cell = v["regimes"]["bimodal"]["cells"]["0.9|s0"]
    assert cell["reference"] == "fcfs late/-"  # round robin is never the reference
    assert set(cell["arms"]) == {r["arm"] for r in rows} and (out / "cells.jsonl").is_file()
    assert v["setup"]["bimodal|n300"]["capacity_rps"] > 0
    assert bv.main(args) == 0  # resumable: nothing runs again
    assert len((work / "cells.jsonl").read_text().splitlines()) == 3


def test_unknown_regimes_and_arms_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["--regimes", "nope"], ["--arms", "x/-"], ["--n-requests", "5"]):
        with pytest.raises(SystemExit) as e:
            bv.main(["--dry-run", *args])
        assert e.value.code == 2 and "-- fix:" in capsys.readouterr().err


def test_reorderable_wait_by_hand() -> None:
    # 30 requests a second apart (window: the 4th to the 27th); 12 and 13 are long and wait for a slot until 16
    # and 17; short 14 waits until 18 (both long ones ahead), short 15 until 19.1 (12, 13 and 14 ahead)
    n = 30
    arrival = np.arange(n, dtype=float)
    first = arrival + 0.1
    admit, finish = first.copy(), arrival + 1.0
    output = np.full(n, 50)
    output[[12, 13]] = 500
    for i, (ad, fin) in {12: (16.0, 30.0), 13: (17.0, 31.0), 14: (18.0, 18.2), 15: (19.1, 20.1)}.items():
        admit[i], finish[i] = ad, fin
    res = SimpleNamespace(n=n, arrival=arrival, t_first=first, t_decode_admit=admit, t_finish=finish, output=output,
                          t_prefill_start=arrival, mode="disaggregated")
    out = bv.reorderable(res, 100.0)
    assert out["tail_n"] == 2  # 14 (e2e 4.2) and 15 (5.1) are the short tail
    assert out["decode_wait_share"] == pytest.approx((3.9 / 4.2 + 4.0 / 5.1) / 2)
    assert out["reorderable_share"] == pytest.approx((3.9 / 4.2 + 4.0 * 2 / 3 / 5.1) / 2)
    assert (out["long_ahead"], out["short_ahead"]) == (2.0, 0.5)
