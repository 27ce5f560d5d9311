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
