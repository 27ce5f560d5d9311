"""The collect runner with a fake engine (collect_testing.FakeEngine): resume and extension bookkeeping,
corrupt shards set aside and regenerated, nothing written when the engine fails before a sample, a
collector stopped by SIGKILL or SIGTERM in a child process (held by the engine until it is stopped,
so the tests wait on evidence, never on the machine's speed).

The fake engine is deterministic (sample (p, k) has ``seed % 7`` tokens), so a regenerated sample
must equal the one it replaces. The real tokenizer builds the prompt table (as in every run).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from collect_testing import HOLDING, run_keys

from lenpred.cli import main
from lenpred.collect.base import sample_seed
from lenpred.collect.runner import CollectConfig, prepare
from lenpred.data.rundir import RunDir


def _args(run: Path, prompts: Path, n: int, k: int, *extra: str) -> list[str]:
    return ["collect", "--engine", "fake", "--run", str(run), "--source", "jsonl", "--prompts-file", str(prompts),
            "--prompts", str(n), "--samples", str(k), "--max-new-tokens", "16", "--no-progress", *extra]


def _rows(run: Path) -> list[tuple[str, int, int, tuple[int, ...]]]:
    s = RunDir.open(run).samples()
    return sorted(zip(s.prompt_id, s.sample_idx, s.n_tokens, s.token_ids.map(tuple), strict=True))


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_rerun_with_fewer_prompts_adds_nothing(tmp_path, prompt_file, fake_engine, capsys):
    """Regression (pandas 3 keeps DataFrame.attrs through Parquet): a rerun with a smaller --prompts
    than the stored prompt table used to rewrite the table short and fail "prompt list no longer
    starts with the prompts already collected"."""
    run = tmp_path / "run"
    assert main(_args(run, prompt_file, 3, 2)) == 0
    table = (run / "prompts.parquet").read_bytes()
    rows = _rows(run)
    assert len(rows) == 6 and fake_engine.created == 1
    cfg = CollectConfig.from_dict({"run_dir": str(run), "engine": "fake", "n_prompts": 2, "samples": 2,
                                   "prompts": {"source": "jsonl", "path": str(prompt_file)}, "sampling": {"max_new_tokens": 16}})
    plan = prepare(cfg)
    assert len(plan.prompts) == 2 and "filter_stats" not in plan.prompts.attrs  # the stored table, not a new one
    assert plan.done == {(p, k) for p, k, _, _ in rows}
    capsys.readouterr()
    assert main(_args(run, prompt_file, 2, 2)) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["new_samples"] == 0 and out["total_samples"] == 6
    assert (run / "prompts.parquet").read_bytes() == table and _rows(run) == rows
    assert fake_engine.created == 1  # nothing to do: no engine is even built
    assert RunDir.open(run).card["targets"] == [{"prompts": 3, "samples": 2}, {"prompts": 2, "samples": 2}]


def test_extension_generates_exactly_the_missing_keys(tmp_path, prompt_file, fake_engine):
    run = tmp_path / "run"
    assert main(_args(run, prompt_file, 2, 2)) == 0
    first = {(j.prompt_id, j.sample_idx) for j in fake_engine.jobs}
    assert main(_args(run, prompt_file, 3, 3)) == 0
    second = [(j.prompt_id, j.sample_idx) for j in fake_engine.jobs][len(first):]
    pids = list(RunDir.open(run).prompts().prompt_id)
    assert len(pids) == 3 and set(second) == {(p, k) for p in pids for k in range(3)} - first and len(second) == 5
    assert all(j.seed == sample_seed(0, j.prompt_id, j.sample_idx) for j in fake_engine.jobs)


