"""`lenpred draft cache`: every sample of the chosen split roles teacher-forced into the state cache
that draft training and OUTLETS read, in role order, resumable, with a corrupt shard set aside and
regenerated."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from draft_helpers import tiny_llama, tiny_run, tiny_split

from lenpred.draft.states import StateCache
from lenpred.draft.target import Target
from lenpred.draft.train import TrainJob, train_draft
from lenpred.draft.train_config import DraftTrainConfig
from lenpred.draft.train_data import DraftSource, fill_state_cache, state_cache_jobs

SPEC = SimpleNamespace(id="tiny", fingerprint="sha256:" + "ab" * 32)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def setup(tmp_path):
    model = tiny_llama(init=0.1)
    run = tiny_run(tmp_path / "run", model, n_prompts=8, n_samples=2, max_new=12)
    split = tiny_split(run, n_val=2, n_test=2)  # p0..p3 train, p4 p5 val, p6 p7 test
    return Target(model), run, split


def test_jobs_cover_every_sample_of_the_roles_in_role_order(setup) -> None:
    _, run, split = setup
    jobs = state_cache_jobs(run, split, ("test", "train"), max_seq_len=2048)
    assert [p for p, _, _ in jobs] == ["p6", "p7", "p0", "p1", "p2", "p3"]
    assert all([i for i, _, _ in ss] == [0, 1] for _, _, ss in jobs)
    # cut exactly as draft training cuts: prompt to max_seq_len - 1, response to the rest
    short = state_cache_jobs(run, split, ("train",), max_seq_len=6)
    for _, p_ids, ss in short:
        assert len(p_ids) <= 5 and all(len(p_ids) + len(r) <= 6 for _, r, _ in ss)


def test_fill_is_resumable_and_is_the_cache_training_reads(setup, tmp_path) -> None:
    target, run, split = setup
    cfg = DraftTrainConfig(draft_vocab_size=48, ttt_steps=1, max_steps=1, warmup_steps=1, topk=8, eval_every=0,
                           checkpoint_every=1)
    cdir, tf, n = fill_state_cache(DraftSource(run, split, target, SPEC), cfg, cache_dir=tmp_path / "c", roles=("train",),
                                   progress=False)
    cache = StateCache.open(cdir)
    assert {p for p, _ in cache.done_keys()} == {"p0", "p1", "p2", "p3"}
    assert n == tf["tokens"] > 0
    # growing to val and test adds only the new samples: the old shards stay as they are
    before = {f.name: f.read_bytes() for f in cdir.glob("shard-*")}
    _, tf2, n2 = fill_state_cache(DraftSource(run, split, target, SPEC), cfg, cache_dir=cdir, progress=False)
    assert {p for p, _ in StateCache.open(cdir).done_keys()} == {f"p{i}" for i in range(8)}
    assert all((cdir / k).read_bytes() == v for k, v in before.items())
    assert n2 == n + tf2["tokens"]
    # a third call has nothing to do
    assert fill_state_cache(DraftSource(run, split, target, SPEC), cfg, cache_dir=cdir, progress=False)[1]["tokens"] == 0
    # draft training finds every sample it needs in it (no new shard)
    shards = sorted(f.name for f in cdir.glob("shard-*"))
    train_draft(TrainJob(DraftSource(run, split, target, SPEC), cfg, tmp_path / "h", 95, cache_dir=cdir,
                         ckpt_dir=tmp_path / "ck", progress=False))
    assert sorted(f.name for f in cdir.glob("shard-*")) == shards


@pytest.mark.parametrize("damage", ["truncate", "garbage_index"])
def test_a_corrupt_shard_is_set_aside_named_and_regenerated(setup, tmp_path, capsys, damage) -> None:
    target, run, split = setup
    cfg = DraftTrainConfig(topk=8)
    cdir, _, _ = fill_state_cache(DraftSource(run, split, target, SPEC), cfg, cache_dir=tmp_path / "c", progress=False)
    cache = StateCache.open(cdir)
    keys = sorted(cache.done_keys())
    want = {k: cache.load(k) for k in keys}
    name = cache.shard_names()[0]
    lost = {k for k, v in cache.index().items() if v[0] == name}
    if damage == "truncate":
        f = cdir / f"{name}.safetensors"
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    else:
        (cdir / f"{name}.json").write_text("{not json")
    reopened = StateCache.open(cdir)
    assert set(reopened.done_keys()) == set(keys) - lost
    err = capsys.readouterr().err
    assert name in err and "corrupt" in err
    assert (cdir / "corrupt" / f"{name}.safetensors").is_file()
    _, tf, _ = fill_state_cache(DraftSource(run, split, target, SPEC), cfg, cache_dir=cdir, progress=False)
    assert tf["tokens"] == sum(len(want[k].tokens) - want[k].n_prompt for k in lost)
    again = StateCache.open(cdir)
    assert sorted(again.done_keys()) == keys
    for k in lost:
        got = again.load(k)
        assert np.array_equal(got.tokens, want[k].tokens)
        assert np.allclose(got.aux.astype(np.float32), want[k].aux.astype(np.float32), atol=1e-2)
