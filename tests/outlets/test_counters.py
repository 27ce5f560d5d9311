"""Counter heads: the counters by hand, a planted answer-so-far signal recovered by both kinds (quantile,
hazard), calibrated 80% intervals, the artifact's round trip and card check, bad input, and the CLI end to
end (the real tokenizer's token texts; the bench's --counters on the live series)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lenpred.errors import CardMismatchError, ConfigError, DataError
from lenpred.outlets.counters import (
    COUNTERS,
    FLAGS,
    CounterHead,
    counter_rows,
    fit_counter_head,
    hazard_edges,
    live_index,
    load_counter_head,
    save_counter_head,
    token_flags,
)

# a six-token vocabulary: the flags of each id by hand
PIECES = ["word", " word", ".", "\n", "-", ":"]
W, WS, DOT, NL, DASH, COLON = range(6)
CAP = 256


def test_token_flags_by_hand() -> None:
    f = token_flags(["Hi", ".\n\n", " -", "```", "12.", "# Title", " and so on:", "1. x"])
    col = {n: f[:, k].tolist() for k, n in enumerate(FLAGS)}
    assert col["newline"] == [0, 2, 0, 0, 0, 0, 0, 0] and col["blank"] == [0, 1, 0, 0, 0, 0, 0, 0]
    assert col["sentence_end"] == [0, 1, 0, 0, 1, 0, 0, 1]  # "12." ends a sentence as far as a counter knows
    assert col["marker"] == [0, 0, 1, 0, 1, 0, 0, 0] and col["header"] == [0, 0, 0, 0, 0, 1, 0, 0]
    assert col["fence"] == [0, 0, 0, 1, 0, 0, 0, 0] and col["ends_newline"] == [0, 1, 0, 0, 0, 0, 0, 0]
    assert col["colon"] == [0, 0, 0, 0, 0, 0, 1, 0]


def test_counter_rows_by_hand() -> None:
    flags = token_flags(PIECES)
    #      0  1   2      3   4     5   6   7   8    9
    ids = [W, WS, COLON, NL, DASH, W, NL, DASH, WS, DOT]
    x = counter_rows(ids, [0, 3, 4, 7, 10], prompt_tokens=7, flags=flags)
    c = {n: x[:, k].tolist() for k, n in enumerate(COUNTERS)}
    assert c["t"] == [0, 3, 4, 7, 10] and c["log1p_prompt_tokens"] == [np.log1p(7)] * 5
    assert c["newlines"] == [0, 0, 1, 2, 2]
    assert c["list_items"] == [0, 0, 0, 1, 2]  # a dash counts only at a line start (after a newline token)
    assert c["colons"] == [0, 1, 1, 1, 1] and c["sentence_ends"] == [0, 0, 0, 0, 1]
    assert c["since_newline"] == [0, 3, 0, 0, 3]  # tokens after the last newline among the first t
    assert c["last_is_newline"] == [0, 0, 1, 1, 0]
    assert c["newline_rate"] == pytest.approx([0, 0, 0.25, 2 / 7, 0.2])
    with pytest.raises(DataError, match="past the answer"):
        counter_rows(ids, [11], 7, flags)
    with pytest.raises(DataError, match="outside the head's token table"):
        counter_rows([99], [1], 7, flags)


def planted(n: int, seed: int, prefix: str) -> pd.DataFrame:
    """Answers whose first line says how long they run: an intro ending with ':' opens a list of 10-16
    items (8 tokens each: L = 12 + 8 N), one ending with '.' a few sentences (9 tokens each: L = 12 + 9 M,
    M in 1..3). The prompt says nothing (every prompt 20 tokens), so at t = 0 nobody can tell them apart;
    from t = 12 on the counters can."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        long = bool(rng.random() < 0.5)
        ids = [W] + [WS] * 9 + [COLON if long else DOT, NL]
        if long:
            for _ in range(int(rng.integers(10, 17))):
                ids += [DASH] + [WS] * 6 + [NL]
        else:
            for _ in range(int(rng.integers(1, 4))):
                ids += [WS] * 8 + [DOT]
        rows.append({"prompt_id": f"{prefix}{i:04d}", "sample_idx": 0, "n_tokens": len(ids), "token_ids": ids,
                     "n_prompt_tokens": 20, "long": long})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def planted_sets():
    tr, va, te = planted(300, 0, "tr"), planted(160, 1, "va"), planted(200, 2, "te")
    return tr, va, te, token_flags(PIECES)


