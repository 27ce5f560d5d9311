"""benchmarks/bench_transfer.py: the side-by-side table of two bench reports, by hand."""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_transfer as bt

SAMPLING = {"temperature": 1.0, "max_new_tokens": 1024}


def _report(folder, run, bound, maes, sampling=SAMPLING):
    rows = []
    for name, mae in maes.items():
        rows.append({"name": name, "subset": "all", "mae_over_bound": mae / bound,
                     "metrics": {"mae": mae, "coverage80": 0.8, "kendall_tau": 0.3}})
        rows.append({"name": name, "subset": "eos", "mae_over_bound": None, "metrics": {"mae": 1.0}})
    folder.mkdir()
    (folder / "bench.json").write_text(json.dumps({
        "protocol": {"run": run, "model_fingerprint": "sha256:x", "sampling": sampling},
        "bound": {"oracle_mae": bound, "n_prompts": 10, "n_samples": 40}, "rows": rows}))
    return folder


def test_known_answers(tmp_path, capsys):
    home = _report(tmp_path / "h", "a", 100.0, {"constant": 130.0, "ridge": 110.0, "mlp": 120.0})
    # the other prompts are easier: every MAE and the bound drop by 20%; ridge and mlp swap places
    other = _report(tmp_path / "t", "b", 80.0, {"constant": 104.0, "ridge": 97.6, "mlp": 92.0, "only-here": 1.0})
    res = bt.compare(json.loads((home / "bench.json").read_text()), json.loads((other / "bench.json").read_text()))
    assert [r["predictor"] for r in res["rows"]] == ["constant", "ridge", "mlp"]  # shared heads, 'all' rows only
    assert res["bound_change"] == pytest.approx(-0.2)
    ridge = res["rows"][1]
    assert ridge["transfer_mae_over_bound"] == pytest.approx(1.22) and ridge["home_mae_over_bound"] == pytest.approx(1.1)
    # MAE changes: -20%, -11.27%, -23.33%; MAE / bound: 0%, +10.9%, -4.17%
    assert res["summary"]["mae"]["mean_abs_rel_change"] == pytest.approx((0.2 + 0.112727 + 0.233333) / 3, rel=1e-4)
    assert res["summary"]["mae_over_bound"]["mean_abs_rel_change"] == pytest.approx((0 + 0.109091 + 0.041667) / 3,
                                                                                    rel=1e-4)
    # ranks 3,1,2 vs 3,2,1: d = 0,1,1 -> 1 - 6 * 2 / (3 * 8) = 0.5
    assert res["summary"]["rank_spearman"] == pytest.approx(0.5)
    assert bt.main(["--home", str(home), "--transfer", str(other), "--out", str(tmp_path / "o")]) == 0
    md = (tmp_path / "o" / "transfer.md").read_text()
    assert "| ridge | 110.0 | 1.100 | 97.6 | 1.220 | -11.3% | 10.9% |" in md
    assert (tmp_path / "o" / "transfer.png").stat().st_size > 1000


def test_refuses_another_card_and_non_reports(tmp_path):
    home = _report(tmp_path / "h", "a", 100.0, {"ridge": 110.0})
    other = _report(tmp_path / "t", "b", 80.0, {"ridge": 90.0}, sampling={**SAMPLING, "temperature": 0.7})
    with pytest.raises(SystemExit, match="differ in sampling"):
        bt.main(["--home", str(home), "--transfer", str(other), "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()
    (tmp_path / "x").mkdir()
    with pytest.raises(SystemExit, match="not found"):
        bt.main(["--home", str(home), "--transfer", str(tmp_path / "x")])
