"""Run directory: atomic shards, duplicate refusal, card identity and provenance checks."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow.parquet as pq
import pytest

from lenpred.data.rundir import RunDir, card_hash
from lenpred.errors import CardMismatchError, DataError

CARD = {
    "model": {"id": "m", "fingerprint": "sha256:0"},
    "prompts": {"source": "synthetic"},
    "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 8, "seed": 0},
    "engine": {"name": "synthetic", "version": "0"},
}


def _prompts(n: int) -> pd.DataFrame:
    return pd.DataFrame({"prompt_id": [f"p{i}" for i in range(n)], "idx": range(n), "text": ["x"] * n, "n_prompt_tokens": [1] * n})


def _rows(keys: list[tuple[str, int]]) -> list[dict]:
    return [{"prompt_id": p, "sample_idx": k, "n_tokens": 3, "stop_reason": "eos", "text": "a b c", "token_ids": [1, 2, 3]} for p, k in keys]


def test_create_append_read(tmp_path):
    run = RunDir.create(tmp_path / "r", CARD)
    run.write_prompts(_prompts(2))
    run.append_samples(_rows([("p1", 0), ("p0", 1)]))
    run.append_samples(_rows([("p0", 0)]))
    again = RunDir.open(tmp_path / "r")
    s = again.samples()
    assert list(zip(s.prompt_id, s.sample_idx, strict=True)) == [("p0", 0), ("p0", 1), ("p1", 0)]
    assert again.done_keys() == {("p0", 0), ("p0", 1), ("p1", 0)}
    assert len(again.shard_paths()) == 2
    meta = pq.read_schema(again.shard_paths()[0]).metadata
    assert meta[b"lenpred.card_hash"].decode() == again.card_hash


def test_duplicates_refused(tmp_path):
    run = RunDir.create(tmp_path / "r", CARD)
    run.append_samples(_rows([("p0", 0)]))
    with pytest.raises(DataError, match="duplicate"):
        run.append_samples(_rows([("p0", 0)]))
    with pytest.raises(DataError, match="duplicate"):
        run.append_samples(_rows([("p1", 0), ("p1", 0)]))
    assert len(run.samples()) == 1


def test_card_mismatch_refused_and_bookkeeping_free(tmp_path):
    RunDir.create(tmp_path / "r", CARD)
    other = json.loads(json.dumps(CARD))
    other["sampling"]["temperature"] = 0.5
    with pytest.raises(CardMismatchError, match="temperature"):
        RunDir.create(tmp_path / "r", other)
    run = RunDir.open(tmp_path / "r")
    h = run.card_hash
    run.update_bookkeeping(targets=[{"prompts": 3, "samples": 2}])
    assert RunDir.open(tmp_path / "r").card_hash == h == card_hash(CARD | {"schema": "lenpred.run/1"})
    with pytest.raises(ValueError):
        run.update_bookkeeping(sampling={})


def test_foreign_shard_refused(tmp_path):
    a = RunDir.create(tmp_path / "a", CARD)
    other = json.loads(json.dumps(CARD))
    other["model"]["id"] = "other"
    b = RunDir.create(tmp_path / "b", other)
    b.append_samples(_rows([("p0", 0)]))
    a.append_samples(_rows([("p1", 0)]))
    # copy b's shard into a under a fresh name: reading a must refuse the mix
    (a.samples_dir / "part-00099.parquet").write_bytes(b.shard_paths()[0].read_bytes())
    a2 = RunDir.open(tmp_path / "a")
    with pytest.raises(CardMismatchError, match="another card|made under card"):
        a2.samples()


def test_edited_card_detected(tmp_path):
    RunDir.create(tmp_path / "r", CARD)
    p = tmp_path / "r" / "card.json"
    d = json.loads(p.read_text())
    d["sampling"]["top_p"] = 0.5
    p.write_text(json.dumps(d))
    with pytest.raises(CardMismatchError, match="edited"):
        RunDir.open(tmp_path / "r")


def test_not_a_run(tmp_path):
    with pytest.raises(DataError, match="not a lenpred run directory"):
        RunDir.open(tmp_path)


def test_temp_files_cleaned_and_ignored(tmp_path):
    run = RunDir.create(tmp_path / "r", CARD)
    (run.samples_dir / ".part-00000.parquet.abc.tmp").write_bytes(b"half a file")
    assert run.samples().empty
    assert run.clean_temp() == 1


def test_prompt_extension_must_keep_order(tmp_path):
    run = RunDir.create(tmp_path / "r", CARD)
    run.write_prompts(_prompts(2))
    run.write_prompts(_prompts(4))  # extension keeps p0, p1 at idx 0, 1
    assert list(run.prompts().prompt_id) == ["p0", "p1", "p2", "p3"]
    shuffled = _prompts(4).assign(idx=[1, 0, 2, 3])
    with pytest.raises(CardMismatchError):
        run.write_prompts(shuffled)
