"""Bad inputs of ``lenpred report`` (rows for tests/test_bad_input.py)."""

from __future__ import annotations

from pathlib import Path

from bad_input_harness import BadInput


def _run(tmp: Path) -> Path:
    from lenpred.data.rundir import RunDir

    return RunDir.create(tmp / "run", {"model": {"id": "m"}, "prompts": {}, "sampling": {}, "engine": {}}).path


def _latin1_cells(tmp: Path) -> dict[str, Path]:
    f = tmp / "steady-cells.jsonl"
    f.write_bytes(b'{"cell": {"regime": "steady", "where": "caf\xe9"}}\n')
    return {"run": _run(tmp), "cells": f}


def _empty_cells(tmp: Path) -> dict[str, Path]:
    f = tmp / "steady-cells.jsonl"
    f.write_text("\n")
    return {"run": _run(tmp), "cells": f}


def _goodput_cells(tmp: Path) -> dict[str, Path]:
    f = tmp / "goodput-cells.jsonl"
    f.write_text('{"cell": {"regime": "goodput", "cluster": "1+2", "batch": 16, "where": "-", "seed": 0}}\n')
    return {"run": _run(tmp), "cells": f}


_R = ["report", "--run", "{run}", "--yardstick", "{cells}", "--out", "{tmp}/report.html"]

CASES: list[BadInput] = [  # issue 39 part 3
    # was: UnicodeDecodeError
    BadInput("report-yardstick-not-utf8", _R, _latin1_cells,
             expect="steady-cells.jsonl line 1: byte 0xe9 at byte offset 43 is not UTF-8"),
    # was: a page without its scheduling section, and no word
    BadInput("report-yardstick-empty-cells", _R, _empty_cells, expect="holds no yardstick cell row (an empty file"),
    BadInput("report-yardstick-goodput-only", _R, _goodput_cells, expect="holds no yardstick cell row"),
]
