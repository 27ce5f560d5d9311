"""The collect runner with a fake engine (collect_testing.FakeEngine): resume and extension bookkeeping,
corrupt shards set aside and regenerated, nothing written when the engine fails before a sample.

The fake engine is deterministic (sample (p, k) has ``seed % 7`` tokens), so a regenerated sample
must equal the one it replaces. The real tokenizer builds the prompt table (as in every run).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lenpred.cli import main
from lenpred.collect.base import sample_seed
from lenpred.collect.runner import CollectConfig, prepare
from lenpred.data.rundir import RunDir

PROMPTS = ["Name a color.", "What is 3 + 4?", "Say hello in French.", "Name a planet."]


@pytest.fixture()
def prompt_file(tmp_path: Path) -> Path:
    p = tmp_path / "prompts.jsonl"
    p.write_text("".join(json.dumps({"id": f"q{i}", "prompt": t}) + "\n" for i, t in enumerate(PROMPTS)))
    return p


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