@pytest.mark.parametrize("kind", ["quantile", "hazard"])
def test_the_planted_signal_is_read_and_intervals_cover(planted_sets, kind) -> None:
    tr, va, te, flags = planted_sets
    samples = pd.concat([tr, va], ignore_index=True)
    head = fit_counter_head(samples, frozenset(tr["prompt_id"]), frozenset(va["prompt_id"]), flags, CAP, kind=kind)
    idx = live_index(te, CAP)
    rem = head.predict(head.rows(te, idx, None), idx["t"].to_numpy())
    y = idx["remaining"].to_numpy(float)
    long = idx["prompt_id"].map(te.set_index("prompt_id")["long"]).to_numpy(bool)
    t = idx["t"].to_numpy()
    for tt in (16, 32):
        for grp in (True, False):
            m = (t == tt) & (long == grp)
            if m.sum() < 20:
                continue
            truth = np.median(y[m])  # the conditional median given the first line (long or short)
            assert abs(np.median(rem.q50[m]) - truth) <= 0.15 * truth + 4, (kind, tt, grp)
    # after the first line the head beats the best it could do without reading the answer (t alone)
    late = t >= 16
    t_only = np.array([np.median(y[t == v]) for v in t[late]])
    assert np.abs(rem.q50[late] - y[late]).mean() < 0.5 * np.abs(t_only - y[late]).mean()
    cover = ((rem.q10 <= y) & (y <= rem.q90)).mean()
    assert 0.7 <= cover <= 0.9, cover
    assert (rem.q10 <= rem.q50).all() and (rem.q50 <= rem.q90).all() and (rem.q90 <= CAP - t).all()


def test_hazard_edges_cover_the_cap() -> None:
    e = hazard_edges(1024)
    assert e[0] == 1 and e[-1] > 1024 and np.allclose(e[1:] / e[:-1], np.sqrt(2))


CARD = {"model": {"id": "synthetic", "fingerprint": "sha256:a", "tokenizer": "T", "vocab_size": 6, "eos_token": "x",
                  "chat_template_sha256": "0"},
        "prompts": {"chat_template": True, "system_prompt": None},
        "sampling": {"temperature": 1.0, "max_new_tokens": CAP, "seed": 0}, "card_hash": "c0"}


def test_artifact_round_trip_and_card_check(planted_sets, tmp_path) -> None:
    tr, va, te, flags = planted_sets
    samples = pd.concat([tr, va], ignore_index=True)
    head = fit_counter_head(samples, frozenset(tr["prompt_id"]), frozenset(va["prompt_id"]), flags, CAP)
    save_counter_head(head, str(tmp_path / "h"), CARD, {"kind": "quantile"})
    back = load_counter_head(str(tmp_path / "h"), card=CARD)
    idx = live_index(te, CAP)
    a = head.predict(head.rows(te, idx, None), idx["t"].to_numpy())
    b = back.predict(back.rows(te, idx, None), idx["t"].to_numpy())
    assert np.array_equal(a.q50, b.q50) and np.array_equal(a.q90, b.q90) and back.calibration == head.calibration
    meta = json.loads((tmp_path / "h" / "meta.json").read_text())
    assert meta["kind"] == "outlets-counters" and meta["feature_spec"]["positions"]["rows"] == "live"
    other = {**CARD, "model": {**CARD["model"], "fingerprint": "sha256:b"}}
    with pytest.raises(CardMismatchError, match="fingerprint"):
        load_counter_head(str(tmp_path / "h"), card=other)
    with pytest.raises(DataError, match="reads 17 features"):
        back.predict(np.zeros((2, 3)), [0, 16])


def test_bad_input_names_the_fix(planted_sets) -> None:
    tr, va, _, flags = planted_sets
    with pytest.raises(ConfigError, match="quantile, hazard"):
        fit_counter_head(tr, frozenset(tr["prompt_id"]), frozenset(va["prompt_id"]), flags, CAP, kind="gbm")
    with pytest.raises(DataError, match="train and val prompts"):
        fit_counter_head(tr, frozenset(tr["prompt_id"]), frozenset(va["prompt_id"]), flags, CAP)
    h = CounterHead("quantile", COUNTERS, {}, flags, CAP)
    with pytest.raises(DataError, match="not in the run"):
        h.rows(tr, pd.DataFrame({"prompt_id": ["nope"], "sample_idx": [0], "t": [0]}))


