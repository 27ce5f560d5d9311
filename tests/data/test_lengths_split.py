"""The one run-reading path, the one leave-one-out median, and the fixed split."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lenpred.data.lengths import loo_median, loo_median_sorted, sample_lengths
from lenpred.data.rundir import RunDir
from lenpred.data.split import SplitConfig, build_split, load_split, write_split
from lenpred.errors import DataError


def test_loo_median_known_answers():
    v = np.array([1, 5, 3, 10, 2, 7, 7])
    g = ["a", "b", "a", "a", "c", "b", "d"]
    out = loo_median(v, g)
    # a = {1, 3, 10}: without 1 -> median(3, 10) = 6.5; without 3 -> 5.5; without 10 -> 2
    np.testing.assert_array_equal(out[[0, 2, 3]], [6.5, 5.5, 2.0])
    np.testing.assert_array_equal(out[[1, 5]], [7.0, 5.0])
    assert np.isnan(out[4]) and np.isnan(out[6])  # single-sample prompts have no "other" samples


def test_loo_median_matches_brute_force():
    rng = np.random.default_rng(0)
    x = np.sort(rng.integers(1, 100, size=(50, 7)).astype(float), axis=-1)
    brute = np.array([[np.median(np.delete(r, i)) for i in range(7)] for r in x])
    np.testing.assert_array_equal(loo_median_sorted(x), brute)
    with pytest.raises(ValueError):
        loo_median_sorted(x[:, :1])


def _run(tmp_path, ks: dict[str, int]) -> RunDir:
    card = {"model": {"id": "m"}, "prompts": {}, "sampling": {"max_new_tokens": 50}, "engine": {"name": "fake"}}
    rd = RunDir.create(tmp_path / "run", card)
    pids = list(ks)
    rd.write_prompts(pd.DataFrame({"prompt_id": pids, "idx": range(len(pids)), "text": pids,
                                   "n_prompt_tokens": [3 + i for i in range(len(pids))]}))
    rows = [{"prompt_id": p, "sample_idx": k, "n_tokens": 10 + k, "stop_reason": "eos" if k % 5 else "length"}
            for p, n in ks.items() for k in range(n)]
    rd.append_samples(rows)
    return rd


def test_sample_lengths(tmp_path):
    rd = _run(tmp_path, {"p0": 2, "p1": 6})
    df = sample_lengths(rd)
    assert list(df.columns[:6]) == ["prompt_id", "sample_idx", "n_tokens", "stop_reason", "truncated", "n_prompt_tokens"]
    assert df["truncated"].tolist() == [True, False, True, False, False, False, False, True]
    assert df.groupby("prompt_id")["n_prompt_tokens"].first().to_dict() == {"p0": 3, "p1": 4}


def test_split_rule_and_stability(tmp_path):
    ks = {f"big{i}": 8 for i in range(20)} | {f"small{i}": 2 for i in range(40)}
    rd = _run(tmp_path, ks)
    s = build_split(rd, SplitConfig(val_share=0.25))
    assert len(s.test) == 10 and s.test <= {f"big{i}" for i in range(20)}  # half of the K >= 8 prompts
    assert s.train | s.val | s.test == set(ks) and not (s.train & s.test) and not (s.val & s.test)
    assert 3 <= len(s.val) <= 22  # ~25% of 50, a hash draw
    write_split(s, rd)
    assert load_split(rd).roles == s.roles
    # the run grows by new 2-sample prompts: old roles are kept, new prompts get train/val
    rd2 = RunDir.open(rd.path)
    more = {f"new{i}": 2 for i in range(10)}
    old = rd2.prompts()
    rd2.write_prompts(pd.concat([old, pd.DataFrame({"prompt_id": list(more), "idx": range(len(old), len(old) + 10),
                                                    "text": list(more), "n_prompt_tokens": 5})], ignore_index=True))
    rd2.append_samples([{"prompt_id": p, "sample_idx": k, "n_tokens": 9, "stop_reason": "eos"} for p in more for k in range(2)])
    with pytest.raises(DataError, match="covers 60 of the run's 70 prompts"):
        load_split(rd2)
    s2 = build_split(rd2, SplitConfig(val_share=0.25))
    assert {p: r for p, r in s2.roles.items() if p in s.roles} == dict(s.roles) and s2.test == s.test
    write_split(s2, rd2)
    assert load_split(rd2).counts()["test"] == 10


def test_split_refuses_a_leaking_rewrite_and_foreign_runs(tmp_path):
    rd = _run(tmp_path, {f"big{i}": 8 for i in range(20)})
    write_split(build_split(rd), rd)
    with pytest.raises(DataError, match="would change the role"):
        write_split(build_split(rd, SplitConfig(seed=1)), rd)
    d = json.loads((rd.path / "split.json").read_text())
    d["card_hash"] = "0" * 16
    (rd.path / "split.json").write_text(json.dumps(d))
    with pytest.raises(DataError, match="was made for run card 0000000000000000"):
        load_split(rd)
    with pytest.raises(DataError, match="check_no_test|contains 1 test prompt"):
        s = build_split(rd)
        s.check_no_test([next(iter(s.test)), "x"])


def test_info_reports_progress_toward_each_target(tmp_path):
    from lenpred.data.summary import run_summary

    rd = _run(tmp_path, {"p0": 2, "p1": 6, "p2": 0})
    rd.update_bookkeeping(targets=[{"prompts": 2, "samples": 2}, {"prompts": 3, "samples": 4}])
    prog = run_summary(rd).progress
    assert [(t.complete_prompts, t.missing_samples) for t in prog] == [(2, 0), (1, 2 + 0 + 4)]


def test_an_evaluation_only_split_puts_every_candidate_in_test(tmp_path):
    # a transfer set (200 prompts x 4 samples): --test-min-samples 4 --test-share 1
    rd = _run(tmp_path, {f"p{i}": 4 for i in range(12)} | {"short": 2})
    s = build_split(rd, SplitConfig(test_min_samples=4, test_share=1.0))
    assert s.test == {f"p{i}" for i in range(12)} and s.role("short") in ("train", "val")
    with pytest.raises(Exception, match="less than or equal to 1"):
        SplitConfig(test_share=1.5)


def test_an_unchanged_split_is_not_rewritten(tmp_path):
    # its mtime says when the roles last changed (benchmarks/zoo_reference.sh retrains heads older than it)
    import os

    rd = _run(tmp_path, {f"big{i}": 8 for i in range(10)} | {f"s{i}": 2 for i in range(10)})
    path = write_split(build_split(rd), rd)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    write_split(build_split(rd), rd)
    assert path.stat().st_mtime_ns == 1_000_000_000
    rd.write_prompts(pd.concat([rd.prompts(), pd.DataFrame({"prompt_id": ["new"], "idx": [20], "text": ["new"],
                                                            "n_prompt_tokens": [5]})], ignore_index=True))
    rd.append_samples([{"prompt_id": "new", "sample_idx": k, "n_tokens": 9, "stop_reason": "eos"} for k in range(2)])
    write_split(build_split(RunDir.open(rd.path)), rd)
    assert path.stat().st_mtime_ns != 1_000_000_000 and "new" in load_split(rd).roles