def test_corrupt_shard_is_set_aside_and_its_samples_regenerated(tmp_path, prompt_file, fake_engine, capsys):
    run = tmp_path / "run"
    assert main(_args(run, prompt_file, 3, 2, "--shard-size", "2")) == 0
    rows = _rows(run)
    shards = RunDir.open(run).shard_paths()
    assert [s.name for s in shards] == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    lost = sorted(zip(*pq.read_table(shards[1], columns=["prompt_id", "sample_idx"]).to_pydict().values(), strict=True))
    data = shards[1].read_bytes()
    shards[1].write_bytes(data[: len(data) // 2])  # truncated to half its bytes
    capsys.readouterr()
    assert main(["info", str(run)]) == 1
    err = capsys.readouterr().err
    assert "part-00001.parquet is not a readable Parquet file" in err and len(err.strip().splitlines()) == 1
    n_jobs = len(fake_engine.jobs)
    assert main(_args(run, prompt_file, 3, 2, "--shard-size", "2")) == 0
    io = capsys.readouterr()
    assert "part-00001.parquet cannot be read: set aside as part-00001.parquet.corrupt" in io.err
    assert json.loads(io.out)["set_aside"] == [str(shards[1]) + ".corrupt"]
    redone = sorted((j.prompt_id, j.sample_idx) for j in fake_engine.jobs[n_jobs:])
    assert redone == lost and len(lost) == 2  # exactly the lost samples, nothing else
    assert _rows(run) == rows  # the same samples again (per-sample seeds)
    assert (run / "samples.parquet" / "part-00001.parquet.corrupt").read_bytes() == data[: len(data) // 2]
    assert sorted(p.name for p in (run / "samples.parquet").iterdir()) == [
        "part-00000.parquet", "part-00001.parquet.corrupt", "part-00002.parquet", "part-00003.parquet",
    ]  # the new shard does not reuse the number of the one set aside
    assert main(["info", str(run)]) == 0


def test_engine_failure_before_a_sample_writes_nothing(tmp_path, prompt_file, fake_engine, capsys):
    run = tmp_path / "run"
    assert main(_args(run, prompt_file, 2, 2, "--fail-after", "0")) == 1
    assert "scripted failure" in capsys.readouterr().err
    assert not run.exists()  # no directory, card or prompt table for a run that produced nothing
    assert main(_args(run, prompt_file, 2, 2)) == 0
    before = _files(run)
    assert main(_args(run, prompt_file, 3, 3, "--fail-after", "0")) == 1  # an extension that fails at once
    assert _files(run) == before  # targets, prompt table, bookkeeping: untouched


def test_failure_after_some_samples_keeps_them(tmp_path, prompt_file, fake_engine):
    run = tmp_path / "run"
    assert main(_args(run, prompt_file, 3, 2, "--fail-after", "4", "--shard-size", "100")) == 1
    assert len(_rows(run)) == 4  # the buffer is flushed on the way out
    assert main(_args(run, prompt_file, 3, 2)) == 0
    assert len(_rows(run)) == 6


def test_an_option_of_another_engine_is_refused(tmp_path, prompt_file, fake_engine, capsys):
    assert main(_args(tmp_path / "run", prompt_file, 1, 1, "--n-parallel", "4")) == 1
    err = capsys.readouterr().err
    assert "--n-parallel is an option of the llamacpp engine, and this run uses --engine fake" in err
    assert not (tmp_path / "run").exists()


def test_a_second_collector_on_the_same_run_is_refused(tmp_path, prompt_file, fake_engine, capsys):
    """Two collectors on one run would generate the same missing samples twice: the second is refused
    (naming the first's pid), writes nothing; once the first is gone the run continues."""
    import os

    from lenpred.collect.runner import run_lock

    run = tmp_path / "run"
    with run_lock(run):  # another collector holds the run
        rc = main(_args(run, prompt_file, 3, 2))
        err = capsys.readouterr().err
        assert rc != 0 and f"another lenpred collect (pid {os.getpid()}) is writing to {run}" in err
        assert not run.exists() and fake_engine.created == 0
    assert main(_args(run, prompt_file, 3, 2)) == 0
    assert len(_rows(run)) == 6


def test_the_run_lock_leaves_nothing_behind(tmp_path):
    from lenpred.collect.runner import run_lock

    run = tmp_path / "new" / "deeper" / "run"
    with run_lock(run):
        assert (tmp_path / "new" / "deeper" / ".run.collect.lock").is_file()
    assert list(tmp_path.iterdir()) == []  # the lock file and the folders made for it are gone
    with run_lock(run):  # and it can be taken again
        pass


@contextmanager
def _collector(args: list[str], errlog: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``lenpred collect`` with the fake engine in a child process, killed on the way out if it is
    still running; stderr goes to a file (a full pipe would block the child)."""
    script = Path(__file__).resolve().parent / "collect_testing.py"
    with open(errlog, "wb") as err:
        proc = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.DEVNULL, stderr=err)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _wait_until(proc: subprocess.Popen[bytes], errlog: Path, ready: Callable[[], bool], what: str) -> None:
    """Poll for evidence; the generous deadline only turns a broken collector into a failure, and a
    collector held by its engine cannot finish first."""
    deadline = time.monotonic() + 300
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"collect ended (exit {proc.returncode}) before {what}: {errlog.read_text()[-800:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no sign of {what} in 300 s: {errlog.read_text()[-800:]}")
        time.sleep(0.05)


def test_sigkill_then_resume_loses_and_duplicates_nothing(tmp_path, prompt_file, fake_engine):
    """Killed at an arbitrary moment (here: after 3 to 8 one-sample shards, mid-write on a slow machine,
    held on a fast one), a run keeps its whole shards, and a rerun generates exactly the rest."""
    run, errlog = tmp_path / "run", tmp_path / "collect.err"
    args = _args(run, prompt_file, 4, 3, "--shard-size", "1")
    with _collector([*args, "--hold-after", "8"], errlog) as proc:
        _wait_until(proc, errlog, lambda: len(list(run.glob("samples.parquet/part-*.parquet"))) >= 3, "3 shards")
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=120) == -signal.SIGKILL
    partial = run_keys(run)
    assert 3 <= len(partial) <= 8 and len(set(partial)) == len(partial)
    assert main(args) == 0  # the same arguments again
    keys = run_keys(run)
    expected = {(pid, k) for pid in RunDir.open(run).prompts().prompt_id[:4] for k in range(3)}
    assert len(keys) == 12 and set(keys) == expected and set(partial) <= set(keys)
    assert sorted((j.prompt_id, j.sample_idx) for j in fake_engine.jobs) == sorted(expected - set(partial))
    assert not list(run.rglob("*.tmp"))


def test_sigterm_flushes_the_buffer(tmp_path, prompt_file, fake_engine):
    """A polite stop (SIGTERM, Ctrl-C) writes what was generated since the last shard, then exits 130."""
    run, errlog = tmp_path / "run", tmp_path / "collect.err"
    args = _args(run, prompt_file, 3, 2, "--shard-size", "100", "--flush-seconds", "1000")
    with _collector([*args, "--hold-after", "4"], errlog) as proc:
        _wait_until(proc, errlog, lambda: HOLDING in errlog.read_text(), "the engine holding after 4 samples")
        assert not list(run.glob("samples.parquet/part-*"))  # the 4 samples are in the buffer only
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 130, errlog.read_text()[-800:]
    assert "interrupted (written shards are kept; rerun to resume)" in errlog.read_text()
    assert [p.name for p in RunDir.open(run).shard_paths()] == ["part-00000.parquet"]  # one flush on the way out
    written = run_keys(run)
    assert len(written) == len(set(written)) == 4
    assert main(args) == 0
    keys = run_keys(run)
    assert len(keys) == len(set(keys)) == 6 and set(written) <= set(keys)
    assert len(fake_engine.jobs) == 2  # only the two samples the stop left out
