"""Bad inputs of `lenpred simulate` (rows for tests/test_bad_input.py): request tables, predictions
tables, prediction models. Each must exit 1 with one line naming the problem and the fix, and
write nothing (``--out`` points inside the case's folder, so a stray result would be seen)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from bad_input_harness import BadInput

HEADER = "arrival_s,prompt_tokens,output_tokens\n"


def _csv(name: str, body: str):  # a setup callable
    def setup(tmp: Path) -> dict[str, Path]:
        p = tmp / name
        p.write_text(HEADER + body)
        return {"csv": p}

    return setup


def _run(root: Path, name: str, model: str) -> Path:
    """A tiny run directory: prompts a (3 samples) and b (2 samples)."""
    from lenpred.data.rundir import RunDir

    run = RunDir.create(root / name, {"model": {"id": model}, "prompts": {}, "sampling": {}, "engine": {}})
    run.write_prompts(pd.DataFrame({"prompt_id": ["a", "b"], "idx": [0, 1], "text": ["x", "y"],
                                    "n_prompt_tokens": [11, 22]}))
    run.append_samples([{"prompt_id": p, "sample_idx": i, "n_tokens": n, "stop_reason": "eos"}
                        for p, i, n in (("a", 0, 10), ("a", 1, 20), ("a", 2, 30), ("b", 0, 100), ("b", 1, 200))])
    return root / name


def _table(path: Path, run: Path, keys: list[tuple[str, int]]) -> Path:
    from lenpred.data.rundir import RunDir
    from lenpred.predictions import Predictions

    df = pd.DataFrame({"prompt_id": [k[0] for k in keys], "sample_idx": [k[1] for k in keys],
                       "pred_tokens": [50.0] * len(keys)})
    return Predictions.from_frame(df, made_by="test-head", card=RunDir.open(run).card).write(path)


def _config(tmp: Path, run: Path, prediction: dict | None = None) -> Path:
    cfg = {"name": "bad", "workload": {"n_requests": 50, "lengths": {"source": "rundir", "path": str(run),
                                                                      "min_tokens": 1}},
           "policies": [{"name": "sjf", "queue": "sjf"}], "plots": False}
    if prediction is not None:
        cfg["prediction"] = prediction
    p = tmp / "cfg.json"
    p.write_text(json.dumps(cfg))
    return p


def _missing_sample(tmp: Path) -> dict[str, Path]:
    run = _run(tmp, "run", "toy")
    preds = _table(tmp / "preds.parquet", run, [("a", 0), ("a", 1), ("a", 2), ("b", 0)])  # no ("b", 1)
    return {"cfg": _config(tmp, run), "preds": preds}


def _other_run(tmp: Path) -> dict[str, Path]:
    run = _run(tmp, "run", "toy")
    other = _run(tmp, "other", "another-model")
    keys = [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]
    return {"cfg": _config(tmp, run), "preds": _table(tmp / "other.parquet", other, keys)}


def _unknown_model(tmp: Path) -> dict[str, Path]:
    return {"cfg": _config(tmp, _run(tmp, "run", "toy"), {"model": "crystal-ball"})}


def _table_without_path(tmp: Path) -> dict[str, Path]:
    return {"cfg": _config(tmp, _run(tmp, "run", "toy"), {"model": "table"})}


REPLAY = ["simulate", "--requests", "{csv}", "--out", "{tmp}/out", "--quiet", "--no-plots"]
WITH_TABLE = ["simulate", "--config", "{cfg}", "--predictions", "{preds}", "--out", "{tmp}/out", "--quiet"]
CONFIG = ["simulate", "--config", "{cfg}", "--out", "{tmp}/out", "--quiet"]

CASES: list[BadInput] = [
    BadInput("simulate-requests-non-numeric", REPLAY, _csv("reqs.csv", "0.0,10,20\n0.5,abc,30\n"),
             expect="first row 2 (line 3): 'abc' -- fix: give every request a numeric prompt_tokens"),
    BadInput("simulate-requests-fractional-tokens", REPLAY, _csv("reqs.csv", "0.0,10,20\n0.5,11,30.5\n"),
             expect="output_tokens is not a whole number of tokens in 1 row(s), first row 2 (line 3): 30.5 -- fix: token"),
    BadInput("simulate-requests-empty", REPLAY, _csv("reqs.csv", ""),
             expect="has a header but no requests -- fix: add one row per request"),
    BadInput("simulate-requests-empty-file", REPLAY, lambda tmp: {"csv": _touch(tmp / "reqs.csv")},
             expect="is empty -- fix: write a header"),
    BadInput("simulate-requests-negative-arrival", REPLAY, _csv("reqs.csv", "0.0,10,20\n0.5,11,30\n-1.0,12,40\n"),
             expect="first row 3 (line 4): -1.0 -- fix: arrival times are seconds >= 0"),
    BadInput("simulate-predictions-missing-sample", WITH_TABLE, _missing_sample,
             expect="no prediction for 10 of 50 samples (first: prompt 'b', sample 1) -- fix: predict on the same run"),
    BadInput("simulate-predictions-other-run", WITH_TABLE, _other_run,
             expect="were made for run card"),  # the hashes differ from run to run: not in the text
    BadInput("simulate-unknown-prediction-model", CONFIG, _unknown_model,
             expect="unknown prediction model 'crystal-ball' -- fix: use one of: additive, constant, input"),
    BadInput("simulate-table-model-without-path", CONFIG, _table_without_path,
             expect="prediction model 'table' needs a path -- fix: set prediction.path"),
]


def _touch(p: Path) -> Path:
    p.write_text("")
    return p


def _cfg_only(tmp: Path) -> dict[str, Path]:
    return {"cfg": _config(tmp, _run(tmp, "run", "toy"))}


CASES += [
    BadInput("simulate-n-requests-runs-away", [*CONFIG, "--n-requests", "1000000000000"], _cfg_only,
             expect="workload.n_requests 1,000,000,000,000 is above the limit of 10,000,000"),
    BadInput("simulate-loads-nan", [*CONFIG, "--loads", "nan"], _cfg_only,
             expect="--loads must be finite numbers, got nan"),
]


def _fcfs_aging(tmp: Path) -> dict[str, Path]:
    """A policy of fcfs with aging: fcfs orders by arrival, so the aging was accepted and silently ignored."""
    p = _config(tmp, _run(tmp, "run", "toy"))
    cfg = json.loads(p.read_text())
    cfg["policies"] = [{"name": "fcfs-aged", "queue": "fcfs", "aging": 50}]
    p.write_text(json.dumps(cfg))
    return {"cfg": p}


CASES += [  # issue 29 part 11: the last bad-input tail
    BadInput("simulate-aging-on-fcfs", CONFIG, _fcfs_aging, expect="policy 'fcfs' takes no aging (got 50"),
]


def _with(workload_arrival: dict | None = None, sweep: dict | None = None):  # a setup callable
    """The tiny config with its arrival process and/or sweep replaced."""

    def setup(tmp: Path) -> dict[str, Path]:
        p = _config(tmp, _run(tmp, "run", "toy"))
        cfg = json.loads(p.read_text())
        if workload_arrival is not None:
            cfg["workload"]["arrival"] = workload_arrival
        if sweep is not None:
            cfg["sweep"] = sweep
        p.write_text(json.dumps(cfg))
        return {"cfg": p}

    return setup


CASES += [  # issue 30: overload episodes and load units
    BadInput("simulate-episode-burst-below-base", CONFIG, _with({"process": "episode", "burst_factor": 0.5}),
             expect="burst_factor must be >= 1 (the burst rate over the base rate), got 0.5"),
    BadInput("simulate-episode-longer-than-run", CONFIG,
             _with({"process": "episode", "rate": 1.0, "burst_start_s": 60, "burst_s": 30, "tail_s": 300}),
             expect="the episode ends at 390 s (burst_start_s + burst_s + tail_s) but workload.n_requests 50"),
    BadInput("simulate-gamma-cv-zero", CONFIG, _with({"process": "gamma", "cv": 0}), expect="cv must be > 0"),
    BadInput("simulate-capacity-load-looks-like-req-s", CONFIG,
             _with(sweep={"loads": [0.9, 30], "load_unit": "capacity"}),
             expect="sweep.loads 30 is 30x the saturation throughput; capacity loads must lie in (0, 4]"),
]
