"""Bad inputs of `lenpred bench` and of the benchmarks' flags (rows for tests/test_bad_input.py)."""

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


# ---------------------------------------------------------------- issue 39: the benchmarks' numeric list flags
_WO = ["--work", "{tmp}/w", "--out", "{tmp}/o"]  # a study's work and report folders: nothing may appear there


CASES += [
    # a ValueError traceback before: int('abc') on --seeds
    BadInput("bench-yardstick-seeds-not-integers", ["--seeds", "abc", "--dry-run", *_WO],
             expect="argument --seeds: 'abc' is not an integer -- fix: pass comma-separated integers, e.g. 0,1,2",
             entry="benchmarks.bench_yardstick"),
    BadInput("bench-yardstick-batches-not-integers", ["--batches", "16,big", "--dry-run", *_WO],
             expect="argument --batches: 'big' is not an integer", entry="benchmarks.bench_yardstick"),
    # the other benchmarks' numeric lists, read by the same argparse types (benchmarks/flags.py); before: a
    # ValueError traceback (policies; features and spec after loading the model), or an error line with no
    # program name (kv, sim_real)
    BadInput("bench-policies-seeds-not-integers", ["--seeds", "0,one", "--report-only", *_WO],
             expect="argument --seeds: 'one' is not an integer", entry="benchmarks.bench_policies"),
    BadInput("bench-kv-loads-not-numbers", ["--loads", "0.9,high", "--report-only", *_WO],
             expect="argument --loads: 'high' is not a number -- fix: pass comma-separated numbers",
             entry="benchmarks.bench_kv"),
    BadInput("bench-value-unknown-regime", ["--regimes", "hetero,nope", "--dry-run", *_WO],
             expect="unknown regime(s) ['nope'] -- fix: use one or more of hetero, bimodal, kv",
             entry="benchmarks.bench_value"),
    BadInput("bench-value-seeds-not-integers", ["--seeds", "0,x", "--dry-run", *_WO],
             expect="argument --seeds: 'x' is not an integer", entry="benchmarks.bench_value"),
    BadInput("bench-sim-real-loads-not-numbers", ["--run", "{tmp}/run", "--loads", "1.1x", "--out", "{tmp}/o"],
             expect="argument --loads: '1.1x' is not a number", entry="benchmarks.bench_sim_real"),
    BadInput("bench-features-batch-sizes-not-integers", ["--run", "{tmp}/run", "--batch-sizes", "8,16.5"],
             expect="argument --batch-sizes: '16.5' is not an integer", entry="benchmarks.bench_features"),
    BadInput("bench-spec-ks-not-integers", ["--run", "{tmp}/run", "--draft", "{tmp}/d", "--ks", "1,2,x"],
             expect="argument --ks: 'x' is not an integer", entry="benchmarks.bench_spec"),
]
