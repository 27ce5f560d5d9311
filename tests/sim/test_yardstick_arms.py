"""benchmarks/yardstick_arms.py: chosen arms against each cell's best prediction-free arm, on hand-made rows."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import yardstick_arms
from tests.report.report_inputs import yardstick_row


def test_ratios_goal_and_never_worse_per_group(tmp_path: Path, capsys) -> None:
    arm = "gboost late/counters"
    cand = {0: (8.0, 19.0), 1: (11.0, 20.0), 2: (9.0, 20.0)}  # short 0.8 / 1.1 / 0.9 of late FCFS's 10 s
    rows = [yardstick_row({"fcfs+rr/-": (14.0, 24.0), "fcfs late/-": (10.0, 20.0), arm: cand[s]}, seed=s)
            for s in (0, 1, 2)]
    rows.append(yardstick_row({"fcfs+rr/-": (14.0, 24.0), "fcfs late/-": (10.0, 20.0)}, cluster="4+8"))
    cells = tmp_path / "cells.jsonl"
    cells.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "arms.json"
    assert yardstick_arms.main([str(cells), "--arms", arm, "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    one = got["steady 1+2 b16"]
    assert one["pairs"] == 3 and one["references"] == {"fcfs late/-": 3}
    a = one["arms"][arm]
    assert a["short"] == [0.9, 0.8, 1.1] and a["overall"] == [1.0, 0.95, 1.0]
    assert a["goal"] == 1 and a["never_worse"] == 2  # seed 0 meets the goal; seeds 0 and 2 are never worse
    assert arm not in got["steady 4+8 b16"]["arms"]  # a group without the arm says so, not a ratio
    text = capsys.readouterr().out
    assert f"| `{arm}` | 0 | - | - | - | - |" in text and "reference (best prediction-free): `fcfs late/-` 3" in text
