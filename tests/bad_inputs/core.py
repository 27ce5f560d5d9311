"""Bad inputs of the shared seams: artifacts, predictions tables, configs (rows for tests/test_bad_input.py)."""

from __future__ import annotations

from pathlib import Path

from bad_input_harness import BadInput


def _not_a_run(tmp: Path) -> dict[str, Path]:
    d = tmp / "mine"
    d.mkdir()
    (d / "notes.txt").write_text("my own file\n")
    return {"dir": d}


CASES: list[BadInput] = [
    BadInput("info-not-a-run", ["info", "{dir}"], _not_a_run, expect="not a lenpred run directory"),
]
