"""Bad inputs of `lenpred bench` (rows for tests/test_bad_input.py)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bad_input_harness import BadInput
from lenpred.data.rundir import RunDir
from lenpred.data.split import Split, SplitConfig, write_split
from lenpred.predictions import Predictions


def _run(tmp: Path, split: bool = True) -> RunDir:
    card = {"model": {"id": "m"}, "prompts": {}, "sampling": {"max_new_tokens": 50}, "engine": {"name": "fake"}}
    rd = RunDir.create(tmp / "run", card)
    rd.write_prompts(pd.DataFrame({"prompt_id": ["a", "b"], "idx": [0, 1], "text": ["a", "b"], "n_prompt_tokens": 3}))
    rd.append_samples([{"prompt_id": p, "sample_idx": k, "n_tokens": 5 + k, "stop_reason": "eos"}
                       for p in ("a", "b") for k in range(8)])
    if split:
        write_split(Split(rd.card_hash, SplitConfig(), {"a": "test", "b": "train"}), rd)
    return rd


def _preds(tmp: Path, card_hash: str | None = None, ids: tuple[str, ...] = ("a", "b")) -> Path:
    rd = _run(tmp)
    card = {"card_hash": card_hash} if card_hash else rd.card
    p = Predictions.from_frame(pd.DataFrame({"prompt_id": list(ids), "pred_tokens": 6.0}), made_by="c", card=card)
    return p.write(tmp / "p.parquet")


CASES: list[BadInput] = [
    BadInput("bench-nothing", ["bench", "--run", "{run}", "--out", "{tmp}/o"],
             lambda t: {"run": _run(t).path}, expect="nothing to bench"),
    BadInput("bench-no-split", ["bench", "--run", "{run}", "--predictions", "{tmp}/x.parquet", "--out", "{tmp}/o"],
             lambda t: {"run": _run(t, split=False).path}, expect="has no split yet"),
    BadInput("bench-foreign-predictions", ["bench", "--run", "{tmp}/run", "--predictions", "{p}", "--out", "{tmp}/o"],
             lambda t: {"p": _preds(t, card_hash="0" * 16)}, expect="made for run card 0000000000000000"),
    BadInput("bench-missing-test-prompt", ["bench", "--run", "{tmp}/run", "--predictions", "{p}", "--out", "{tmp}/o"],
             lambda t: {"p": _preds(t, ids=("b",))}, expect="no prediction for 8 of 8 samples"),
    BadInput("bench-n-boot", ["bench", "--run", "{tmp}/run", "--predictions", "{p}", "--n-boot", "3", "--out", "{tmp}/o"],
             lambda t: {"p": _preds(t)}, expect="--n-boot must be at least 10"),
    BadInput("bench-not-a-predictions-file", ["bench", "--run", "{tmp}/run", "--predictions", "{tmp}/run/card.json",
                                              "--out", "{tmp}/o"],
             lambda t: {"r": _run(t).path}, expect="not a readable Parquet file"),
]


# ---------------------------------------------------------------- issue 20: limits, damaged predictions tables
def _raw_preds(tmp: Path, meta: bytes | None = None, pred: object = 6.0) -> dict[str, Path]:
    """A predictions Parquet written by hand: its lenpred.predictions metadata and pred_tokens as given."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    rd = _run(tmp)
    if meta is None:
        meta = json.dumps({"schema_version": 1, "made_by": "hand", "card_hash": rd.card_hash}).encode()
    t = pa.table({"prompt_id": ["a", "b"], "pred_tokens": [pred, pred]})
    pq.write_table(t.replace_schema_metadata({b"lenpred.predictions": meta}), tmp / "p.parquet")
    return {"p": tmp / "p.parquet"}


_BP = ["bench", "--run", "{tmp}/run", "--predictions", "{p}", "--n-boot", "20", "--no-plots", "--out", "{tmp}/o"]

CASES += [
    BadInput("bench-n-boot-runs-away", [*_BP, "--n-boot", "2000000000"], lambda t: {"p": _preds(t)},
             expect="--n-boot 2,000,000,000 is above the limit of 100,000"),
    BadInput("bench-negative-threads", [*_BP, "--threads", "-1"], lambda t: {"p": _preds(t)},
             expect="--threads must be >= 0"),
    BadInput("bench-predictions-metadata-not-json", _BP, lambda t: _raw_preds(t, b"{not json"),
             expect="metadata is not valid JSON"),
    BadInput("bench-predictions-metadata-a-json-list", _BP, lambda t: _raw_preds(t, b"[1, 2]"),
             expect="metadata is a JSON list, not an object"),
    BadInput("bench-predictions-schema-version-a-string", _BP, lambda t: _raw_preds(t, b'{"schema_version": "1"}'),
             expect="schema version '1', expected 1"),
    BadInput("bench-pred-tokens-1e300", _BP, lambda t: _raw_preds(t, pred=1e300),
             expect="at most 10,000,000 tokens"),
    BadInput("bench-pred-tokens-stored-as-strings", _BP, lambda t: _raw_preds(t, pred="6"),
             expect="column pred_tokens holds str values"),
]
