"""lenpred.io.artifacts: atomic directories, strict loading, the card compatibility rule."""

from __future__ import annotations

import copy
import json
import os

import numpy as np
import pytest

from lenpred.errors import CardMismatchError, DataError
from lenpred.io.artifacts import ArtifactHeader, card_fields, check_finite, load_artifact, write_artifact

CARD = {
    "schema": "lenpred.run/1",
    "card_hash": "abc123",
    "model": {"id": "m", "fingerprint": "sha256:1", "tokenizer": "T", "vocab_size": 10, "eos_token": "</s>",
              "chat_template_sha256": "t1"},
    "prompts": {"source": "sharegpt", "dataset_sha256": "d1", "chat_template": True, "system_prompt": None},
    "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.1, "repetition_penalty": 1.0,
                 "frequency_penalty": 0.3, "presence_penalty": 0.0, "max_new_tokens": 1024, "seed": 0},
    "engine": {"name": "llamacpp"},
}


def _card(**changes):
    c = copy.deepcopy(CARD)
    for dotted, v in changes.items():
        sec, key = dotted.split("__")
        c[sec][key] = v
    c["card_hash"] = "other" if changes else c["card_hash"]
    return c


def test_round_trip_tensors_tables_json(tmp_path):
    import pandas as pd

    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    header = ArtifactHeader(kind="head", schema_version=2, config={"h": 1}, card=CARD, card_scope="model+sampling")
    art = write_artifact(tmp_path / "a", header, tensors={"w": w},
                         tables={"t.parquet": pd.DataFrame({"x": [1, 2]})}, json_files={"x.json": {"k": [1]}})
    got = load_artifact(tmp_path / "a", kind="head", schema_versions=(2,), card=CARD)
    np.testing.assert_array_equal(got.tensors()["w"], w)
    assert got.table("t.parquet")["x"].tolist() == [1, 2]
    assert got.read_json("x.json") == {"k": [1]}
    assert got.meta["card"]["sampling.min_p"] == 0.1 and "prompts.dataset_sha256" not in got.meta["card"]
    assert got.meta["card_hash"] == "abc123" and art.meta["files"].keys() == {"weights.safetensors", "t.parquet", "x.json"}


@pytest.mark.parametrize("scope,change,refused", [
    ("model+sampling", {"prompts__dataset_sha256": "d2", "prompts__source": "alpaca"}, None),  # transfer allowed
    ("model+sampling", {"engine__name": "hf"}, None),
    ("model+sampling", {"sampling__temperature": 0.7}, "sampling.temperature"),
    ("model+sampling", {"model__fingerprint": "sha256:2"}, "model.fingerprint"),
    ("model+sampling", {"model__chat_template_sha256": "t2"}, "model.chat_template_sha256"),
    ("model", {"sampling__temperature": 0.7}, None),
    ("model", {"model__vocab_size": 11}, "model.vocab_size"),
    ("run", {"prompts__dataset_sha256": "d2"}, "card_hash"),
])
def test_compatibility_rule(tmp_path, scope, change, refused):
    write_artifact(tmp_path / "a", ArtifactHeader(kind="head", schema_version=1, card=CARD, card_scope=scope))
    other = _card(**change)
    if refused is None:
        load_artifact(tmp_path / "a", card=other)
    else:
        with pytest.raises(CardMismatchError, match=refused.replace(".", r"\.")):
            load_artifact(tmp_path / "a", card=other)


def test_strict_checks(tmp_path):
    write_artifact(tmp_path / "a", ArtifactHeader(kind="head", schema_version=1),
                   tensors={"w": np.zeros(2, np.float32)})
    with pytest.raises(DataError, match="is a head artifact, expected features"):
        load_artifact(tmp_path / "a", kind="features")
    with pytest.raises(DataError, match="schema version 1.*reads version\\(s\\) \\[2\\]"):
        load_artifact(tmp_path / "a", schema_versions=(2,))
    (tmp_path / "a" / "weights.safetensors").write_bytes(b"garbage")
    with pytest.raises(DataError, match="changed or corrupted"):
        load_artifact(tmp_path / "a")
    with pytest.raises(DataError, match="no meta.json"):
        load_artifact(tmp_path)
    with pytest.raises(DataError, match="does not exist"):
        load_artifact(tmp_path / "nope")


def test_refuses_to_write_beside_user_files(tmp_path):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "notes.txt").write_text("x")
    with pytest.raises(DataError, match="not a lenpred artifact"):
        write_artifact(d, ArtifactHeader(kind="head", schema_version=1))
    assert os.listdir(d) == ["notes.txt"]
    (tmp_path / "f").write_text("x")
    with pytest.raises(DataError, match="is a file"):
        write_artifact(tmp_path / "f", ArtifactHeader(kind="head", schema_version=1))


def test_replace_is_atomic_and_failed_write_keeps_old(tmp_path):
    write_artifact(tmp_path / "a", ArtifactHeader(kind="head", schema_version=1), json_files={"v.json": 1})

    class Boom:
        def to_dict(self):
            raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        write_artifact(tmp_path / "a", ArtifactHeader(kind="head", schema_version=1, config=Boom()),
                       json_files={"v.json": 2})
    assert load_artifact(tmp_path / "a").read_json("v.json") == 1  # the old artifact, complete
    assert sorted(os.listdir(tmp_path)) == ["a"]  # no temp folder left behind
    write_artifact(tmp_path / "a", ArtifactHeader(kind="head", schema_version=1), json_files={"v.json": 3})
    assert load_artifact(tmp_path / "a").read_json("v.json") == 3
    assert sorted(os.listdir(tmp_path)) == ["a"]


def test_stale_temp_dir_from_killed_writer_is_removed(tmp_path):
    (tmp_path / ".a.tmp-xyz").mkdir()
    (tmp_path / ".a.tmp-xyz" / "weights.safetensors").write_bytes(b"half")
    write_artifact(tmp_path / "a", ArtifactHeader(kind="head", schema_version=1))
    assert sorted(os.listdir(tmp_path)) == ["a"]


def test_card_fields_unknown_scope():
    with pytest.raises(ValueError):
        card_fields(CARD, "everything")
    assert json.dumps(card_fields(CARD, "model"))  # JSON-serialisable


def test_check_finite_names_the_tensor():
    import torch

    check_finite({"w": np.ones(3, np.float32), "ids": np.arange(3), "t": torch.ones(2), "m": torch.ones(2, dtype=torch.bool)},
                 what="head h")
    w = np.ones((2, 2), np.float32)
    w[1, 0] = np.inf
    with pytest.raises(DataError, match="head h: tensor w has 1 NaN or infinite value"):
        check_finite({"w": w}, what="head h")
    with pytest.raises(DataError, match="tensor fc.weight has 2 NaN"):
        check_finite({"fc.weight": torch.tensor([float("nan"), 1.0, float("nan")])}, what="draft")


def test_schema_version_must_be_an_integer(tmp_path):
    write_artifact(tmp_path / "a", ArtifactHeader(kind="head", schema_version=1), json_files={"x.json": {}})
    meta = json.loads((tmp_path / "a" / "meta.json").read_text())
    meta["schema_version"] = "1"
    (tmp_path / "a" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match="schema_version is '1', a JSON str, not an integer"):
        load_artifact(tmp_path / "a", kind="head", schema_versions=(1,))
