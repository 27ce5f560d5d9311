"""benchmarks/bench_value_why.py's own logic on hand-made data (no simulation): the short-vs-long AUC and
the report's ratios to late binding."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import bench_value_why as w


def test_auc_counts_the_pairs_a_prediction_orders_right() -> None:
    short = np.array([True, True, False, False])
    assert w.auc_short(np.array([1.0, 2.0, 3.0, 4.0]), short) == 1.0  # every short below every long
    assert w.auc_short(np.array([4.0, 3.0, 2.0, 1.0]), short) == 0.0
    assert w.auc_short(np.array([1.0, 3.0, 2.0, 4.0]), short) == 0.75  # 3 of 4 pairs in order
    assert w.auc_short(np.array([1.0, 1.0, 1.0, 1.0]), short) == 0.5  # ties count half
    assert w.auc_short(np.array([1.0, 2.0]), np.array([True, True])) is None


def test_report_gives_ratios_to_late_binding(tmp_path) -> None:
    def ev(short: float, p99: float, auc: float | None = None) -> dict:
        return {"short_p99_s": short, "p99_s": p99, "tail_wait_share": 0.5, "auc_short": auc, "tail_called_long": 0.9}

    rows = [{"key": f"1+2|16|0.95|s{s}", "cluster": "1+2", "batch": 16, "load": 0.95, "seed": s, "n": 1000,
             "arms": {"fcfs late/-": ev(2.0, 10.0), "sjf aging100 late/mlp": ev(1.8 + 0.2 * s, 11.0, 0.8)}}
            for s in (0, 1)]
    js, md = w.report(rows, tmp_path, 1000)
    text = md.read_text()
    assert "| 1+2 b16 0.95 | sjf aging100 late/mlp | 0.90–1.00 | 1.10 | 0.50 | 0.800 | 0.90 |" in text
    assert "| 1+2 b16 0.95 | fcfs late/- | 1.00 | 1.00 | 0.50 | - | - |" in text
    got = json.loads(js.read_text())["summary"]
    assert [s["short_p99_x_free"] for s in got if s["arm"] != "fcfs late/-"] == [pytest.approx([0.9, 1.0])]


def test_bad_cells_are_one_line(capsys) -> None:
    assert w.main(["--cells", "2+4|16|0.9"]) == 1
    assert "is not CLUSTER|BATCH|LOAD" in capsys.readouterr().err
