"""Bad inputs of `lenpred train` / `lenpred predict` (rows for tests/test_bad_input.py).

A template world is built once per session (synthetic runs from lenpred.predictors.synthetic and a
ridge head trained on run "a") and copied into each case's tmp_path, so every row starts from the
same known-good files and breaks one thing.
"""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bad_input_harness import BadInput

_TEMPLATE: Path | None = None


def _template() -> Path:
    global _TEMPLATE
    if _TEMPLATE is None:
        from lenpred.predictors.pipeline import train_on_run
        from lenpred.predictors.synthetic import CARD, SPEC, write_run

        root = Path(tempfile.mkdtemp(prefix="lenpred-bad-predict-"))
        small = {"n_small": 40, "n_big": 16}
        write_run(root, "a", **small)
        other_model = copy.deepcopy(CARD)
        other_model["model"]["fingerprint"] = "sha256:another-model"
        write_run(root, "m", card=other_model, **small)
        other_sampling = copy.deepcopy(CARD)
        other_sampling["sampling"]["temperature"] = 0.7
        write_run(root, "s", card=other_sampling, **small)
        other_prompts = copy.deepcopy(CARD)
        other_prompts["prompts"]["source"] = "synthetic-b"
        write_run(root, "b", card=other_prompts, **small)
        # run a's prompts again, features computed under another spec (other layers)
        write_run(root, "a2", spec=dict(SPEC, layers=[8, 16, 30]), **small)
        train_on_run("ridge", {}, root / "a", root / "a-features", root / "head")
        _TEMPLATE = root
    return _TEMPLATE


def _world(tmp: Path) -> dict[str, Any]:
    for p in _template().iterdir():
        shutil.copytree(p, tmp / p.name)
    return {"a": tmp / "a", "fa": tmp / "a-features", "head": tmp / "head", "out": tmp / "preds.parquet"}


def _other_spec(tmp: Path) -> dict[str, Any]:
    """Features of run a computed under another feature spec (layers 8, 16, 30)."""
    w = _world(tmp)
    from lenpred.data.rundir import RunDir
    from lenpred.features.store import load_features, save_features

    f = load_features(tmp / "a2-features")
    shutil.rmtree(tmp / "a2-features")
    save_features(tmp / "a2-features", f, RunDir.open(w["a"]).card)
    return w | {"feats": tmp / "a2-features"}


def _edit_features(tmp: Path, how: str) -> dict[str, Any]:
    w = _world(tmp)
    from lenpred.data.rundir import RunDir
    from lenpred.features.store import load_features, save_features

    f = load_features(w["fa"])
    if how == "nan":
        f.blocks["30.last"][3, 1] = np.nan
    else:  # narrower blocks, same spec
        f.blocks = {k: v[:, :8] for k, v in f.blocks.items()}
    dest = tmp / f"a-features-{how}"
    save_features(dest, f, RunDir.open(w["a"]).card)
    return w | {"feats": dest}


def _head_schema(tmp: Path) -> dict[str, Any]:
    w = _world(tmp)
    meta = json.loads((w["head"] / "meta.json").read_text())
    meta["schema_version"] = 99
    (w["head"] / "meta.json").write_text(json.dumps(meta))
    return w


def _split_of_other_run(tmp: Path) -> dict[str, Any]:
    w = _world(tmp)
    return w | {"split": tmp / "b" / "split.json"}


def _w(tmp: Path) -> dict[str, Any]:
    return _world(tmp)


PREDICT = ["predict", "--head", "{head}", "--out", "{out}"]

