"""The live bench: the live row scheme, its scoring by hand (per row and per sample), the t-only
baseline's known answer, the checks (missing live rows, strict series) and the CLI on a synthetic run."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lenpred.errors import ConfigError, DataError, LenpredError
from lenpred.outlets.baselines import Remaining
from lenpred.outlets.evaluate import MethodInput
from lenpred.outlets.features import TrajectoryConfig, live_positions, live_tokens, positions, rows_of
from lenpred.outlets.livebench import (
    LiveBench,
    LiveRequest,
    check_live_rows,
    check_strict,
    live_name,
    live_point_set,
    live_rows,
    score_live,
)
from lenpred.stats.bootstrap import Bootstrap
from outlets.eval_synth import parts, write_run


# ---------------------------------------------------------------- the row schemes
def test_live_positions_by_hand() -> None:
    assert live_tokens(1024) == [16, 32, 64, 128, 256, 512]
    assert positions(100, rows="live").tolist() == [0, 16, 32, 64]
    assert positions(16, rows="live").tolist() == [0]  # t = 16 needs L > 16: the request is met there only if running
    assert positions(17, rows="live").tolist() == [0, 16]
    assert positions(0, rows="live").tolist() == [0]
    # both = the fraction scheme (0, floor(f L), 32, 64, stride grid) and the live points
    assert positions(100, 64, rows="both").tolist() == [0, 10, 16, 25, 32, 50, 64, 75]
    assert positions(100, 64, rows="fraction").tolist() == [0, 10, 25, 32, 50, 64, 75]
    assert positions(70, rows="live", live_every=20).tolist() == [0, 16, 20, 32, 40, 60, 64]
    assert live_positions(70, 20) == [0, 16, 32, 64, 20, 40, 60]  # priority order: doubling first
    # max_positions thins the every-K grid, never the doubling points
    assert positions(300, rows="live", live_every=10, max_positions=10).tolist()[:1] == [0]
    kept = positions(300, rows="live", live_every=10, max_positions=10)
    assert {0, 16, 32, 64, 128, 256} <= set(kept.tolist()) and len(kept) == 10


def test_config_checks_and_spec_records_the_scheme() -> None:
    with pytest.raises(LenpredError, match=r"live_every\) needs live rows"):
        TrajectoryConfig(live_every=8)
    with pytest.raises(LenpredError, match="must be >= 11 with --rows both"):
        TrajectoryConfig(rows="both", max_positions=10)
    with pytest.raises(LenpredError):
        TrajectoryConfig(rows="sometimes")
    from lenpred.outlets.features import _positions_spec

    live = _positions_spec(TrajectoryConfig(rows="live", live_every=32))
    assert live["rows"] == "live" and live["live"]["first"] == 16 and live["live"]["every"] == 32 and "fractions" not in live
    frac = _positions_spec(TrajectoryConfig())
    assert frac["rows"] == "fraction" and frac["stride"] == 64 and "live" not in frac
    assert rows_of({"positions": live}) == "live" and rows_of({"positions": {"stride": 64}}) == "fraction"
    assert rows_of(None) == "fraction"  # a spec from before the schemes


# ---------------------------------------------------------------- scoring by hand
def _index() -> pd.DataFrame:
    rows = [("a", 0, t, 20) for t in (0, 2, 16)] + [("a", 1, t, 40) for t in (0, 5, 16, 32)] + [("b", 0, 0, 10),
                                                                                                ("b", 0, 5, 10)]
    df = pd.DataFrame(rows, columns=["prompt_id", "sample_idx", "t", "length"])
    return df.assign(remaining=df["length"] - df["t"], truncated=False)


def _method(name: str, family: str, q50: np.ndarray, width: float = 5.0, **extra) -> MethodInput:
    return MethodInput(name, family, "x", Remaining(q50 - width, q50, q50 + width), extra=extra)


def test_live_rows_are_t0_and_each_point_reached() -> None:
    idx = _index()
    assert live_rows(idx, [0, 16, 32]).tolist() == [0, 2, 3, 5, 6, 7]  # t = 2, 5 are not live points


def test_score_live_by_hand() -> None:
    idx = _index()
    const = np.full(len(idx), 10.0)
    perfect = idx["remaining"].to_numpy(float).copy()
    perfect[6] += 3.0  # one error: sample a1 at t = 32
    methods = [_method("outlets", "outlets", perfect, made_for="fraction"), _method("prefill-mlp", "prefill", const)]
    res = score_live(idx, methods, [0, 16, 32], reference=None, boot=Bootstrap(200, 0.95, 0), short_threshold=25.0,
                     protocol={"run": "r", "card_hash": "h", "trajectory": "T", "trajectory_rows": "both"})
    assert res.reference == "carried-mlp" and set(res.methods) == {"outlets", "carried-mlp"}
    assert (res.rows, res.n_samples, res.n_prompts, res.points) == (6, 3, 2, [0, 16, 32])
    mlp, out = res.methods["carried-mlp"], res.methods["outlets"]
    # live rows: a0 t=0 (20), 16 (4); a1 t=0 (40), 16 (24), 32 (8); b0 t=0 (10); |y - 10| = 10, 6, 30, 14, 2, 0
    assert mlp.mae == pytest.approx(62 / 6)
    assert mlp.per_sample.mae == pytest.approx((8 + 46 / 3 + 0) / 3)
    assert out.mae == pytest.approx(0.5) and out.ratio == pytest.approx(3 / 62)
    assert out.per_sample.mae == pytest.approx(1.0 / 3) and out.per_sample.ratio == pytest.approx(1.0 / (8 + 46 / 3))
    assert mlp.points["16"].mae == pytest.approx(10.0) and mlp.points["0"].mae == pytest.approx(40 / 3)
    assert out.points["32"].n_samples == 1 and out.points["32"].ratio == pytest.approx(3 / 2)
    # coverage: perfect within +-5 everywhere; the constant 10 +- 5 covers y = 8 and 10 only (rows a1@32, b0@0)
    assert out.points["0"].coverage80 == 1.0 and mlp.points["0"].coverage80 == pytest.approx(1 / 3)
    # "short" at t = 16 (L < 25 truly; 16 + q50 < 25 labelled): a0 is short (L 20); outlets labels it (16 + 4)
    assert (out.points["16"].short_precision, out.points["16"].short_recall) == (1.0, 1.0)
    assert (mlp.points["16"].short_precision, mlp.points["16"].short_recall) == (None, 0.0)  # 16 + 10 >= 25
    assert out.made_for == "fraction" and mlp.made_for == "prefill"
    # the JSON names the ratio after the reference, and reads back
    d = res.to_json_dict()
    assert d["methods"]["outlets"]["ratio_vs_carried_mlp"] == pytest.approx(3 / 62) and "ratio" not in d["methods"]["outlets"]
    assert d["series"] == "tokens" and d["n_samples"] == 3 and d["rows"] == 6
    assert LiveBench.from_json_dict(json.loads(json.dumps(d))) == res


def test_live_points_and_missing_rows_name_the_flag() -> None:
    spec = {"positions": {"rows": "fraction", "stride": 64}}
    assert live_point_set(LiveRequest(), spec, 1024, 0) == [0, 16, 32, 64, 128, 256, 512]
    assert live_point_set(LiveRequest(every=300), spec, 1024, 0) == [0, 300, 600, 900]
    assert live_point_set(LiveRequest(points=(64, 16)), spec, 1024, 0) == [0, 16, 64]
    live_every = {"positions": {"rows": "live", "live": {"first": 16, "every": 100}}}
    assert live_point_set(LiveRequest(), live_every, 300, 0) == [0, 16, 32, 64, 100, 128, 200, 256]
    idx = _index()
    check_live_rows(idx, [0, 16], spec, "T")  # every sample longer than 16 has its row there
    with pytest.raises(DataError, match=r"no row at t = 32 for 1 sample.*--rows fraction.*--rows live") as e:
        check_live_rows(idx.drop(index=6), [0, 16, 32], spec, "T")
    assert "--live-points" in str(e.value)
    with pytest.raises(ConfigError, match="pass one of them"):
        live_point_set(LiveRequest(points=(16,), every=8), spec, 1024, 0)


def test_strict_series_refuses_a_head_of_the_other_series() -> None:
    q = np.zeros(3)
    frac, live, both = (_method(n, "outlets", q, made_for=m) for n, m in
                        (("outlets", "fraction"), ("outlets-live", "live"), ("outlets-both", "both")))
    pre = _method("prefill-mlp", "prefill", q)
    check_strict([both, pre], "live")
    check_strict([frac, both, pre], "fraction")
    with pytest.raises(ConfigError, match=r"trained on fraction rows .* not on the live series .*--rows live"):
        check_strict([frac], "live")
    with pytest.raises(ConfigError, match="trained on live rows"):
        check_strict([live], "fraction")
    assert [live_name(n) for n in ("prefill-mlp", "oracle-prompt", "t-only", "outlets")] == [
        "carried-mlp", "carried-oracle", "t-only", "outlets"]


# ---------------------------------------------------------------- from files: t-only and the CLI
@pytest.fixture(scope="module")
def live_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("live-bench")
    data = parts(n_train=40, n_val=10, n_test=12, live=True)
    return root, data, write_run(root, data)


def test_t_only_is_the_median_remaining_of_training_samples_at_t(live_run) -> None:
    from lenpred.outlets.bench_files import BenchRequest, load_methods

    root, data, p = live_run
    ld = load_methods(BenchRequest(str(p["traj"]), str(p["run"]), boot=Bootstrap(20)))
    m = next(m for m in ld.methods if m.name == "t-only")
    t = ld.test.index["t"].to_numpy()
    train_l = data["train"]["lengths"]["n_tokens"].to_numpy(float)
    for tt in (0, 16, 64, 200):
        rows = np.flatnonzero(t == tt)
        if not rows.size:
            continue
        alive = train_l[train_l > tt] - tt  # every training sample still running at t: one row each
        want = np.median(alive) if tt > 0 else np.median(train_l)
        assert m.remaining.q50[rows] == pytest.approx(np.full(rows.size, want))


def test_cli_writes_the_live_json_and_labels_heads(live_run, tmp_path, capsys) -> None:
    from lenpred.cli import main
    from lenpred.data.rundir import RunDir
    from lenpred.predictions import Predictions

    root, data, p = live_run
    head = tmp_path / "outlets"
    assert main(["outlets", "train", "--traj", str(p["traj"]), "--run", str(p["run"]), "--param", "epochs=3",
                 "--out", str(head)]) == 0
    lat = pd.concat([data[r]["lengths"] for r in data]).groupby("prompt_id")["s"].first()
    mu = np.clip(140 * np.exp(0.5 * lat.to_numpy()), 20, 400)
    Predictions.from_frame(pd.DataFrame({"prompt_id": lat.index, "pred_tokens": mu, "q10": 0.5 * mu, "q50": mu,
                                         "q90": 1.5 * mu}), made_by="mlp",
                           card=RunDir.open(p["run"]).card).write(tmp_path / "pre.parquet")
    out = tmp_path / "bench"
    capsys.readouterr()
    assert main(["outlets", "bench", "--traj", str(p["traj"]), "--run", str(p["run"]), "--heads", str(head),
                 "--prefill-predictions", f"mlp={tmp_path / 'pre.parquet'}", "--n-boot", "50", "--no-plots",
                 "--out", str(out)]) == 0
    md = capsys.readouterr().out
    assert "## The live series: rows a server meets (headline)" in md and "uses the true length" in md
    d = json.loads((out / "outlets_live.json").read_text())
    assert d["series"] == "tokens" and d["reference"] == "carried-mlp" and d["trajectory_rows"] == "both"
    assert {"t-only", "carried-oracle", "carried-mlp", "outlets"} <= set(d["methods"])
    assert d["methods"]["carried-mlp"]["ratio_vs_carried_mlp"] == pytest.approx(1.0)
    assert d["methods"]["outlets"]["made_for"] == "both" and d["points"][:3] == [0, 16, 32]
    lo, hi = d["methods"]["t-only"]["ci"]
    assert lo <= d["methods"]["t-only"]["ratio_vs_carried_mlp"] <= hi
    assert d["n_samples"] == 96 and d["rows"] == sum(len(positions(int(n), rows="live")) for n in
                                                     data["test"]["lengths"]["n_tokens"])
    # --strict-series: the head was trained on rows holding both series, so it passes
    assert main(["outlets", "bench", "--traj", str(p["traj"]), "--run", str(p["run"]), "--heads", str(head),
                 "--n-boot", "20", "--no-plots", "--strict-series", "--out", str(tmp_path / "b2")]) == 0


def test_report_page_shows_the_live_series_first(live_run, tmp_path) -> None:
    """The report's OUTLETS section puts the live table and plots first when the bench has them."""
    from lenpred.io.artifacts import load_artifact
    from lenpred.outlets.bench_files import BenchRequest
    from lenpred.outlets.evaluate import OutletsBench
    from lenpred.outlets.pipeline import bench
    from lenpred.report.outlets import write_bench
    from lenpred.report.page.serving import outlets_section

    root, data, p = live_run
    out = tmp_path / "bench"
    from lenpred.data.rundir import RunDir
    from lenpred.predictions import Predictions

    ids = pd.concat([data[r]["lengths"] for r in data])["prompt_id"].unique()
    Predictions.from_frame(pd.DataFrame({"prompt_id": ids, "pred_tokens": 150.0, "q10": 60.0, "q50": 150.0,
                                         "q90": 300.0}), made_by="mlp",
                           card=RunDir.open(p["run"]).card).write(tmp_path / "pre.parquet")
    done = bench(BenchRequest(str(p["traj"]), str(p["run"]), prefill_predictions=(f"mlp={tmp_path / 'pre.parquet'}",),
                              boot=Bootstrap(20)), str(out))
    write_bench(done, out, plots=False)
    art = load_artifact(out, kind="outlets-bench")
    sec = outlets_section(art, OutletsBench.from_dict(art.read_json("outlets_bench.json")))
    assert sec.tables[0].title.startswith("Live series") and sec.figures[0].name == "outlets_mae_live.png"
    assert sorted(r[0] for r in sec.tables[0].rows) == ["carried-mlp", "carried-oracle", "t-only"]
