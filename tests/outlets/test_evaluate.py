"""The bench along the trajectory (points, paired ratios, JSON schema, CLI) and the scheduling experiment."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lenpred.errors import ConfigError
from lenpred.outlets.baselines import Remaining
from lenpred.outlets.evaluate import (
    Bootstrap,
    MethodInput,
    OutletsBench,
    PointSpec,
    _beats,
    default_points,
    point_rows,
    score_methods,
)
from outlets.eval_synth import parts, write_run

# the synthetic trajectory has the fraction scheme's rows (t = 0, 32 ... 512, fractions, a 48 grid): it holds the
# live points from 32 on but not t = 16, so the CLI benches name the live points it has
LIVE_HELD = "32,64,128,256,512"

# ---------------------------------------------------------------- points and scoring, by hand
def _index(rows: list[tuple[str, int, int, int]]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["prompt_id", "sample_idx", "t", "length"])
    return df.assign(remaining=df["length"] - df["t"], truncated=False)


def test_point_rows_exact_nearest_and_tokens():
    idx = _index([("a", 0, 0, 100), ("a", 0, 10, 100), ("a", 0, 32, 100), ("a", 0, 50, 100),
                  ("a", 1, 0, 40), ("a", 1, 5, 40), ("a", 1, 20, 40),  # f10 of L=40 is t=4: nearest row t=5
                  ("b", 0, 0, 0)])  # an empty response: only its t = 0 row
    rows, inexact, off = point_rows(idx, PointSpec("f10", "fraction", 0.1, "10%"))
    assert rows.tolist() == [1, 5] and inexact == 1 and off == 1.0
    rows, *_ = point_rows(idx, PointSpec("f50", "fraction", 0.5, "50%"))
    assert rows.tolist() == [3, 6]
    assert point_rows(idx, PointSpec("t32", "tokens", 32, "32 tok"))[0].tolist() == [2]
    assert point_rows(idx, PointSpec("t0", "start", 0, "t=0"))[0].tolist() == [0, 4, 7]


def test_beats_oracle_from():
    assert _beats([1.2, 0.9, 0.8]) == 1
    assert _beats([0.9, 1.1, 0.8]) == 2  # below the oracle from there on, not merely somewhere
    assert _beats([1.1, 1.2]) is None
    assert _beats([0.5, None, 0.5]) == 2


def _rem(q50) -> Remaining:
    q = np.asarray(q50, dtype=float)
    return Remaining(q - 1, q, q + 1)


def test_score_methods_by_hand():
    # prompt a: 2 samples, prompt b: 1 sample; rows at t = 0 only
    idx = _index([("a", 0, 0, 10), ("a", 1, 0, 30), ("b", 0, 0, 100)])
    exact = MethodInput("outlets", "outlets", "x", _rem([10, 30, 100]))
    off = MethodInput("prefill-x", "prefill", "x", _rem([20, 20, 80]))  # errors 10, 10 | 20
    worse = MethodInput("prefill-y", "prefill", "x", _rem([0, 0, 0]))
    oracle = MethodInput("oracle-prompt", "oracle", "x", _rem([15, 25, 90]))  # errors 5, 5 | 10
    pts = [PointSpec("t0", "start", 0, "t=0")]
    infos, res, ref = score_methods(idx, [exact, off, worse, oracle], points=pts, boot=Bootstrap(n_boot=50))
    assert ref == "prefill-x"  # the lower t = 0 MAE of the two prefill tables
    by = {r.name: r for r in res}
    assert by["prefill-x"].points["t0"].mae == pytest.approx((10 + 20) / 2)  # per prompt, then prompts
    assert by["oracle-prompt"].points["t0"].mae == pytest.approx(7.5)
    assert by["prefill-x"].points["t0"].ratio_vs_oracle == pytest.approx(2.0)
    assert by["outlets"].points["t0"].mae == 0 and by["outlets"].beats_oracle_from == {"progress": "t0", "tokens": "t0"}
    assert by["outlets"].points["t0"].coverage80 == 1.0
    assert by["prefill-x"].beats_oracle_from["progress"] is None
    assert infos[0].n_prompts == 2 and infos[0].n_samples == 3
    # the label "short" (threshold: the median length, 30): truly short = sample a/0 (10 tokens)
    assert by["outlets"].points["t0"].short_precision == 1.0 and by["outlets"].points["t0"].short_recall == 1.0
    assert by["prefill-x"].points["t0"].short_precision == 0.5 and by["prefill-x"].points["t0"].short_recall == 1.0
    assert by["prefill-y"].points["t0"].short_precision == pytest.approx(1 / 3)  # all three labelled short
    assert by["outlets"].points["t0"].kendall_tau == pytest.approx(1.0)
    assert by["prefill-y"].points["t0"].kendall_tau is None  # a constant prediction ranks nothing
    with pytest.raises(ConfigError, match="reference 'nope' is not a method"):
        score_methods(idx, [exact, off], points=pts, boot=Bootstrap(n_boot=50), reference="nope")
    with pytest.raises(ConfigError, match="unique"):
        score_methods(idx, [exact, exact], points=pts, boot=Bootstrap(n_boot=50))


# ---------------------------------------------------------------- the whole bench through the CLI
@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    from lenpred.cli import main
    from lenpred.data.rundir import RunDir
    from lenpred.predictions import Predictions

    root = tmp_path_factory.mktemp("outlets-bench")
    data = parts(n_train=120, n_val=30, n_test=30)
    p = write_run(root, data)
    for v in ("outlets", "probe"):
        assert main(["outlets", "train", "--traj", str(p["traj"]), "--run", str(p["run"]), "--variant", v,
                     "--param", "epochs=25", "--out", str(root / v)]) == 0
    # a prefill table that knows each prompt's mean length (its latent): a near-oracle prefill head
    lat = pd.concat([data[r]["lengths"] for r in data]).groupby("prompt_id")["s"].first()
    mu = np.clip(140 * np.exp(0.5 * lat.to_numpy()), 20, 400)
    sd = 0.3 * mu + 10
    from lenpred.stats.quantiles import Z90

    frame = pd.DataFrame({"prompt_id": lat.index, "pred_tokens": mu, "q10": np.maximum(mu - Z90 * sd, 0),
                          "q50": mu, "q90": mu + Z90 * sd})
    Predictions.from_frame(frame, made_by="mlp", card=RunDir.open(p["run"]).card).write(root / "pre.parquet")
    out = root / "report"
    assert main(["outlets", "bench", "--traj", str(p["traj"]), "--run", str(p["run"]), "--heads", str(root / "outlets"),
                 str(root / "probe"), "--prefill-predictions", f"mlp={root / 'pre.parquet'}", "--n-boot", "100",
                 "--live-points", LIVE_HELD, "--out", str(out)]) == 0
    return {"root": root, "paths": p, "out": out, "data": data,
            "json": json.loads((out / "outlets_bench.json").read_text())}


def test_bench_writes_the_report(bench):
    names = sorted(x.name for x in bench["out"].iterdir())
    assert names == ["meta.json", "outlets_bench.json", "outlets_bench.md", "outlets_bench.schema.json",
                     "outlets_coverage.png", "outlets_coverage_live.png", "outlets_live.json", "outlets_mae_live.png",
                     "outlets_mae_progress.png", "outlets_mae_tokens.png"]
    md = (bench["out"] / "outlets_bench.md").read_text()
    assert "## Remaining-length MAE by progress" in md and "| oracle-prompt |" in md


def test_bench_json_follows_its_schema(bench):
    d = bench["json"]
    res = OutletsBench.from_dict(d)  # strict: unknown or missing keys are errors
    assert d["format"] == "lenpred.outlets.bench" and d["schema_version"] == 1
    assert json.loads((bench["out"] / "outlets_bench.schema.json").read_text()) == OutletsBench.json_schema()
    ids = [p["id"] for p in d["points"]]
    assert ids == [p.id for p in default_points()][: len(ids)] and ids[:5] == ["t0", "f10", "f25", "f50", "f75"]
    assert d["series"]["progress"] == ["t0", "f10", "f25", "f50", "f75"]
    assert res.names() == ["outlets", "probe", "prefill-mlp", "prefill-constant", "t-only", "oracle-prompt"]
    assert [m.family for m in res.methods] == ["outlets", "probe", "prefill", "prefill", "baseline", "oracle"]
    assert [m.made_for for m in res.methods] == ["fraction", "fraction", None, None, None, None]
    for m in d["methods"]:
        assert set(m["points"]) == set(ids)
        for s in m["points"].values():
            assert s["mae"] is not None and len(s["mae_ci"]) == 2 and s["mae_ci"][0] <= s["mae"] <= s["mae_ci"][1]
    broken = json.loads(json.dumps(d))
    del broken["methods"][0]["points"]["t0"]["mae"]
    with pytest.raises(ConfigError, match=r"methods\[0\]\.points\.t0\.mae"):
        OutletsBench.from_dict(broken)
    broken = {**d, "extra": 1}
    with pytest.raises(ConfigError, match="unknown key"):
        OutletsBench.from_dict(broken)


def test_bench_known_answers(bench):
    res = OutletsBench.from_dict(bench["json"])
    assert res.protocol.reference == "prefill-mlp"
    oracle, outlets = res.method("oracle-prompt"), res.method("outlets")
    # at t = 0 the carried oracle is the leave-one-out prompt median: its MAE is the bound's LOO end
    assert oracle.points["t0"].mae == pytest.approx(res.total_t0.bound.oracle_mae_loo, rel=1e-9)
    # the planted draft state knows the remaining length: far below the carried prefill head and the oracle
    assert outlets.ratio_progress_vs_reference < 0.25 and outlets.ratio_progress_vs_reference_ci[1] < 0.75
    assert outlets.beats_oracle_from == {"progress": "t0", "tokens": "t0"}
    # a near-oracle prefill head: about the bound at t = 0, never far below the carried oracle
    tot = {r.name: r for r in res.total_t0.rows}
    assert 0.9 < tot["prefill-mlp"].mae_over_bound < 1.15
    assert tot["prefill-mlp"].mae_point == pytest.approx(tot["prefill-mlp"].mae, abs=1e-6)  # q50 == pred_tokens
    assert res.method("prefill-constant").points["t0"].ratio_vs_reference > 1.3
    assert res.protocol.test_prompts == 30 and res.protocol.test_samples == 240


def test_train_reads_only_train_rows(bench):
    from lenpred.predictors.io import read_head

    head, art = read_head(bench["root"] / "outlets")
    tr = bench["data"]["train"]
    assert head.n_train_ == tr["lengths"]["prompt_id"].nunique() and head.n_rows_ == tr["traj"].n
    meta = art.meta["train"]
    assert meta["variant"] == "outlets" and meta["val_prompts"] == 30 and meta["val_mae"] < 10
    assert art.meta["feature_spec"]["draft"]["sha256"] == "d" * 64  # the trajectory spec it was fitted on


# ---------------------------------------------------------------- part 6: re-predictions and the simulator
def test_outlets_predictions_carry_repredictions(bench):
    from lenpred.outlets.pipeline import predict_table
    from lenpred.outlets.store import load_trajectory
    from lenpred.predictors.io import load_head

    p = bench["paths"]
    preds = predict_table(str(bench["root"] / "outlets"), str(p["traj"]), str(p["run"]))
    te = load_trajectory(p["traj"]).for_prompts(bench["data"]["test"]["lengths"]["prompt_id"].unique())
    head = load_head(bench["root"] / "outlets")
    f = preds.frame.set_index(["prompt_id", "sample_idx"])
    assert len(f) == 240 and preds.has_repredictions and preds.made_by == "outlets"
    point = head.predict(te)
    for i in (0, 17, 101):
        key = (te.index["prompt_id"].iloc[i], int(te.index["sample_idx"].iloc[i]))
        rows = np.flatnonzero((te.index["prompt_id"] == key[0]).to_numpy() & (te.index["sample_idx"] == key[1]).to_numpy())
        t = te.index["t"].to_numpy()[rows]
        assert f.loc[key, "pred_tokens"] == pytest.approx(point[rows[t == 0][0]])
        assert list(f.loc[key, "repred_gen"]) == sorted(t[t > 0].tolist())
        np.testing.assert_allclose(f.loc[key, "repred_remaining"], point[rows[t > 0]])
        # each re-prediction carries the head's own 80% interval, widened only to hold the point
        lo, hi = np.asarray(f.loc[key, "repred_q10"]), np.asarray(f.loc[key, "repred_q90"])
        assert len(lo) == len(hi) == int((t > 0).sum())
        assert np.all(lo <= np.asarray(f.loc[key, "repred_remaining"]) + 1e-9)
        assert np.all(hi >= np.asarray(f.loc[key, "repred_remaining"]) - 1e-9)
    d = head.predict_dist(te)
    later = te.index["t"].to_numpy() > 0
    got_hi = np.concatenate([np.asarray(v, float) for v in f["repred_q90"]])
    assert got_hi.size == int(later.sum())
    assert np.sort(got_hi) == pytest.approx(np.sort(np.maximum(d.q90, point)[later]))


def test_anchored_predictions_table_blends_the_head_with_the_prefill_table(bench, tmp_path, capsys):
    """`outlets predict --head ANCHOR --prefill-predictions`: the anchor's blend per row (equal to what the
    bench scores), with re-prediction quantiles; without the prefill table, or with it beside a plain head,
    a clear refusal and no file."""
    from lenpred.cli import main
    from lenpred.outlets.anchor import load_anchor
    from lenpred.outlets.baselines import carry_prefill
    from lenpred.outlets.bench_files import anchored_method
    from lenpred.outlets.evaluate import MethodInput
    from lenpred.outlets.store import load_trajectory
    from lenpred.predictions import read_predictions

    root, p = bench["root"], bench["paths"]
    anc = tmp_path / "anchor"
    assert main(["outlets", "anchor", "--traj", str(p["traj"]), "--run", str(p["run"]), "--head", str(root / "outlets"),
                 "--prefill-predictions", f"mlp={root / 'pre.parquet'}", "--out", str(anc)]) == 0
    out = tmp_path / "anchored.parquet"
    assert main(["outlets", "predict", "--head", str(anc), "--traj", str(p["traj"]), "--run", str(p["run"]),
                 "--prefill-predictions", f"mlp={root / 'pre.parquet'}", "--out", str(out)]) == 0
    f = read_predictions(out).frame.set_index(["prompt_id", "sample_idx"])
    te = load_trajectory(p["traj"]).for_prompts(bench["data"]["test"]["lengths"]["prompt_id"].unique())
    pre = MethodInput("prefill-mlp", "prefill", "x", carry_prefill(read_predictions(root / "pre.parquet"), te.index, None))
    want = anchored_method(None, str(anc), [pre], te, None).remaining
    assert len(f) == 240
    idx, t = te.index, te.index["t"].to_numpy()
    for i in np.flatnonzero(t == 0)[:5]:
        key = (idx["prompt_id"].iloc[i], int(idx["sample_idx"].iloc[i]))
        rows = np.flatnonzero((idx["prompt_id"] == key[0]).to_numpy() & (idx["sample_idx"] == key[1]).to_numpy())
        later = rows[np.argsort(t[rows])][1:]
        assert f.loc[key, "pred_tokens"] == pytest.approx(want.q50[i])
        assert (f.loc[key, "q10"], f.loc[key, "q90"]) == (pytest.approx(want.q10[i]), pytest.approx(want.q90[i]))
        np.testing.assert_allclose(f.loc[key, "repred_remaining"], want.q50[later])
        np.testing.assert_allclose(f.loc[key, "repred_q10"], np.minimum(want.q10[later], want.q50[later]))
        np.testing.assert_allclose(f.loc[key, "repred_q90"], np.maximum(want.q90[later], want.q50[later]))
    # the anchor's weights on the head are not all zero, so the table is not the prefill table carried
    assert any(w > 0 for w in load_anchor(str(anc)).weights)
    capsys.readouterr()
    bad = tmp_path / "bad.parquet"
    assert main(["outlets", "predict", "--head", str(anc), "--traj", str(p["traj"]), "--run", str(p["run"]),
                 "--out", str(bad)]) == 1
    assert "--prefill-predictions mlp=FILE" in capsys.readouterr().err and not bad.exists()
    assert main(["outlets", "predict", "--head", str(root / "outlets"), "--traj", str(p["traj"]), "--run", str(p["run"]),
                 "--prefill-predictions", f"mlp={root / 'pre.parquet'}", "--out", str(bad)]) == 1
    assert "neither" in capsys.readouterr().err and not bad.exists()


def _tiny_config(path: str) -> dict:
    cfg = json.loads(open(path).read())
    cfg["cluster"].update({"n_prefill": 1, "n_decode": 2, "max_batch": 16})
    cfg["workload"]["n_requests"] = 300
    cfg["sweep"].update({"loads": [1.0], "probe_requests": 200})
    cfg["plots"] = False
    return cfg


def test_schedule_experiment_runs_on_test_samples(bench):
    from lenpred.outlets.pipeline import predict_table
    from lenpred.outlets.schedule import ScheduleRequest, run_schedule, sample_workload
    from lenpred.report.outlets import write_schedule
    from lenpred.sim.config import SimConfig

    root, p = bench["root"], bench["paths"]
    table = predict_table(str(root / "outlets"), str(p["traj"]), str(p["run"])).write(root / "op.parquet")
    cfg = _tiny_config("experiments/outlets/schedule.json")
    res = run_schedule(ScheduleRequest(p["run"], root / "pre.parquet", root / "sched", config=cfg,
                                       outlets_predictions=table))
    assert not (root / "sched" / "schedule.md").exists()  # outlets returns data; the report writes the table
    md = write_schedule(res, root / "sched")
    rows = json.loads((root / "sched" / "schedule.json").read_text())
    assert [r["arm"] for r in rows] == ["fcfs+rr", "prefill sjf+lpt", "outlets srpt+lpt", "prompt-median sjf+lpt",
                                        "true srpt+lpt"]
    assert all(r["short_p99_e2e_s"] > 0 and r["tokens_max_over_mean"] >= 1.0 for r in rows)
    assert (root / "sched" / "schedule.md").read_text() == md and (root / "sched" / "results.json").is_file()
    assert md.count("\n| 1 | ") == 5  # one row per arm at the one load
    # the workload is drawn from the test prompts' samples only, and the OUTLETS arm's requests carry re-predictions
    from lenpred.outlets.schedule import fill_placeholders
    from lenpred.predictions import read_predictions

    sc = SimConfig.from_dict(fill_placeholders(cfg, {"run": str(p["run"]), "prefill": "x", "outlets": "y"}))
    keys = read_predictions(table).frame[["prompt_id", "sample_idx"]]
    wl = sample_workload(sc.workload, p["run"], keys, 0)
    assert set(wl.keys["prompt_id"]) <= set(bench["data"]["test"]["lengths"]["prompt_id"])
    reqs = wl.requests(1.0, read_predictions(table))
    assert sum(bool(r.repred) for r in reqs) > 0.9 * len(reqs)
    assert res.baseline == "fcfs+rr"


def test_schedule_through_the_cli_makes_the_outlets_table_from_the_head(bench, tmp_path, capsys):
    """`lenpred outlets schedule` (the one entry; no `python -m`): with --outlets-head and --traj it
    writes the re-predictions table into --out first, then the same files as run_schedule."""
    from lenpred.cli import main
    from lenpred.predictions import read_predictions

    root, p = bench["root"], bench["paths"]
    cfg = tmp_path / "schedule.json"
    cfg.write_text(json.dumps(_tiny_config("experiments/outlets/schedule.json")))
    out = tmp_path / "sched"
    assert main(["outlets", "schedule", "--config", str(cfg), "--run", str(p["run"]), "--traj", str(p["traj"]),
                 "--outlets-head", str(root / "outlets"), "--prefill-predictions", str(root / "pre.parquet"),
                 "--out", str(out)]) == 0
    table = read_predictions(out / "outlets_predictions.parquet")
    assert table.made_by == "outlets" and len(table) == 240
    rows = json.loads((out / "schedule.json").read_text())
    assert [r["arm"] for r in rows][0] == "fcfs+rr"
    assert "| load | arm | short P99 E2E (s)" in capsys.readouterr().out  # schedule.md, printed
    # neither a head nor a table: one line, exit 1, nothing written
    assert main(["outlets", "schedule", "--config", str(cfg), "--run", str(p["run"]), "--prefill-predictions",
                 str(root / "pre.parquet"), "--out", str(tmp_path / "s2")]) == 1
    assert "--outlets-predictions" in capsys.readouterr().err and not (tmp_path / "s2").exists()


def test_one_oracle_bound_for_both_benches_with_its_single_sample_rule():
    """lenpred.bench.evaluate.oracle_bound serves the prefill bench (every prompt counts: one with a
    single sample is refused) and the OUTLETS bench (drop_single: such prompts are left out); on
    prompts that all have 2+ samples the two are the same figures."""
    from lenpred.bench.evaluate import oracle_bound
    from lenpred.errors import DataError
    from lenpred.outlets.evaluate import bound_on
    from lenpred.stats.oracle import mae_estimates

    rng = np.random.default_rng(3)
    k = [8, 8, 3, 24]
    two = pd.DataFrame({"prompt_id": np.repeat([f"p{i}" for i in range(4)], k),
                        "n_tokens": rng.integers(1, 400, sum(k))})
    a = oracle_bound(two, 200, 0.95, 0)
    b = oracle_bound(two, 200, 0.95, 0, drop_single=True)
    c = bound_on(two, 200, 0.95, 0)
    assert a == b and (c.oracle_mae, c.n_prompts, c.n_samples) == (a.oracle_mae, 4, sum(k))
    per = [float(mae_estimates(g["n_tokens"].to_numpy(float)[None, None])["mae_oracle"][0])
           for _, g in two.groupby("prompt_id")]
    assert a.oracle_mae == pytest.approx(np.mean(per), rel=1e-12)  # the mean over prompts of each prompt's bound
    one = pd.concat([two, pd.DataFrame({"prompt_id": ["lone"], "n_tokens": [50]})], ignore_index=True)
    with pytest.raises(DataError, match="1 test prompt"):
        oracle_bound(one, 200, 0.95, 0)
    d = oracle_bound(one, 200, 0.95, 0, drop_single=True)
    assert (d.n_prompts, d.n_samples, d.oracle_mae) == (4, sum(k), a.oracle_mae)


def test_anchor_through_the_cli_is_benched_beside_its_inputs(bench, tmp_path, capsys):
    """`outlets anchor` fits on the validation rows; `outlets bench --anchors` scores the blend, which
    is never far worse than the better of its two inputs at any point; a bench without the anchor's
    prefill table, or with another head's weights, is refused."""
    from lenpred.cli import main

    root, p = bench["root"], bench["paths"]
    anc = tmp_path / "anchor"
    assert main(["outlets", "anchor", "--traj", str(p["traj"]), "--run", str(p["run"]), "--head", str(root / "probe"),
                 "--prefill-predictions", f"mlp={root / 'pre.parquet'}", "--out", str(anc)]) == 0
    assert "weight on OUTLETS" in capsys.readouterr().out
    out = tmp_path / "report"
    assert main(["outlets", "bench", "--traj", str(p["traj"]), "--run", str(p["run"]), "--heads", str(root / "probe"),
                 "--prefill-predictions", f"mlp={root / 'pre.parquet'}", "--anchors", f"outlets-anchored={anc}",
                 "--n-boot", "20", "--no-plots", "--live-points", LIVE_HELD, "--out", str(out)]) == 0
    res = OutletsBench.from_dict(json.loads((out / "outlets_bench.json").read_text()))
    a, probe, pre = res.method("outlets-anchored"), res.method("probe"), res.method("prefill-mlp")
    for pid in a.points:
        assert a.points[pid].mae <= 1.1 * min(probe.points[pid].mae, pre.points[pid].mae) + 1.0
    capsys.readouterr()
    assert main(["outlets", "bench", "--traj", str(p["traj"]), "--run", str(p["run"]), "--anchors", str(anc),
                 "--live-points", LIVE_HELD, "--out", str(tmp_path / "r2")]) == 1
    assert "--prefill-predictions mlp=FILE" in capsys.readouterr().err
    assert not (tmp_path / "r2").exists()
