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


def _run_dir(tmp: Path) -> Path:
    from lenpred.data.rundir import RunDir

    return RunDir.create(tmp / "run", {"model": {"id": "m"}, "prompts": {}, "sampling": {}, "engine": {}}).path


def _card_list(tmp: Path) -> dict[str, Path]:
    d = tmp / "run"
    d.mkdir()
    (d / "card.json").write_text("[]")
    return {"run": d}


CASES += [
    BadInput("info-card-json-is-a-list", ["info", "{run}"], _card_list, expect="card.json is a JSON list, not a run card"),
    BadInput("bound-card-json-is-a-list", ["bound", "{run}", "--out", "{tmp}/o"], _card_list,
             expect="card.json is a JSON list, not a run card"),
    # demo: names and paths it reads after the live collection are checked before it
    BadInput("demo-unknown-head", ["demo", "--heads", "xgboost"], None, expect="unknown predictor 'xgboost'"),
    BadInput("demo-reference-missing", ["demo", "--reference", "{tmp}/nonexistent"], None,
             expect="nonexistent is not a lenpred run directory"),
]

CASES += [
    BadInput("demo-run-inside-a-run", ["demo", "--run", "{run}/live"], lambda t: {"run": _run_dir(t)},
             expect="is inside a lenpred run directory"),
]