# ---------------------------------------------------------------- the CLI end to end, the real tokenizer
def _texts(n: int, seed: int) -> list[tuple[str, bool]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        if rng.random() < 0.5:
            items = "".join(f"\n- Step {k}: mix the flour with the water slowly." for k in range(int(rng.integers(8, 14))))
            out.append(("Here are the steps you asked for:" + items, True))
        else:
            out.append(("Sure, the short answer is yes." + " It works well in most of the cases." * int(rng.integers(2, 6)),
                        False))
    return out


@pytest.fixture(scope="module")
def text_run(tmp_path_factory):
    """A run of the embedded model's card whose answers are real text, tokenized with its tokenizer, and a
    live trajectory of its test prompts (its blocks are noise: only the rows matter to a counter head)."""
    from lenpred.data.rundir import RunDir
    from lenpred.data.split import Split, SplitConfig, write_split
    from lenpred.models.loading import load_tokenizer
    from lenpred.outlets.store import save_trajectory
    from outlets.eval_synth import trajectory

    tok = load_tokenizer("smollm2-135m")
    root = tmp_path_factory.mktemp("counters-run")
    card = {"model": {"id": "smollm2-135m", "fingerprint": "sha256:tiny", "tokenizer": "T", "vocab_size": len(tok),
                      "eos_token": "<|im_end|>", "chat_template_sha256": "0"},
            "prompts": {"source": "synthetic", "chat_template": True, "system_prompt": None},
            "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.1, "repetition_penalty": 1.0,
                         "frequency_penalty": 0.0, "presence_penalty": 0.0, "max_new_tokens": CAP, "seed": 0},
            "engine": {"name": "synthetic", "version": "0"}}
    rd = RunDir.create(root / "run", card)
    rows, roles = [], {}
    for role, n, k, seed in (("train", 300, 1, 0), ("val", 120, 1, 1), ("test", 20, 4, 2)):
        for i, (text, long) in enumerate(_texts(n * k, seed)):
            pid = f"{role[:2]}{i // k:04d}"
            ids = tok.encode(text, add_special_tokens=False)[:CAP]
            rows.append({"prompt_id": pid, "sample_idx": i % k, "n_tokens": len(ids), "token_ids": ids,
                         "stop_reason": "length" if len(ids) >= CAP else "eos", "text": text, "long": long})
            roles[pid] = role
    df = pd.DataFrame(rows)
    ids_ = df["prompt_id"].unique()
    rd.write_prompts(pd.DataFrame({"prompt_id": ids_, "idx": range(len(ids_)), "text": ids_, "n_prompt_tokens": 12}))
    rd.append_samples(df.drop(columns=["long"]))
    write_split(Split(rd.card_hash, SplitConfig(), roles), rd)
    test = df[df["prompt_id"].str.startswith("te")].assign(truncated=False, s=0.0)
    traj = trajectory(test, 0, live=True)
    save_trajectory(root / "traj", traj, rd.card, dtype="float32")
    return root, rd, df


def test_cli_trains_and_the_bench_scores_it_on_the_live_series(text_run, tmp_path, capsys) -> None:
    from lenpred.cli import main

    root, rd, df = text_run
    head = tmp_path / "counters"
    assert main(["outlets", "counters", "--run", str(rd.path), "--out", str(head)]) == 0
    assert "quantile head on" in capsys.readouterr().out
    out = tmp_path / "bench"
    assert main(["outlets", "bench", "--traj", str(root / "traj"), "--run", str(rd.path), "--counters", str(head),
                 "--reference", "t-only", "--n-boot", "30", "--no-plots", "--out", str(out)]) == 0
    d = json.loads((out / "outlets_live.json").read_text())
    m = d["methods"]["counters"]
    assert m["made_for"] == "live" and m["family"] == "counters"
    assert m["ratio_vs_t_only"] < 0.8  # the intro line tells long lists from short answers; t alone cannot
    # the head refuses to be retrained over itself with another run's card, and an unknown kind
    with pytest.raises(SystemExit):
        main(["outlets", "counters", "--run", str(rd.path), "--out", str(tmp_path / "h2"), "--kind", "gbm"])