CASES: list[BadInput] = [
    BadInput("predict-features-other-model",
             PREDICT + ["--run", "{tmp}/m", "--features", "{tmp}/m-features"], _w, expect="model.fingerprint"),
    BadInput("predict-features-other-sampling",  # run a (the head's), but features of another sampling card
             PREDICT + ["--run", "{a}", "--features", "{tmp}/s-features"], _w, expect="another card than this run (card_hash"),
    BadInput("predict-run-other-sampling",
             PREDICT + ["--run", "{tmp}/s", "--features", "{tmp}/s-features"], _w, expect="sampling.temperature"),
    BadInput("predict-features-other-spec",
             PREDICT + ["--run", "{a}", "--features", "{feats}"], _other_spec, expect="another feature spec"),
    BadInput("predict-head-other-kind",
             ["predict", "--head", "{fa}", "--run", "{a}", "--features", "{fa}", "--out", "{out}"], _w,
             expect="is a features artifact, expected head"),
    BadInput("predict-head-other-version", PREDICT + ["--run", "{a}", "--features", "{fa}"], _head_schema,
             expect="schema version 99"),
    BadInput("predict-nan-features", PREDICT + ["--run", "{a}", "--features", "{feats}"],
             lambda t: _edit_features(t, "nan"), expect="NaN"),
    BadInput("predict-wrong-width-features", PREDICT + ["--run", "{a}", "--features", "{feats}"],
             lambda t: _edit_features(t, "narrow"), expect="has width 8"),
    BadInput("predict-needs-features", PREDICT + ["--run", "{a}"], _w, expect="pass --features"),
    BadInput("train-unknown-predictor",
             ["train", "--run", "{a}", "--features", "{fa}", "--predictor", "nope", "--out", "{tmp}/h"], _w,
             expect="unknown predictor 'nope' -- fix: use one of: constant, egtp, film, gbdt, mlp, moe, ngram"),
    BadInput("train-unknown-param",
             ["train", "--run", "{a}", "--features", "{fa}", "--predictor", "mlp", "--param", "hiden=3",
              "--out", "{tmp}/h"], _w, expect="no hyperparameter(s) hiden"),
    BadInput("train-bad-param-value",
             ["train", "--run", "{a}", "--features", "{fa}", "--predictor", "mlp", "--param", "dropout=1.5",
              "--out", "{tmp}/h"], _w, expect="dropout must be in [0, 1)"),
    BadInput("train-test-prompts",
             ["train", "--run", "{a}", "--features", "{fa}", "--predictor", "constant", "--roles", "train,test",
              "--out", "{tmp}/h"], _w, expect="test prompt"),
    BadInput("train-split-of-other-run",
             ["train", "--run", "{a}", "--features", "{fa}", "--predictor", "constant", "--split", "{split}",
              "--out", "{tmp}/h"], _split_of_other_run, expect="was made for run card"),
    BadInput("train-features-of-other-run",
             ["train", "--run", "{a}", "--features", "{tmp}/b-features", "--predictor", "ridge", "--out", "{tmp}/h"],
             _w, expect="another card"),
]


# ---------------------------------------------------------------- issue 20
def _head_schema_string(tmp: Path) -> dict[str, Any]:
    w = _world(tmp)
    meta = json.loads((w["head"] / "meta.json").read_text())
    meta["schema_version"] = "1"
    (w["head"] / "meta.json").write_text(json.dumps(meta))
    return w


CASES += [
    BadInput("predict-roles-names-none", PREDICT + ["--run", "{a}", "--features", "{fa}", "--roles", ","], _w,
             expect="--roles ',' names no split role"),
    BadInput("predict-head-schema-version-a-string", PREDICT + ["--run", "{a}", "--features", "{fa}"],
             _head_schema_string, expect="schema_version is '1', a JSON str, not an integer"),
    BadInput("train-param-of-the-wrong-type",
             ["train", "--run", "{a}", "--features", "{fa}", "--predictor", "ridge", "--param", "alphas=abc",
              "--out", "{tmp}/h"], _w, expect="--param: a value of the wrong type for the ridge head"),
    BadInput("split-pydantic-bound-names-the-fix", ["split", "{a}", "--test-share", "2"], _w,
             expect="test_share: Input should be less than or equal to 1, got 2.0 -- fix: set test_share to a value <= 1"),
]


def _split_is_a_dir(tmp: Path) -> dict[str, Any]:
    """RUN/split.json is a directory (a user's mkdir): split was passed no --out, so --out is not to blame."""
    w = _w(tmp)
    (tmp / "a" / "split.json").unlink(missing_ok=True)
    (tmp / "a" / "split.json").mkdir()
    return w


CASES += [  # issue 29 part 11: the last bad-input tail
    BadInput("predict-out-not-parquet",
             ["predict", "--head", "{head}", "--run", "{a}", "--features", "{fa}", "--out", "{tmp}/p.csv"], _w,
             expect="--out p.csv does not end in .parquet"),
    BadInput("split-default-file-is-a-directory", ["split", "{a}"], _split_is_a_dir,
             expect="split.json is a directory, where the run's split file belongs -- fix: move that directory"),
]
