"""`lenpred features` end to end on a fake run: the artifact, resume after a kill, shards + merge."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bad_inputs.features import prompt_table
from lenpred.cli import main
from lenpred.data.rundir import RunDir
from lenpred.errors import DataError
from lenpred.features import load_features
from lenpred.features.build import compute_features
from lenpred.features.prefill import Extractor, FeatureConfig
from lenpred.features.shards import merge_features, shard_slice
from lenpred.features.work import WorkDir, work_path

CFG = FeatureConfig(batch_size=2, chunk_prompts=3)  # 12 prompts -> 4 chunks of 2 batches each


_REAL_FEATURES = Extractor.features


class Killed(BaseException):
    """Stands for SIGKILL: a BaseException nothing in lenpred catches."""


def _count_forward(monkeypatch: pytest.MonkeyPatch, kill_at: int | None = None) -> list[int]:
    """Count Extractor.features calls (= forward passes); with ``kill_at``, die on that call like a kill."""
    calls: list[int] = []
    real = _REAL_FEATURES  # the unwrapped method, even when an earlier wrapper is still patched in

    def wrapped(self: Extractor, seqs: list[list[int]]):  # type: ignore[no-untyped-def]
        if kill_at is not None and len(calls) + 1 == kill_at:
            raise Killed
        calls.append(len(seqs))
        return real(self, seqs)

    monkeypatch.setattr(Extractor, "features", wrapped)
    return calls


def _same(a_path: Path, b_path: Path, atol: float = 0.0) -> None:
    a, b = load_features(a_path), load_features(b_path)
    assert a.prompt_ids.tolist() == b.prompt_ids.tolist()
    assert sorted(a.blocks) == sorted(b.blocks)
    for k in a.blocks:
        np.testing.assert_allclose(a.blocks[k], b.blocks[k], atol=atol, err_msg=k)
    np.testing.assert_allclose(a.side, b.side, atol=atol)


def test_cli_writes_a_float16_artifact_with_its_spec(tiny_run: Path, tmp_path: Path, tiny_model: Path) -> None:
    out = tmp_path / "feats"
    assert main(["features", "--run", str(tiny_run), "--out", str(out), "--batch-size", "4", "--no-progress"]) == 0
    rd = RunDir.open(tiny_run)
    f = load_features(out, card=rd.card)  # card scope "run": accepted for its own run
    assert f.prompt_ids.tolist() == rd.prompts()["prompt_id"].tolist()  # run order
    assert sorted(f.blocks) == sorted(f"{layer}.{p}" for layer in (1, 2, 4) for p in ("last", "mean", "entropy"))
    assert all(v.dtype == np.float32 and v.shape == (12, 32) for v in f.blocks.values())  # float32 in memory
    meta = json.loads((out / "meta.json").read_text())
    spec = meta["feature_spec"]
    assert spec["dtype"] == "float16" and spec["layers"] == [1, 2, 4] and spec["entropy_temperature"] == 1.0
    assert spec["model"]["fingerprint"] == rd.card["model"]["fingerprint"] and spec["lenpred_version"]
    assert meta["card_scope"] == "run" and meta["card_hash"] == rd.card_hash
    from safetensors import safe_open

    with safe_open(str(out / "weights.safetensors"), "np") as st:
        assert st.get_tensor("4.last").dtype == np.float16 and st.get_tensor("side").dtype == np.float32
    # the stored values are the extractor's to float16 precision
    ext = Extractor.load(tiny_model, FeatureConfig(), layers=(1, 2, 4))
    seqs = [list(s) for s in rd.prompts()["prompt_token_ids"]]
    blocks, side = ext.features(seqs)
    for k in blocks:
        np.testing.assert_allclose(f.blocks[k], blocks[k], rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(f.side, side, rtol=1e-5)
    assert f.side_column("prompt_tokens").tolist() == rd.prompts()["n_prompt_tokens"].tolist()
    assert not work_path(out).exists()  # the work folder is gone once the artifact is complete


def test_resume_after_kill_recomputes_nothing(tiny_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ref = tmp_path / "ref"
    compute_features(tiny_run, ref, CFG, progress=False)
    out = tmp_path / "feats"
    _count_forward(monkeypatch, kill_at=6)  # dies in chunk 3 (batches 5-6): chunks 1 and 2 are on disk
    with pytest.raises(Killed):
        compute_features(tiny_run, out, CFG, progress=False)
    assert not out.exists()
    wd = WorkDir(work_path(out), {})
    assert len(wd.chunk_paths()) == 2
    saved = [pid for ids, _, _ in wd.chunks() for pid in ids]
    assert len(saved) == 6 == len(set(saved))
    calls = _count_forward(monkeypatch)
    res = compute_features(tiny_run, out, CFG, progress=False)
    assert res.computed == 6 and sum(calls) == 6 and len(calls) == 4  # only the 6 missing prompts, once each (2 chunks x [2, 1])
    assert res.forward_calls == 4
    _same(ref, out)  # identical to the uninterrupted run
    # complete: a rerun loads no model and computes nothing
    calls.clear()
    again = compute_features(tiny_run, out, CFG, progress=False)
    assert again.up_to_date and calls == []


def test_a_grown_run_computes_only_its_new_prompts(tiny_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "feats"
    compute_features(tiny_run, out, CFG, progress=False)
    before = load_features(out)
    rd = RunDir.open(tiny_run)
    grown = pd.concat([rd.prompts(), prompt_table(4, seed=9, start=12)], ignore_index=True)
    rd.write_prompts(grown)
    calls = _count_forward(monkeypatch)
    res = compute_features(tiny_run, out, CFG, progress=False)
    assert res.computed == 4 and sum(calls) == 4
    after = load_features(out)
    assert after.n == 16
    idx = after.rows(before.prompt_ids)
    for k in before.blocks:
        np.testing.assert_array_equal(after.blocks[k][idx], before.blocks[k])


def test_shard_partition_is_balanced_and_complete(tiny_run: Path) -> None:
    p = RunDir.open(tiny_run).prompts()
    parts = [shard_slice(p, i, 3) for i in range(3)]
    ids = [x for part in parts for x in part["prompt_id"]]
    assert sorted(ids) == sorted(p["prompt_id"]) and len(ids) == len(set(ids))  # a partition
    assert {len(part) for part in parts} == {4}
    lens = [part["prompt_token_ids"].map(len) for part in parts]
    assert all(ln.is_monotonic_increasing for ln in lens)  # each slice is processed shortest first
    assert max(ln.sum() for ln in lens) - min(ln.sum() for ln in lens) <= p["prompt_token_ids"].map(len).max()
    again = [shard_slice(p.sample(frac=1, random_state=1), i, 3)["prompt_id"].tolist() for i in range(3)]
    assert again == [part["prompt_id"].tolist() for part in parts]  # independent of the table's row order


def test_shards_merged_equal_a_single_run(tiny_run: Path, tmp_path: Path) -> None:
    single = tmp_path / "single"
    compute_features(tiny_run, single, CFG, progress=False)
    shards = [tmp_path / f"s{i}" for i in range(3)]
    for i, s in enumerate(shards):
        assert main(["features", "--run", str(tiny_run), "--out", str(s), "--shard", f"{i}/3", "--no-progress",
                     "--batch-size", "3"]) == 0
        assert load_features(s).n == 4
    merged = tmp_path / "merged"
    assert main(["features", "--merge", *map(str, shards[::-1]), "--out", str(merged)]) == 0
    _same(single, merged, atol=1e-2)  # float16 storage; batches differ between the two layouts
    m = json.loads((merged / "meta.json").read_text())
    assert m["feature_spec"] == json.loads((single / "meta.json").read_text())["feature_spec"]
    assert "shard" not in m and len(m["merged_from"]) == 3
    with pytest.raises(DataError, match="missing shard"):
        merge_features(tmp_path / "partial", shards[:2])


def test_a_work_folder_of_other_options_is_refused(tiny_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "feats"
    _count_forward(monkeypatch, kill_at=3)
    with pytest.raises(Killed):
        compute_features(tiny_run, out, CFG, progress=False)
    with pytest.raises(DataError, match="entropy_temperature: 1.0 there, 2.0 now"):
        compute_features(tiny_run, out, CFG.replace(entropy_temperature=2.0), progress=False)
    # runtime options (batch size, chunking) are not part of the identity: resuming with them is fine
    _count_forward(monkeypatch)
    res = compute_features(tiny_run, out, CFG.replace(batch_size=5, chunk_prompts=50), progress=False)
    assert res.computed == 12 - 3


def test_bench_computes_a_runs_features_under_the_heads_spec(tiny_run: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """`lenpred bench --heads` without --features: the features are computed for the benched run under the
    spec the head was trained on (not the defaults), then reused; the scores equal an explicit --features."""
    from lenpred.data.split import SplitConfig, build_split, write_split

    rd = RunDir.open(tiny_run)
    rng = np.random.default_rng(0)
    ids = rd.prompts()["prompt_id"].tolist()
    rd.append_samples([{"prompt_id": p, "sample_idx": k, "n_tokens": int(rng.integers(3, 40)), "stop_reason": "eos"}
                       for p in ids for k in range(1, 8)])
    write_split(build_split(rd, SplitConfig(test_min_samples=8, test_share=0.5, val_share=0.0)), rd)
    own = tmp_path / "own-feats"
    assert main(["features", "--run", str(tiny_run), "--out", str(own), "--layers", "2,4", "--pools", "last,mean",
                 "--no-progress"]) == 0
    head = tmp_path / "ridge"
    assert main(["train", "--run", str(tiny_run), "--features", str(own), "--predictor", "ridge", "--out", str(head)]) == 0
    monkeypatch.chdir(tmp_path)
    calls = _count_forward(monkeypatch)
    assert main(["bench", "--run", str(tiny_run), "--heads", str(head), "--out", "auto", "--no-plots", "--n-boot", "20"]) == 0
    assert calls, "no features were computed"
    auto = tmp_path / "out" / "features" / tiny_run.name
    spec = json.loads((auto / "meta.json").read_text())["feature_spec"]
    assert spec["layers"] == [2, 4] and spec["pools"] == ["last", "mean"]
    _same(auto, own)
    calls.clear()
    assert main(["bench", "--run", str(tiny_run), "--heads", str(head), "--out", "auto2", "--no-plots", "--n-boot", "20"]) == 0
    assert not calls  # up to date: reused
    assert main(["bench", "--run", str(tiny_run), "--heads", str(head), "--features", str(own), "--out", "explicit",
                 "--no-plots", "--n-boot", "20"]) == 0
    a = json.loads((tmp_path / "auto" / "bench.json").read_text())
    b = json.loads((tmp_path / "explicit" / "bench.json").read_text())
    assert a["rows"] == b["rows"]