# ---------------------------------------------------------------- re-predictions with quantiles
def test_repred_quantiles_round_trip_and_bad_rows_refused(tmp_path) -> None:
    from lenpred.predictions import Predictions, read_predictions

    ok = pd.DataFrame({"prompt_id": ["a", "b"], "sample_idx": [0, 0], "pred_tokens": [100.0, 50.0],
                       "repred_gen": [[16, 32], []], "repred_remaining": [[80.0, 60.0], []],
                       "repred_q10": [[20.0, 10.0], []], "repred_q90": [[200.0, 150.0], []]})
    p = Predictions.from_frame(ok, made_by="x")
    assert p.has_repred_quantiles
    back = read_predictions(p.write(tmp_path / "p.parquet"))
    assert back.frame["repred_q90"].iloc[0] == [200.0, 150.0] and back.frame["repred_q10"].iloc[1] == []
    got = back.for_samples(pd.DataFrame({"prompt_id": ["a"], "sample_idx": [0]}))
    assert list(got["repred_q10"].iloc[0]) == [20.0, 10.0]
    # a table without the columns (every table before them) reads with empty lists
    old = Predictions.from_frame(ok.drop(columns=["repred_q10", "repred_q90"]), made_by="x")
    assert not old.has_repred_quantiles
    with pytest.raises(DataError, match="both quantiles for every re-prediction"):
        Predictions.from_frame(ok.assign(repred_q90=[[200.0], []]), made_by="x")
    with pytest.raises(DataError, match="repred_q10 <= repred_remaining <= repred_q90"):
        Predictions.from_frame(ok.assign(repred_q10=[[90.0, 10.0], []]), made_by="x")


def test_repredicted_distribution_is_counted_from_gen_and_capped() -> None:
    from lenpred.sched.dists import repredicted

    d = repredicted(100, 20.0, 50.0, 120.0, cap=200.0)
    assert d.x.min() > 100 and d.x.max() <= 200.0  # no mass before gen + 1 token, none past the cap
    assert np.median(d.x) == pytest.approx(150.0, abs=6)  # gen + the remaining median
    lo, hi = np.quantile(d.x, [0.1, 0.9])
    assert lo == pytest.approx(120.0, abs=12) and hi == pytest.approx(200.0, abs=1e-9)  # q90 220 clipped at the cap


def test_counter_head_writes_a_repredictions_table_the_simulator_reads(text_run, tmp_path) -> None:
    from lenpred.cli import main
    from lenpred.predictions import read_predictions

    root, rd, df = text_run
    head = tmp_path / "counters"
    assert main(["outlets", "counters", "--run", str(rd.path), "--out", str(head)]) == 0
    out = tmp_path / "preds.parquet"
    assert main(["outlets", "predict", "--head", str(head), "--run", str(rd.path), "--roles", "test",
                 "--out", str(out)]) == 0
    p = read_predictions(out, card=rd.card)
    assert p.made_by == "counters" and p.has_repred_quantiles and len(p) == int((df["prompt_id"].str[:2] == "te").sum())
    f = p.frame.set_index(["prompt_id", "sample_idx"])
    for (pid, k), r in f.iterrows():
        n = int(df[(df["prompt_id"] == pid) & (df["sample_idx"] == k)]["n_tokens"].iloc[0])
        assert list(r["repred_gen"]) == [t for t in (16, 32, 64, 128) if t < n]  # the live points it reaches
        assert len(r["repred_q10"]) == len(r["repred_gen"]) == len(r["repred_q90"])
        assert r["q10"] <= r["q50"] <= r["q90"]
    # the simulator builds each re-prediction's own distribution from its quantiles
    from lenpred.sched.dists import repredicted
    from lenpred.sim.config import LengthConfig, WorkloadConfig
    from lenpred.sim.workload import build_workload

    wl = build_workload(WorkloadConfig(n_requests=40, lengths=LengthConfig(source="rundir", path=str(rd.path),
                                                                           roles=["test"], min_tokens=1)), seed=0)
    reqs = wl.requests(1.0, p, with_dist=True)
    r = max(reqs, key=lambda q: len(q.repred))
    row = p.for_samples(wl.keys.iloc[[reqs.index(r)]]).iloc[0]
    assert len(r.repred_dists) == len(row["repred_gen"]) > 0
    want = repredicted(int(row["repred_gen"][0]), row["repred_q10"][0], row["repred_remaining"][0],
                       row["repred_q90"][0], CAP)
    assert np.allclose(r.repred_dists[0].x, want.x) and want.x.min() > row["repred_gen"][0]
    # a head that is not a counter head, without --traj, is refused naming the flag (and nothing is written)
    assert main(["outlets", "predict", "--head", str(tmp_path / "nope"), "--run", str(rd.path),
                 "--out", str(tmp_path / "x.parquet")]) != 0
    assert not (tmp_path / "x.parquet").exists()
