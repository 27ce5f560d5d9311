"""benchmarks/bench_learning_curve.py on a synthetic run with a planted truth (constant + ridge: fast)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import bench_learning_curve as lc
from lenpred.bench import Bootstrap, evaluate
from lenpred.data.lengths import sample_lengths
from lenpred.data.split import load_split
from lenpred.errors import ConfigError, UnknownKeyError
from lenpred.predictors.synthetic import write_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return write_run(tmp_path_factory.mktemp("lc"), "lc", n_small=240, n_big=40)


@pytest.fixture(scope="module")
def curve(run, tmp_path_factory):
    out = tmp_path_factory.mktemp("lc-out")
    res = lc.learning_curve(lc.CurveConfig(str(run["run"]), str(run["features"]), out, sizes="20,80,all,5000",
                                           heads=["constant", "ridge"], n_boot=50), say=lambda m: None)
    paths = lc.write(res, out)
    return res, out, paths


def test_sizes_parsed_cut_and_sorted():
    assert lc.parse_sizes("all,400,1000", 300)[0] == [300]
    sizes, notes = lc.parse_sizes("1000,400,all", 500)
    assert sizes == [400, 500] and len(notes) == 1 and "1000 cut to 500" in notes[0]
    with pytest.raises(ConfigError, match="not a whole number"):
        lc.parse_sizes("400,many", 500)
    with pytest.raises(ConfigError, match="below 2"):
        lc.parse_sizes("1", 500)


def test_subsets_are_nested_seeded_and_stable_as_the_run_grows():
    ids = [f"p{i}" for i in range(50)]
    a = lc.curve_order(ids, 0)
    assert sorted(a) == sorted(ids) and a != sorted(ids)
    assert lc.curve_order(ids, 0) == a and lc.curve_order(ids, 1) != a
    grown = lc.curve_order(ids + [f"q{i}" for i in range(20)], 0)
    assert [p for p in grown if p in set(ids)] == a  # old prompts keep their relative order


def test_cells_train_on_the_subset_and_score_on_the_fixed_test_split(run, curve):
    res, out, _ = curve
    sp = load_split(run["run"], require_complete=False)
    n_all = len(sp.train)
    assert res["sizes"] == [20, 80, n_all] and any("5000 cut" in n for n in res["size_notes"])
    by = {(c["size"], c["head"]): c for c in res["cells"]}
    k = sample_lengths(run["run"], with_prompts=False).groupby("prompt_id").size()
    for n in res["sizes"]:
        s = load_split(run["run"], out / "work" / f"r0-n{n}" / "split.json", require_complete=False)
        assert len(s.train) == n and s.train <= sp.train and s.test == sp.test and s.val == sp.val
        assert by[(n, "constant")]["n_train_samples"] == int(k[sorted(s.train)].sum())
    small = load_split(run["run"], out / "work" / "r0-n20" / "split.json", require_complete=False)
    mid = load_split(run["run"], out / "work" / "r0-n80" / "split.json", require_complete=False)
    assert small.train <= mid.train  # nested
    # the bound is the bench's own on the same test prompts
    full = evaluate(run["run"], [], boot=Bootstrap(50))
    assert res["bound"]["oracle_mae"] == pytest.approx(full.bound.oracle_mae)
    assert res["prompt_median_oracle"]["mae"] == pytest.approx(full.row("prompt-median (oracle)").metrics.mae)
    # planted signal: ridge on every training prompt beats the constant, and beats ridge on 20 prompts
    assert by[(n_all, "ridge")]["mae_over_bound"] < by[(n_all, "constant")]["mae_over_bound"]
    assert by[(n_all, "ridge")]["mae_over_bound"] < by[(20, "ridge")]["mae_over_bound"]
    for c in res["cells"]:
        assert c["mae_over_bound"] == pytest.approx(c["mae"] / res["bound"]["oracle_mae"])


def test_outputs_written(curve):
    res, out, paths = curve
    assert {p.name for p in paths} == {"learning_curve.json", "learning_curve.md", "learning_curve.png"}
    assert json.loads((out / "learning_curve.json").read_text())["summary"] == res["summary"]
    md = (out / "learning_curve.md").read_text()
    assert "| training prompts | samples | constant | ridge |" in md
    header, rows = lc.table_rows(res)
    assert [r[0] for r in rows] == [str(n) for n in res["sizes"]]


def test_rerun_reuses_finished_cells(run, curve, monkeypatch):
    res, out, _ = curve
    import lenpred.predictors.pipeline as pipeline

    def boom(*a, **k):
        raise AssertionError("a finished cell was retrained")

    monkeypatch.setattr(pipeline, "train_on_run", boom)
    again = lc.learning_curve(lc.CurveConfig(str(run["run"]), str(run["features"]), out, sizes="20,80,all,5000",
                                             heads=["constant", "ridge"], n_boot=50), say=lambda m: None)
    assert [c["mae"] for c in again["cells"]] == [c["mae"] for c in res["cells"]]
    # another hyperparameter is another cell: it is trained
    with pytest.raises(AssertionError, match="retrained"):
        lc.learning_curve(lc.CurveConfig(str(run["run"]), str(run["features"]), out, sizes="20", heads=["ridge"],
                                         params={"ridge": {"log_target": True}}, n_boot=50), say=lambda m: None)


def test_repeats_give_a_spread(run, tmp_path):
    res = lc.learning_curve(lc.CurveConfig(str(run["run"]), str(run["features"]), tmp_path, sizes="20,all", heads=["ridge"],
                                           repeats=2, n_boot=20), say=lambda m: None)
    s = {x["size"]: x for x in res["summary"]}
    assert s[20]["n"] == 2 and s[20]["mae_over_bound_sd"] is not None and s[20]["mae_over_bound_sd"] > 0
    r0, r1 = (load_split(run["run"], tmp_path / "work" / f"r{r}-n20" / "split.json", require_complete=False).train
              for r in (0, 1))
    assert r0 != r1
    assert np.isfinite(s[20]["mae_over_bound"])


def test_bad_inputs(run, tmp_path, capsys):
    with pytest.raises(UnknownKeyError, match="ridge"):
        lc.learning_curve(lc.CurveConfig(str(run["run"]), str(run["features"]), tmp_path, heads=["nope"]), say=lambda m: None)
    with pytest.raises(ConfigError, match="HEAD.KEY=VALUE"):
        lc.parse_head_params(["hidden=3"], ["mlp"])
    assert lc.parse_head_params(["mlp.hidden=3"], ["mlp", "ridge"]) == {"mlp": {"hidden": 3}, "ridge": {}}
    assert lc.main(["--run", str(run["run"]), "--features", str(run["features"]), "--out", str(tmp_path / "o"),
                    "--sizes", "x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --sizes entry 'x'") and "Traceback" not in err
    assert not (tmp_path / "o" / "learning_curve.json").exists()
