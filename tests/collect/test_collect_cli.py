"""`lenpred collect` end to end on the real embedded model: resume after SIGKILL, extension, card checks.

Bad inputs are rows in tests/bad_inputs/collect.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from model_testing import needs_llama

from lenpred.cli import main
from lenpred.data.rundir import RunDir

PROMPTS = [
    "Name a color.",
    "What is 3 + 4?",
    "Say hello in French.",
    "Give one word that rhymes with cat.",
    "Name a planet.",
    "What is the capital of Italy?",
]


@pytest.fixture()
def prompt_file(tmp_path: Path) -> Path:
    p = tmp_path / "prompts.jsonl"
    p.write_text("".join(json.dumps({"id": f"q{i}", "prompt": t}) + "\n" for i, t in enumerate(PROMPTS)))
    return p


def _args(run: Path, prompts: Path, n: int, k: int, *extra: str) -> list[str]:
    return [
        "collect", "--run", str(run), "--source", "jsonl", "--prompts-file", str(prompts),
        "--prompts", str(n), "--samples", str(k), "--max-new-tokens", "16", "--temperature", "1.0",
        "--top-p", "1.0", "--min-p", "0.1", "--no-progress", *extra,
    ]


def _keys(run: Path) -> list[tuple[str, int]]:
    s = RunDir.open(run).samples(columns=["prompt_id", "sample_idx"])
    return list(zip(s.prompt_id, s.sample_idx, strict=True))


@needs_llama
def test_collect_extend_and_card(tmp_path, prompt_file, capsys):
    run = tmp_path / "run"
    assert main(_args(run, prompt_file, 2, 2, "--engine", "llamacpp", "--n-parallel", "4")) == 0
    rd = RunDir.open(run)
    first_two = list(rd.prompts().prompt_id)
    assert len(first_two) == 2 and set(first_two) <= {f"q{i}" for i in range(len(PROMPTS))}
    assert sorted(_keys(run)) == sorted((p, k) for p in first_two for k in range(2))
    card = rd.card
    assert card["model"]["id"] == "smollm2-135m" and card["model"]["fingerprint"].startswith("sha256:")
    assert card["sampling"]["max_new_tokens"] == 16 and card["engine"]["name"] == "llamacpp"
    assert card["prompts"]["dataset_sha256"] and card["model"]["chat_template_sha256"]
    s = rd.samples()
    assert ((s.stop_reason == "length") == (s.n_tokens == 16)).all() and (s.n_tokens <= 16).all()
    assert (s.n_tokens == s.token_ids.map(len)).all()
    # extend: more prompts and more samples under the same card; nothing is redone
    first = set(_keys(run))
    assert main(_args(run, prompt_file, 3, 3, "--engine", "llamacpp", "--n-parallel", "4")) == 0
    keys = _keys(run)
    assert len(keys) == len(set(keys)) == 9 and first <= set(keys)
    assert RunDir.open(run).card["targets"] == [{"prompts": 2, "samples": 2}, {"prompts": 3, "samples": 3}]
    # a different card on the same directory: one-line error, exit 1, nothing written
    before = sorted(p.name for p in (run / "samples.parquet").iterdir())
    capsys.readouterr()
    assert main(_args(run, prompt_file, 3, 3, "--engine", "llamacpp", "--seed", "7")) == 1
    err = capsys.readouterr().err
    assert "another card" in err and "sampling.seed" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in (run / "samples.parquet").iterdir()) == before


@needs_llama
def test_sigkill_then_resume_loses_and_duplicates_nothing(tmp_path, prompt_file):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "lenpred.cli", *_args(run, prompt_file, 4, 3, "--engine", "llamacpp", "--n-parallel", "2", "--shard-size", "1")]
    errlog = open(tmp_path / "collect.err", "w+b")  # a file, not a pipe: a full pipe would block the child
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errlog)
    shards = run / "samples.parquet"
    deadline = time.time() + 240
    while time.time() < deadline:
        if shards.is_dir() and len(list(shards.glob("part-*.parquet"))) >= 3:
            break
        if proc.poll() is not None:
            pytest.fail(f"collect ended before it could be killed: {(tmp_path / 'collect.err').read_text()[-500:]}")
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = _keys(run)
    assert 3 <= len(partial) < 12 and len(set(partial)) == len(partial)
    # restart with the same arguments
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-800:]
    keys = _keys(run)
    expected = {(pid, k) for pid in RunDir.open(run).prompts().prompt_id[:4] for k in range(3)}
    assert len(keys) == 12 and set(keys) == expected
    assert set(partial) <= set(keys)
    assert not list(run.rglob("*.tmp"))


def test_help_lists_every_verb_with_example(capsys):
    from lenpred.cli import VERBS

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for verb, (_, _, example) in VERBS.items():
        assert verb in out and example in out
    with pytest.raises(SystemExit):
        main(["collect", "--help"])
    assert "example:" in capsys.readouterr().out


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


@needs_llama
def test_sigterm_flushes_the_buffer(tmp_path, prompt_file):
    """A polite stop (SIGTERM, Ctrl-C) writes what was generated since the last shard, then exits 130."""
    run = tmp_path / "run"
    args = _args(run, prompt_file, 6, 4, "--engine", "llamacpp", "--n-parallel", "1", "--shard-size", "1000", "--flush-seconds", "1000")
    errlog = open(tmp_path / "collect.err", "w+b")
    proc = subprocess.Popen([sys.executable, "-m", "lenpred.cli", *args], stdout=subprocess.DEVNULL, stderr=errlog)
    deadline = time.time() + 120
    while time.time() < deadline and not (run / "prompts.parquet").exists():  # the engine is up once prompts are written
        time.sleep(0.1)
    time.sleep(4)  # let a few samples finish into the in-memory buffer
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 130, (tmp_path / "collect.err").read_text()[-500:]
    written = _keys(run)
    assert 1 <= len(written) < 24 and len(set(written)) == len(written)
    assert main(args) == 0
    assert len(set(_keys(run))) == len(_keys(run)) == 24
