"""`lenpred collect` end to end on the real embedded model: extension, card checks, the hf engine.

Stopping a collector (SIGKILL, SIGTERM) is tested on the fake engine in test_collect_runner.py; bad
inputs are rows in tests/bad_inputs/collect.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from collect_testing import PROMPTS, run_keys

from lenpred.cli import main
from lenpred.data.rundir import RunDir
from model_testing import needs_llama


def _args(run: Path, prompts: Path, n: int, k: int, *extra: str) -> list[str]:
    return [
        "collect", "--run", str(run), "--source", "jsonl", "--prompts-file", str(prompts),
        "--prompts", str(n), "--samples", str(k), "--max-new-tokens", "16", "--temperature", "1.0",
        "--top-p", "1.0", "--min-p", "0.1", "--no-progress", *extra,
    ]


@needs_llama
def test_collect_extend_and_card(tmp_path, prompt_file, capsys):
    run = tmp_path / "run"
    assert main(_args(run, prompt_file, 2, 2, "--engine", "llamacpp", "--n-parallel", "4")) == 0
    rd = RunDir.open(run)
    first_two = list(rd.prompts().prompt_id)
    assert len(first_two) == 2 and set(first_two) <= {f"q{i}" for i in range(len(PROMPTS))}
    assert sorted(run_keys(run)) == sorted((p, k) for p in first_two for k in range(2))
    card = rd.card
    assert card["model"]["id"] == "smollm2-135m" and card["model"]["fingerprint"].startswith("sha256:")
    assert card["sampling"]["max_new_tokens"] == 16 and card["engine"]["name"] == "llamacpp"
    assert card["prompts"]["dataset_sha256"] and card["model"]["chat_template_sha256"]
    s = rd.samples()
    assert ((s.stop_reason == "length") == (s.n_tokens == 16)).all() and (s.n_tokens <= 16).all()
    assert (s.n_tokens == s.token_ids.map(len)).all()
    # extend: more prompts and more samples under the same card; nothing is redone
    first = set(run_keys(run))
    assert main(_args(run, prompt_file, 3, 3, "--engine", "llamacpp", "--n-parallel", "4")) == 0
    keys = run_keys(run)
    assert len(keys) == len(set(keys)) == 9 and first <= set(keys)
    assert RunDir.open(run).card["targets"] == [{"prompts": 2, "samples": 2}, {"prompts": 3, "samples": 3}]
    # a different card on the same directory: one-line error, exit 1, nothing written
    before = sorted(p.name for p in (run / "samples.parquet").iterdir())
    capsys.readouterr()
    assert main(_args(run, prompt_file, 3, 3, "--engine", "llamacpp", "--seed", "7")) == 1
    err = capsys.readouterr().err
    assert "another card" in err and "sampling.seed" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in (run / "samples.parquet").iterdir()) == before


@pytest.mark.slow
def test_hf_engine_through_the_cli(tmp_path, prompt_file, capsys):
    run = tmp_path / "run"
    argv = _args(run, prompt_file, 2, 2, "--engine", "hf", "--batch-size", "3")
    argv[argv.index("16")] = "12"  # --max-new-tokens 12 keeps this quick on the CPU
    assert main(argv) == 0
    rd = RunDir.open(run)
    assert rd.card["engine"]["name"] == "hf" and rd.card["engine"]["dtype"] == "float32"
    s = rd.samples()
    assert len(s) == 4 and (s.n_tokens <= 12).all() and ((s.stop_reason == "length") == (s.n_tokens == 12)).all()
    assert (s.n_tokens == s.token_ids.map(len)).all()
    assert rd.card["engine_runtime"] == {"batch_size": 3, "device": "cpu"}  # runtime options: bookkeeping only
