"""The overwrite rule (lenpred.io.artifacts.check_out): where a writer may put its output.

Allowed: a new path, an empty directory or file, an earlier output of the same kind made from the
same run (a rerun). Refused, naming what is there: another kind, another run, a foreign file or
directory, a path inside a run directory, inside an artifact or inside one of the command's inputs,
a directory where a file belongs and the reverse, a path under a file, a read-only directory.
"""

from __future__ import annotations

import json
import os
import subprocess

import pandas as pd
import pytest

from lenpred.data.rundir import RunDir
from lenpred.errors import DataError
from lenpred.io.artifacts import ArtifactHeader, Rerun, check_out, write_artifact
from lenpred.io.outputs import what_is
from lenpred.predictions import Predictions

CARD = {"model": {"id": "m"}, "prompts": {}, "sampling": {"max_new_tokens": 8}, "engine": {"name": "fake"}}
OTHER = {**CARD, "sampling": {"max_new_tokens": 9}}


def _run(path, card=CARD) -> RunDir:
    rd = RunDir.create(path, card)
    rd.write_prompts(pd.DataFrame({"prompt_id": ["a"], "idx": [0], "text": ["x"], "n_prompt_tokens": [1]}))
    return rd


def _art(path, kind="head", card=CARD, **meta):
    rd = RunDir(path, {"schema": "lenpred.run/1", **card})
    return write_artifact(path, ArtifactHeader(kind=kind, schema_version=1, card=rd.card, meta=meta),
                          json_files={"x.json": {}})


def _refused(message: str, path, **kw) -> None:
    with pytest.raises(DataError, match=message):
        check_out(path, **kw)


def test_new_empty_and_rerun_are_allowed(tmp_path):
    assert check_out(tmp_path / "a" / "b", kind="head") == (tmp_path / "a" / "b").resolve()
    (tmp_path / "empty").mkdir()
    check_out(tmp_path / "empty", kind="head", card=CARD)
    _art(tmp_path / "h")
    check_out(tmp_path / "h", kind="head", card={"schema": "lenpred.run/1", **CARD})  # same run: a rerun
    (tmp_path / "e.parquet").write_bytes(b"")
    check_out(tmp_path / "e.parquet", kind="predictions")


def test_another_kind_or_run_is_refused(tmp_path):
    _art(tmp_path / "f", kind="features")
    _refused("holds a lenpred features artifact .*, not head", tmp_path / "f", kind="head")
    _art(tmp_path / "h")
    _refused("holds a head made from another run", tmp_path / "h", kind="head", card={"schema": "lenpred.run/1", **OTHER})
    _art(tmp_path / "d", kind="draft", converted_from="x")
    _refused(r"made from other inputs \(converted_from: 'x', now 'y'\)", tmp_path / "d", kind="draft",
             rerun=Rerun(match={"converted_from": "y"}))


def test_foreign_files_and_directories_are_refused(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    _refused("non-empty directory that is not a lenpred artifact", tmp_path / "mine", kind="bench")
    (tmp_path / "notes.txt").write_text("my notes")
    _refused("is a file that is not a lenpred file of this kind", tmp_path / "notes.txt", kind="predictions")
    _refused("exists and is a file", tmp_path / "notes.txt", kind="bench")
    _refused("is a directory", tmp_path / "mine", kind="predictions")


def test_predictions_file_rerun_and_other_run(tmp_path):
    rd = _run(tmp_path / "run")
    other = _run(tmp_path / "other", OTHER)
    p = Predictions.from_frame(pd.DataFrame({"prompt_id": ["a"], "pred_tokens": [3.0]}), made_by="t", card=rd.card)
    p.write(tmp_path / "p.parquet")
    assert what_is(tmp_path / "p.parquet").kind == "predictions"
    check_out(tmp_path / "p.parquet", kind="predictions", card=rd.card)
    _refused("made from another run", tmp_path / "p.parquet", kind="predictions", card=other.card)


def test_inside_a_run_an_artifact_or_an_input_is_refused(tmp_path):
    rd = _run(tmp_path / "run")
    _refused("is inside a lenpred run directory", rd.path / "prompts.parquet", kind="predictions")
    _refused("is inside a lenpred run directory", rd.path / "new" / "x", kind="head")
    check_out(rd.path / "split.json", kind="split", card=rd.card, allow_inside=rd.path)
    _refused("holds a lenpred run table", rd.path / "prompts.parquet", kind="split", allow_inside=rd.path)
    _art(tmp_path / "t", kind="trajectory")
    _refused("is inside a lenpred trajectory artifact", tmp_path / "t" / "sub", kind="outlets-bench")
    _refused("is the command's own input --traj", tmp_path / "t", kind="outlets-bench", inputs={"--traj": tmp_path / "t"})
    _refused("is inside the command's own input --cache", tmp_path / "c" / "o", kind="draft",
             inputs={"--cache": tmp_path / "c", "--run": None})
    _refused("own input --heads", tmp_path / "h2", kind="bench", inputs={"--heads": [tmp_path / "h1", tmp_path / "h2"]})


def test_unwritable_places_are_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    _refused(r"cannot be created: .*f is a file", tmp_path / "f" / "out", kind="head")
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(ro)], capture_output=True).returncode != 0:
            pytest.skip("root without chattr: cannot make a read-only directory")
    else:
        ro.chmod(0o555)
    try:
        _refused("directory .* is read-only", ro / "out", kind="head")
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(ro)], check=True)
        ro.chmod(0o755)


def test_rerun_folders_and_lenpred_files_are_recognised(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "results.json").write_text("{}")
    check_out(tmp_path / "old", kind="outlets-schedule", rerun=Rerun(folder=lambda d: (d / "results.json").is_file()))
    (tmp_path / "ev.jsonl").write_text(json.dumps({"cycle": 0}) + "\n")
    check_out(tmp_path / "ev.jsonl", kind="events")
    assert what_is(tmp_path / "nowhere") is None
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "meta.json").write_text("[]")
    _refused("holds an artifact whose meta.json is not a lenpred header", tmp_path / "bad", kind="head")
