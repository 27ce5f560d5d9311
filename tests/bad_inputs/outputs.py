"""Bad outputs of every writer (rows for tests/test_bad_input.py): the overwrite rule
(lenpred.io.artifacts.check_out) refuses, before any work, an output over another kind of artifact,
another run's output, a user's file, a path inside a run directory or inside the command's own
input; and output paths that cannot be written (read-only, under a file, a directory where a file
belongs) end in one line, not a traceback. Every file the setup made stays byte-identical.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bad_input_harness import BadInput, read_only, writable


# ---------------------------------------------------------------- small worlds
def _predict_world(tmp: Path) -> dict[str, Any]:
    from bad_inputs.predict import _world

    return _world(tmp)


def _bench_world(tmp: Path) -> dict[str, Any]:
    """A run with a split (bad_inputs.bench), a predictions table for it and a constant head."""
    import numpy as np

    from bad_inputs.bench import _preds
    from lenpred.predictors.registry import make_predictor

    p = _preds(tmp)
    make_predictor("constant").fit(np.zeros((3, 1)), np.array([1.0, 2.0, 3.0])).save(tmp / "head", card={})
    return {"run": tmp / "run", "p": p, "head": tmp / "head"}


def _features(path: Path, card: dict[str, Any]) -> Path:
    import numpy as np

    from lenpred.features.store import Features, save_features

    spec = {"layers": [2], "pools": ["last"], "dtype": "float16", "side_names": ["prompt_tokens"]}
    feats = Features(np.array(["a", "b"]), {"2.last": np.ones((2, 4), np.float32)}, np.ones((2, 1), np.float32),
                     ("prompt_tokens",), spec)
    save_features(path, feats, card)
    return path


def _with(setup: Any, **extra: Any) -> Any:
    """``setup`` plus named extras, each ``callable(tmp, values) -> path``."""

    def s(tmp: Path) -> dict[str, Any]:
        v = setup(tmp)
        for k, f in extra.items():
            v[k] = f(tmp, v)
        return v

    return s


def _file(name: str, text: str = "my own notes\n") -> Any:
    def make(tmp: Path, _: Any) -> Path:
        (tmp / name).write_text(text)
        return tmp / name

    return make


def _dir(name: str) -> Any:
    def make(tmp: Path, _: Any) -> Path:
        (tmp / name).mkdir()
        (tmp / name / "x.txt").write_text("x")
        return tmp / name

    return make


def _ro(tmp: Path, _: Any) -> Path:
    (tmp / "ro").mkdir()
    return read_only(tmp / "ro")


def _eval(tmp: Path) -> dict[str, Any]:
    """A synthetic run, its trajectory artifact and an outlets head trained on it."""
    from bad_inputs.outlets import _eval_run
    from lenpred.outlets.head import OutletsHead
    from lenpred.outlets.store import load_trajectory
    from outlets.eval_synth import CAP, CARD

    p = _eval_run(tmp)
    OutletsHead(epochs=2).fit(load_trajectory(p["traj"]), cap=CAP).save(tmp / "head", card=CARD)
    return {**p, "head": tmp / "head"}


def _features_two_runs(tmp: Path) -> dict[str, Any]:
    """Runs r1 and r2 of one tiny model, their prompts from two sources (two cards); features of r1 at {feats}."""
    import copy

    from bad_inputs.features import make_run, make_tiny_model, prompt_table, tiny_card
    from lenpred.data.rundir import RunDir

    model = make_tiny_model(tmp / "model")
    r1 = make_run(tmp / "r1", model)
    card = copy.deepcopy(tiny_card(model))
    card["prompts"]["source"] = "another-source"
    r2 = RunDir.create(tmp / "r2", card)
    r2.write_prompts(prompt_table(4, seed=1))
    return {"r1": r1, "r2": r2.path, "feats": _features(tmp / "feats", dict(RunDir.open(r1).card))}


def _two_runs_split(tmp: Path) -> dict[str, Any]:
    from bad_inputs.bench import _run
    from lenpred.data.rundir import RunDir

    a = _run(tmp)
    b = RunDir.create(tmp / "other", {**a.card, "sampling": {"max_new_tokens": 99}, "card_hash": None})
    return {"run": a.path, "other": b.path}


def _sim(tmp: Path) -> dict[str, Any]:
    from bad_inputs.sim import _config, _run

    return {"cfg": _config(tmp, _run(tmp, "run", "toy"))}


def _draft_head(tmp: Path) -> dict[str, Any]:
    from bad_inputs.draft import _head

    return {"src": _head(tmp / "src")}


def _draft_run(tmp: Path) -> dict[str, Any]:
    from bad_inputs.draft import _run_without_token_ids

    return _run_without_token_ids(tmp)


def _collect_ok(tmp: Path) -> dict[str, Any]:
    from bad_inputs.collect import _prompts

    return {"prompts": _prompts(tmp)}


def _collect_in_run(tmp: Path) -> dict[str, Any]:
    from bad_inputs.collect import _prompts, _run

    return {"prompts": _prompts(tmp), "run": _run(tmp)}


def _clean(tmp: Path) -> None:
    if (tmp / "ro").exists():
        writable(tmp / "ro")


def _ro_row(id_: str, argv: list[str], setup: Any, expect: str = "is read-only") -> BadInput:
    return BadInput(id_, argv, _with(setup, ro=_ro), expect=expect, cleanup=_clean)


PREDICT = ["predict", "--head", "{head}", "--run", "{a}", "--features", "{fa}"]
TRAIN = ["train", "--run", "{a}", "--features", "{fa}", "--predictor", "constant"]
BENCH = ["bench", "--run", "{run}", "--predictions", "{p}", "--n-boot", "20", "--no-plots"]
BOUND = ["bound", "{run}", "--n-boot", "20", "--n-normal-reference", "100", "--no-plots"]
SIM = ["simulate", "--config", "{cfg}", "--quiet", "--no-plots"]
OB = ["outlets", "bench", "--traj", "{traj}", "--run", "{run}", "--heads", "{head}", "--n-boot", "20", "--no-plots"]
OP = ["outlets", "predict", "--head", "{head}", "--traj", "{traj}", "--run", "{run}"]
GEN = ["generate", "--draft", "{src}", "--greedy", "--prompt", "hi"]
COLLECT = ["collect", "--source", "jsonl", "--prompts-file", "{prompts}", "--prompts", "1", "--samples", "1",
           "--max-new-tokens", "8", "--no-progress"]

CASES: list[BadInput] = [
    # ---- 1. no writer destroys data: another kind, another run, a user's file, a run's own files, an input
    BadInput("outlets-bench-out-is-its-trajectory", [*OB, "--out", "{traj}"], _eval,
             expect="is the command's own input --traj"),
    BadInput("train-out-is-its-features", [*TRAIN, "--out", "{fa}"], _predict_world,
             expect="is the command's own input --features"),
    BadInput("train-out-is-other-features", [*TRAIN, "--out", "{tmp}/s-features"], _predict_world,
             expect="holds a lenpred features artifact"),
    BadInput("bench-out-is-a-head", [*BENCH, "--out", "{head}"], _bench_world, expect="holds a lenpred head artifact"),
    BadInput("bound-out-is-a-head", [*BOUND, "--out", "{head}"], _bench_world, expect="holds a lenpred head artifact"),
    BadInput("draft-convert-out-is-a-head", ["draft", "convert", "{src}", "--out", "{head}"],
             _with(_draft_head, head=lambda t, v: _bench_world(t)["head"]), expect="holds a lenpred head artifact"),
    BadInput("draft-train-out-is-features", ["draft", "train", "--run", "{run}", "--out", "{feats}"],
             _with(_draft_run, feats=lambda t, v: _features(t / "feats", {"card_hash": "f" * 16})),
             expect="holds a lenpred features artifact"),
    BadInput("features-out-is-another-runs-features", ["features", "--run", "{r2}", "--out", "{feats}"],
             _features_two_runs, expect="holds a features made from another run"),
    BadInput("predict-out-is-the-runs-prompt-table", [*PREDICT, "--out", "{a}/prompts.parquet"], _predict_world,
             expect="is inside the command's own input --run"),
    BadInput("predict-out-inside-another-run", [*PREDICT, "--out", "{tmp}/s/prompts.parquet"], _predict_world,
             expect="is inside a lenpred run directory"),
    BadInput("predict-out-is-a-users-file", [*PREDICT, "--out", "{notes}"],
             _with(_predict_world, notes=_file("notes.txt")), expect="is a file that is not a lenpred file"),
    BadInput("predict-out-is-another-runs-predictions", [*PREDICT, "--out", "{p}"],
             _with(_predict_world, p=lambda t, v: _bench_world(t / "elsewhere")["p"]), expect="made from another run"),
    BadInput("split-out-is-another-runs-split", ["split", "{run}", "--out", "{other}/split.json", "--force"],
             _two_runs_split, expect="is inside a lenpred run directory"),
    BadInput("simulate-out-is-a-head", [*SIM, "--out", "{head}"], _with(_sim, head=lambda t, v: _bench_world(t / "elsewhere")["head"]),
             expect="holds a lenpred head artifact"),
    BadInput("outlets-predict-out-is-a-users-file", [*OP, "--out", "{notes}"], _with(_eval, notes=_file("notes.parquet")),
             expect="is a file that is not a lenpred file"),
    BadInput("outlets-train-out-is-its-trajectory", ["outlets", "train", "--traj", "{traj}", "--run", "{run}",
                                                     "--out", "{traj}"], _eval, expect="own input --traj"),
    BadInput("collect-run-inside-another-run", [*COLLECT, "--run", "{run}/nested"], _collect_in_run,
             expect="is inside a lenpred run directory"),
    BadInput("generate-events-is-a-users-file", [*GEN, "--events", "{notes}"], _with(_draft_head, notes=_file("notes.txt")),
             expect="is a file that is not a lenpred file"),
    # ---- 3. output paths that cannot be written: one line, before any work
    BadInput("split-out-is-a-directory", ["split", "{run}", "--out", "{d}"], _with(_two_runs_split, d=_dir("d")),
             expect="is a directory -- fix: pass a file path"),
    BadInput("split-out-under-a-file", ["split", "{run}", "--out", "{f}/split.json"],
             _with(_two_runs_split, f=_file("f")), expect="is a file -- fix: pass a path whose parent is a directory"),
    _ro_row("features-out-read-only", ["features", "--run", "{r1}", "--out", "{ro}/feats"], _features_two_runs),
    BadInput("train-out-under-a-file", [*TRAIN, "--out", "{f}/head"], _with(_predict_world, f=_file("f")),
             expect="cannot be created"),
    _ro_row("train-out-read-only", [*TRAIN, "--out", "{ro}/head"], _predict_world),
    BadInput("predict-out-is-a-directory", [*PREDICT, "--out", "{d}"], _with(_predict_world, d=_dir("d")),
             expect="is a directory -- fix: pass a file path"),
    _ro_row("predict-out-read-only", [*PREDICT, "--out", "{ro}/p.parquet"], _predict_world),
    BadInput("bench-out-under-a-file", [*BENCH, "--out", "{f}/o"], _with(_bench_world, f=_file("f")),
             expect="cannot be created"),
    _ro_row("bench-out-read-only", [*BENCH, "--out", "{ro}/o"], _bench_world),
    BadInput("bound-out-under-a-file", [*BOUND, "--out", "{f}/o"], _with(_bench_world, f=_file("f")),
             expect="cannot be created"),
    _ro_row("bound-out-read-only", [*BOUND, "--out", "{ro}/o"], _bench_world),
    BadInput("simulate-out-is-an-existing-file", [*SIM, "--out", "{f}"], _with(_sim, f=_file("f")),
             expect="exists and is a file"),
    _ro_row("simulate-out-read-only", [*SIM, "--out", "{ro}/o"], _sim),
    BadInput("draft-convert-out-under-a-file", ["draft", "convert", "{src}", "--out", "{f}/h"],
             _with(_draft_head, f=_file("f")), expect="cannot be created"),
    BadInput("outlets-predict-out-under-a-file", [*OP, "--out", "{f}/p.parquet"], _with(_eval, f=_file("f")),
             expect="cannot be created"),
    BadInput("collect-run-under-a-file", [*COLLECT, "--run", "{f}/run"], _with(_collect_ok, f=_file("f")),
             expect="cannot be created"),
    _ro_row("collect-run-read-only", [*COLLECT, "--run", "{ro}/run"], _collect_ok),
    BadInput("generate-events-is-a-directory", [*GEN, "--events", "{d}"], _with(_draft_head, d=_dir("d")),
             expect="is a directory -- fix: pass a file path"),
    BadInput("generate-events-under-a-file", [*GEN, "--events", "{f}/ev.jsonl"], _with(_draft_head, f=_file("f")),
             expect="cannot be created"),
    BadInput("simulate-fit-profile-out-is-a-users-file", ["simulate", "--fit-profile", "{csv}", "--out", "{notes}"],
             _with(lambda t: {}, csv=_file("t.csv", "kind,seconds,tokens,tokens_sq\nprefill,0.1,10,100\n"),
                   notes=_file("notes.json", json.dumps({"mine": 1}))),
             expect="is a file that is not a lenpred file"),
]
