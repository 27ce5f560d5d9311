"""lenpred.predictions: one table, validated; per-prompt rows fan out; a missing prediction is an error."""

from __future__ import annotations

import pandas as pd
import pytest

from lenpred.errors import CardMismatchError, DataError
from lenpred.predictions import Predictions, read_predictions

CARD = {"card_hash": "c1"}


def _preds(**cols):
    base = {"prompt_id": ["a", "b", "b"], "sample_idx": [-1, 1, -1], "pred_tokens": [10.0, 21.0, 30.0]}
    base.update(cols)
    return Predictions.from_frame(pd.DataFrame(base), made_by="test", config={"k": 1}, card=CARD)


def test_write_read_round_trip_keeps_everything(tmp_path):
    p = _preds(q10=[1, 2, 3], q50=[5, 6, 7], q90=[9, 9, 9],
               repred_gen=[[0, 16], [], [8]], repred_remaining=[[10.0, 4.5], [], [22.0]])
    p.write(tmp_path / "p.parquet")
    q = read_predictions(tmp_path / "p.parquet", card=CARD)
    pd.testing.assert_frame_equal(q.frame, p.frame)
    assert q.made_by == "test" and q.meta["config"] == {"k": 1} and q.card_hash == "c1"
    assert q.has_quantiles and q.has_repredictions


def test_for_samples_prefers_per_sample_rows_and_keeps_key_order():
    p = _preds()
    keys = pd.DataFrame({"prompt_id": ["b", "a", "b", "a"], "sample_idx": [0, 3, 1, 0]})
    out = p.for_samples(keys)
    assert out["prompt_id"].tolist() == ["b", "a", "b", "a"]
    assert out["pred_tokens"].tolist() == [30.0, 10.0, 21.0, 10.0]


def test_missing_prediction_is_an_error_not_an_oracle():
    with pytest.raises(DataError, match=r"no prediction for 1 of 2 samples \(first: prompt 'zz', sample 4\)"):
        _preds().for_samples(pd.DataFrame({"prompt_id": ["a", "zz"], "sample_idx": [0, 4]}))


def test_card_mismatch(tmp_path):
    _preds().write(tmp_path / "p.parquet")
    with pytest.raises(CardMismatchError, match="made for run card c1, this run's card is c2"):
        read_predictions(tmp_path / "p.parquet", card={"card_hash": "c2"})


@pytest.mark.parametrize("cols,msg", [
    ({"pred_tokens": [1.0, float("nan"), 2.0]}, "finite and >= 0"),
    ({"pred_tokens": [1.0, -2.0, 2.0]}, "finite and >= 0"),
    ({"sample_idx": [0, 0.5, 1]}, "sample_idx must be integers"),
    ({"q10": [1, 2, 3]}, "all of q10, q50, q90"),
    ({"q10": [5, 2, 3], "q50": [4, 6, 7], "q90": [9, 9, 9]}, "q10 <= q50 <= q90"),
    ({"repred_gen": [[0, 1], [], []], "repred_remaining": [[1.0], [], []]}, "2 repred_gen values but 1"),
    ({"repred_gen": [[5, 1], [], []], "repred_remaining": [[1.0, 1.0], [], []]}, "non-decreasing"),
    ({"sample_idx": [1, 1, 1], "prompt_id": ["a", "a", "b"]}, "duplicate prediction for prompt 'a', sample 1"),
    ({"bogus": [1, 2, 3]}, "unknown column"),
    ({"pred_tokens": [1.0, 1e300, 2.0]}, "at most 10,000,000 tokens"),
    ({"pred_tokens": ["1", "2", "3"]}, "column pred_tokens holds str values (first: '1'), not numbers"),
    ({"spread": ["1", "2", "3"]}, "column spread holds str values"),
    ({"pred_tokens": [True, False, True]}, "column pred_tokens holds bool values"),
])
def test_validation(cols, msg):
    with pytest.raises(DataError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        _preds(**cols)


def test_read_refuses_foreign_parquet_and_directories(tmp_path):
    pd.DataFrame({"prompt_id": ["a"], "pred_tokens": [1.0]}).to_parquet(tmp_path / "x.parquet")
    with pytest.raises(DataError, match="not a lenpred predictions table"):
        read_predictions(tmp_path / "x.parquet")
    (tmp_path / "y.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match="not a readable Parquet file"):
        read_predictions(tmp_path / "y.parquet")
    with pytest.raises(DataError, match="is a directory"):
        read_predictions(tmp_path)
    with pytest.raises(DataError, match="not found"):
        read_predictions(tmp_path / "nope.parquet")


@pytest.mark.parametrize("raw,msg", [
    (b"{not json", "metadata is not valid JSON"),
    (b"[1, 2]", "metadata is a JSON list, not an object"),
    (b'{"schema_version": "1"}', "schema version '1', expected 1"),
])
def test_read_refuses_damaged_metadata(tmp_path, raw, msg):
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pa.table({"prompt_id": ["a"], "pred_tokens": [1.0]})
    pq.write_table(t.replace_schema_metadata({b"lenpred.predictions": raw}), tmp_path / "p.parquet")
    with pytest.raises(DataError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        read_predictions(tmp_path / "p.parquet")
