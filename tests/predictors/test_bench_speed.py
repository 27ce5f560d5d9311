"""benchmarks/bench_predictors.py (training time and latency) on tiny synthetic data, without the target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import bench_predictors as bp
from lenpred.data.lengths import sample_lengths
from lenpred.predictors.synthetic import write_run

ROOT = Path(__file__).resolve().parents[2]


def test_synthetic_heads_json(tmp_path, capsys):
    out = tmp_path / "speed.json"
    assert bp.main(["--n-train", "60", "--width", "8", "--heads", "constant,ridge", "--reps", "5", "--no-target",
                    "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert [r["head"] for r in d["heads"]] == ["constant", "ridge"]
    for r in d["heads"]:
        assert r["n_train"] == 60 and r["batch"] == 64 and r["train_s"] >= 0
        assert 0 < r["batch64_us"] < float("inf") and 0 < r["batch1_us"] < float("inf")  # measured, no band: speed varies
    assert d["decode_step_us"] == {} and d["data"] == "synthetic" and d["machine"]["cpus"] >= 1
    assert len(d["machine"]["load_average"]) == 3 and "load_average_end" in d["machine"]
    assert "constant" in capsys.readouterr().out


def test_typical_context_is_mid_answer(tmp_path):
    r = write_run(tmp_path, "ctx", n_small=20, n_big=4, with_features=False)
    s = sample_lengths(r["run"])
    want = float((s["n_prompt_tokens"] + s["n_tokens"] / 2).median())
    assert bp.typical_context(str(r["run"])) == round(want)
    assert bp.typical_context(None) == 300


def test_bad_target_engine_is_refused(capsys):
    with pytest.raises(SystemExit):
        bp.main(["--n-train", "10", "--heads", "constant", "--target", "vllm"])
    assert "unknown --target engine" in capsys.readouterr().err
