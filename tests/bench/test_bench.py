"""The bench: hand-checkable metrics and bound on a tiny run, and the CLI end to end."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from lenpred.bench import BenchResult, Bootstrap, evaluate, point_metrics
from lenpred.data.rundir import RunDir
from lenpred.data.split import Split, SplitConfig, write_split
from lenpred.errors import DataError
from lenpred.predictions import Predictions

LENGTHS = {"t1": [10, 20, 30, 40, 50, 60, 70, 80], "t2": [100] * 7 + [1000], "tr": [5, 7]}


def _run(tmp_path) -> RunDir:
    card = {"model": {"id": "m", "fingerprint": "sha256:x"}, "prompts": {"source": "jsonl"},
            "sampling": {"max_new_tokens": 1000}, "engine": {"name": "fake"}}
    rd = RunDir.create(tmp_path / "run", card)
    ids = list(LENGTHS)
    rd.write_prompts(pd.DataFrame({"prompt_id": ids, "idx": range(3), "text": ids, "n_prompt_tokens": 4}))
    rd.append_samples([{"prompt_id": p, "sample_idx": k, "n_tokens": n, "stop_reason": "length" if n == 1000 else "eos"}
                       for p, v in LENGTHS.items() for k, n in enumerate(v)])
    split = Split(rd.card_hash, SplitConfig(), {"t1": "test", "t2": "test", "tr": "train"})
    write_split(split, rd)
    return rd


def _const(rd, value, **q):
    df = pd.DataFrame({"prompt_id": list(LENGTHS), "pred_tokens": float(value), **q})
    return Predictions.from_frame(df, made_by="constant", card=rd.card)


def test_bound_and_mae_by_hand(tmp_path):
    rd = _run(tmp_path)
    res = evaluate(rd, [_const(rd, 45)], boot=Bootstrap(50))
    # t1: median 45, in-sample MAE 20; leave-one-out medians 50 (low half) / 40 (high half): LOO MAE 25
    # t2: in-sample MAE = 900 / 8 = 112.5; LOO: the 7 equal ones see median 100 -> 0, the 1000 sees 100 -> 900/8
    t1 = math.sqrt(20 * 25)
    t2 = math.sqrt(112.5 * 112.5)
    assert res.bound.oracle_mae == pytest.approx((t1 + t2) / 2)
    assert res.bound.n_prompts == 2 and res.bound.n_samples == 16
    row = res.row("constant")
    # |x - 45| on t1: mean 20; on t2: (7 * 55 + 955) / 8 = 167.5; MAE = mean over prompts
    assert row.metrics.mae == pytest.approx((20 + 167.5) / 2)
    assert row.mae_over_bound == pytest.approx(row.metrics.mae / res.bound.oracle_mae)
    tr = res.row("constant", "truncated")  # the one sample cut at the cap
    assert tr.metrics.n_samples == 1 and tr.metrics.mae == pytest.approx(955)
    ref = res.row("prompt-median (oracle)")
    assert ref.metrics.mae == pytest.approx((25 + 112.5) / 2)  # the LOO end of the bracket
    assert res.protocol.samples_per_prompt == {"8": 2} and res.protocol.test_prompts == 2


def test_coverage_and_pinball(tmp_path):
    rd = _run(tmp_path)
    res = evaluate(rd, [_const(rd, 45, q10=15.0, q50=45.0, q90=95.0)], boot=Bootstrap(50))
    m = res.row("constant").metrics
    # inside [15, 95]: t1 has 20..80 -> 7 of 8; t2 has 7 of 8 (100 and 1000 are above 95) -> 0 of 8
    assert m.coverage80 == pytest.approx((7 / 8 + 0) / 2)
    assert m.pinball is not None and m.pinball > 0


def test_round_trip_and_refusals(tmp_path):
    rd = _run(tmp_path)
    res = evaluate(rd, [_const(rd, 45)], boot=Bootstrap(50))
    back = BenchResult.from_dict(json.loads(json.dumps(res.to_dict())))
    assert json.dumps(back.to_dict()) == json.dumps(res.to_dict())  # (== fails on NaN fields)
    other = Predictions.from_frame(pd.DataFrame({"prompt_id": ["t1"], "pred_tokens": [1.0]}), made_by="x", card=rd.card)
    with pytest.raises(DataError, match="no prediction for 8 of 16"):
        evaluate(rd, [other], boot=Bootstrap(50))
    with pytest.raises(DataError, match="must be unique"):
        evaluate(rd, [_const(rd, 1), _const(rd, 2)], boot=Bootstrap(50))


def test_point_metrics_perfect_and_kendall():
    y = np.array([1.0, 2.0, 3.0, 4.0])
    m = point_metrics(y, y, np.array(["a", "a", "b", "b"]), boot=Bootstrap(20))
    assert m.mae == 0 and m.r2 == 1 and m.kendall_tau == pytest.approx(1.0)
    m2 = point_metrics(y, y[::-1], np.array(["a", "a", "b", "b"]), boot=Bootstrap(20))
    assert m2.kendall_tau == pytest.approx(-1.0) and m2.r2 < 0


def test_cli_writes_report_artifact(tmp_path, capsys):
    from lenpred.cli import main
    from lenpred.io.artifacts import load_artifact

    rd = _run(tmp_path)
    _const(rd, 45, q10=15.0, q50=45.0, q90=95.0).write(tmp_path / "c.parquet")
    out = tmp_path / "bench"
    assert main(["bench", "--run", str(rd.path), "--predictions", f"const={tmp_path / 'c.parquet'}",
                 "--out", str(out), "--n-boot", "50"]) == 0
    art = load_artifact(out, kind="bench", card=rd.card)
    res = BenchResult.from_dict(art.read_json("bench.json"))
    assert res.row("const").metrics.mae == pytest.approx((20 + 167.5) / 2)
    md = (out / "bench.md").read_text()
    assert "| **oracle bound** |" in md and "| const | all |" in md
    assert (out / "bench_mae_vs_bound.png").stat().st_size > 0 and (out / "bench_coverage.png").is_file()


def test_short_label_precision_and_recall_by_hand() -> None:
    from lenpred.bench.scoring import short_label_metrics

    # rows at t: true totals t + remaining = 50, 90, 150, 300; threshold 100: truly short = rows 0, 1
    t = np.array([10.0, 40.0, 50.0, 100.0])
    remaining = np.array([40.0, 50.0, 100.0, 200.0])
    predicted = np.array([30.0, 80.0, 20.0, 250.0])  # totals 40 (short), 120 (long), 70 (short), 350 (long)
    prec, rec = short_label_metrics(remaining, predicted, t, 100.0)
    assert prec == 0.5 and rec == 0.5  # labelled short: rows 0 and 2, of which row 0 is; truly short 0, 1
    assert short_label_metrics(remaining, predicted + 1000, t, 100.0) == (None, 0.0)  # nothing labelled short
