"""Hard labels (issue 38 part 4): a state cache of the states-only pass (no logits), the cross-entropy
against the run's own next sampled token, training on such a cache, and resuming both."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from draft_helpers import tiny_head, tiny_llama, tiny_run, tiny_split

from lenpred.draft.io import load_draft
from lenpred.draft.loss import HardTTTLoss, TTTLoss
from lenpred.draft.states import SampleStates, StateCache
from lenpred.draft.target import Target
from lenpred.draft.train import TrainJob, train_draft
from lenpred.draft.train_config import DraftTrainConfig
from lenpred.draft.train_data import (
    DraftSource,
    cache_location,
    check_cache_labels,
    fill_state_cache,
    state_cache_jobs,
)
from lenpred.errors import DataError

SPEC = SimpleNamespace(id="tiny", fingerprint="sha256:" + "ab" * 32)
EOS = 95

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# the runs are only read: made once for the module (sampling them is most of the tests' time)
@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    model = tiny_llama(init=0.1)
    run = tiny_run(tmp_path_factory.mktemp("small") / "run", model, n_prompts=8, n_samples=2, max_new=12)
    split = tiny_split(run, n_val=2, n_test=2)  # p0..p3 train, p4 p5 val, p6 p7 test
    return Target(model), run, split


@pytest.fixture(scope="module")
def bigram(tmp_path_factory):
    """A bigram target (learnable from a few hundred tokens), peaked enough that its samples are a
    usable signal (hard labels carry one draw of the distribution, not the distribution), and its run."""
    model = tiny_llama(init=0.5, passthrough_from=0)
    run = tiny_run(tmp_path_factory.mktemp("bigram") / "run", model, n_prompts=12, n_samples=2, max_new=30)
    return Target(model), run, tiny_split(run, n_val=3)


def _fill(setup, cdir, labels, roles=("train",)):
    target, run, split = setup
    return fill_state_cache(DraftSource(run, split, target, SPEC), DraftTrainConfig(topk=8), cache_dir=cdir,
                            roles=roles, progress=False, labels=labels)


# ------------------------------------------------------------------------------------------ the cache
def test_a_hard_cache_holds_no_logits_and_the_states_of_a_full_pass(setup, tmp_path) -> None:
    target, run, split = setup
    cdir, tf, n = _fill(setup, tmp_path / "c", "hard")
    cache = StateCache.open(cdir)
    assert cache.labels == "hard" and cache.manifest["topk"] == 0 and n == tf["tokens"] > 0
    from safetensors import safe_open

    for name in cache.shard_names():
        with safe_open(str(cdir / f"{name}.safetensors"), framework="np") as f:
            assert set(f.keys()) == {"aux", "tokens"}  # no top-k arrays
    jobs = {p: (ids, {i: r for i, r, _ in ss}) for p, ids, ss in state_cache_jobs(run, split, ("train",))}
    for key in sorted(cache.done_keys()):
        st = cache.load(key)
        p_ids, resp = jobs[key[0]]
        assert st.tokens.tolist() == p_ids + resp[key[1]] and st.n_prompt == len(p_ids)
        assert st.topk_ids.shape == (len(resp[key[1]]), 0) and st.topk_logp.shape == (len(resp[key[1]]), 0)
        with torch.no_grad():  # what one full teacher-forced pass (LM head included) gives, float16-close
            _, aux = target.forward(torch.from_numpy(st.tokens.astype(np.int64))[None])
        assert np.allclose(st.aux, aux[0].numpy(), atol=2e-2 * float(aux.abs().max()), rtol=1e-2)
    # its default directory is not a soft cache's
    cfg = DraftTrainConfig(topk=8)
    hard_dir = cache_location(run, target, SPEC, cfg, None, "hard")[0]
    soft_dir = cache_location(run, target, SPEC, cfg, None, "soft")[0]
    assert hard_dir.name.endswith("-hard") and soft_dir.name.endswith("-k8") and hard_dir.parent == soft_dir.parent


@pytest.mark.parametrize("made, asked", [("hard", "soft"), ("soft", "hard")])
def test_a_cache_refuses_the_other_label_kind(setup, tmp_path, made, asked) -> None:
    cdir, _, _ = _fill(setup, tmp_path / "c", made)
    before = {f.name: f.read_bytes() for f in cdir.iterdir() if f.is_file()}
    with pytest.raises(DataError, match=f"holds {made} labels") as e:
        _fill(setup, cdir, asked, roles=("train", "val"))
    assert f"--labels {made} to extend it" in e.value.fix and "another --cache" in e.value.fix
    with pytest.raises(DataError, match=f"holds {made} labels"):
        check_cache_labels(cdir, asked)  # what `lenpred draft cache` checks before the target loads
    check_cache_labels(cdir, made)
    assert {f.name: f.read_bytes() for f in cdir.iterdir() if f.is_file()} == before  # untouched
    # the same kind extends it
    _, tf, _ = _fill(setup, cdir, made, roles=("train", "val"))
    assert tf["tokens"] > 0 and StateCache.open(cdir).labels == made


def test_an_interrupted_hard_fill_resumes_without_loss_or_duplicates(setup, tmp_path) -> None:
    target, run, split = setup
    jobs = state_cache_jobs(run, split, ("train", "val", "test"))
    cfg = DraftTrainConfig(topk=8)
    _, manifest = cache_location(run, target, SPEC, cfg, tmp_path / "a", "hard")
    whole = StateCache.open_or_create(tmp_path / "a", manifest)
    whole.build(target, jobs, prompts_per_shard=1)

    seen = []

    def kill(n: int, _s: int) -> None:
        seen.append(n)
        if len(seen) == 5:  # in the third prompt (two samples each): two shards written, the third not
            raise KeyboardInterrupt

    cut = StateCache.open_or_create(tmp_path / "b", manifest)
    with pytest.raises(KeyboardInterrupt):
        cut.build(target, jobs, prompts_per_shard=1, progress=kill)
    before = StateCache.open(tmp_path / "b").done_keys()
    assert 0 < len(before) < len(whole.done_keys())
    assert not list((tmp_path / "b").glob(".*.tmp"))  # nothing half-written is left where a shard would be
    again = StateCache.open_or_create(tmp_path / "b", manifest)
    tf = again.build(target, jobs, prompts_per_shard=1)
    assert tf["tokens"] == whole.n_tokens() - whole.n_tokens(before)  # only what was missing
    b = StateCache.open(tmp_path / "b")
    listed = [(s["prompt_id"], int(s["sample_idx"])) for name in b.shard_names()
              for s in json.loads((tmp_path / "b" / f"{name}.json").read_text())["samples"]]
    assert len(listed) == len(set(listed)) == len(whole.done_keys())  # nothing lost, nothing twice
    assert set(listed) == whole.done_keys()
    for k in listed:
        x, y = b.load(k), whole.load(k)
        assert np.array_equal(x.tokens, y.tokens) and np.array_equal(x.aux, y.aux)


def test_slices_of_one_cache_fill_it_together_with_nothing_lost_or_twice(setup, tmp_path) -> None:
    """`draft cache --shard I/N`: N processes fill one cache, each its own prompts under its own shard
    names (no name two writers could both pick), and together they hold what one fill holds."""
    target, run, split = setup
    roles = ("train", "val", "test")
    whole_dir, _, n_whole = _fill(setup, tmp_path / "whole", "hard", roles=roles)
    cfg, src = DraftTrainConfig(topk=8), DraftSource(run, split, target, SPEC)
    got = [fill_state_cache(src, cfg, cache_dir=tmp_path / "c", roles=roles, progress=False, labels="hard",
                            shard=(i, 3)) for i in range(3)]
    cache, whole = StateCache.open(tmp_path / "c"), StateCache.open(whole_dir)
    names = cache.shard_names()
    assert {n.split("-")[1] for n in names} == {"s0of3", "s1of3", "s2of3"}  # each slice names its own shards
    listed = [(s["prompt_id"], int(s["sample_idx"])) for name in names
              for s in json.loads((tmp_path / "c" / f"{name}.json").read_text())["samples"]]
    assert len(listed) == len(set(listed)) and set(listed) == whole.done_keys()
    assert sum(int(t["tokens"]) for _, t, _ in got) == n_whole  # every response token once, over the slices
    prompts = [{k[0] for k in listed if cache.index()[k][0].startswith(f"shard-s{i}of3-")} for i in range(3)]
    assert not (prompts[0] & prompts[1]) and not (prompts[1] & prompts[2]) and all(prompts)  # disjoint prompts
    for k in listed:
        x, y = cache.load(k), whole.load(k)
        assert np.array_equal(x.tokens, y.tokens) and np.array_equal(x.aux, y.aux)
    # a slice run again has nothing left to do; an unsliced fill of the same cache neither
    assert fill_state_cache(src, cfg, cache_dir=tmp_path / "c", roles=roles, progress=False, labels="hard",
                            shard=(1, 3))[1]["tokens"] == 0
    assert _fill(setup, tmp_path / "c", "hard", roles=roles)[1]["tokens"] == 0


def test_a_bfloat16_states_pass_is_recorded_and_kept(setup, tmp_path) -> None:
    target, run, split = setup
    src, cfg = DraftSource(run, split, target, SPEC), DraftTrainConfig(topk=8)
    f32_dir, _, _ = _fill(setup, tmp_path / "f32", "hard")
    cdir, tf, _ = fill_state_cache(src, cfg, cache_dir=tmp_path / "bf", roles=("train",), progress=False,
                                   labels="hard", compute_dtype="bfloat16")
    bf, f32 = StateCache.open(cdir), StateCache.open(f32_dir)
    assert bf.compute_dtype == "bfloat16" and f32.compute_dtype == "float32" and tf["tokens"] > 0
    diffs = []
    for k in sorted(f32.done_keys()):
        x, y = bf.load(k), f32.load(k)
        assert np.array_equal(x.tokens, y.tokens)
        scale = float(np.abs(y.aux.astype(np.float32)).max())
        diffs.append(float(np.abs(x.aux.astype(np.float32) - y.aux.astype(np.float32)).max()) / scale)
    assert max(diffs) < 0.05 and max(diffs) > 0  # bfloat16 arithmetic: close to float32, not the same numbers
    # the cache keeps its arithmetic: float32 states are not added to it (nor bfloat16 ones to a float32 cache)
    with pytest.raises(DataError, match="computed in bfloat16") as e:
        fill_state_cache(src, cfg, cache_dir=cdir, roles=("train", "val"), progress=False, labels="hard")
    assert "--compute-dtype bfloat16" in e.value.fix
    with pytest.raises(DataError, match="computed in float32"):
        fill_state_cache(src, cfg, cache_dir=f32_dir, roles=("train", "val"), progress=False, labels="hard",
                         compute_dtype="bfloat16")
    # training reads the arithmetic from the cache, as it reads the labels
    assert cache_location(run, target, SPEC, cfg, cdir)[1]["compute_dtype"] == "bfloat16"
    # the default directories differ, and soft labels are float32 only
    assert cache_location(run, target, SPEC, cfg, None, "hard", "bfloat16")[0].name.endswith("-hard-bf16")
    with pytest.raises(DataError, match="soft labels are computed in float32"):
        fill_state_cache(src, cfg, cache_dir=tmp_path / "soft", roles=("train",), progress=False, labels="soft",
                         compute_dtype="bfloat16")
    assert not (tmp_path / "soft").exists()


# ------------------------------------------------------------------------------------------ the loss
def _planted(model, tokens, stop, n_prompt=2, n_draft=16, ttt_steps=1):
    """A one-sample batch on a head whose draft vocabulary is the target ids 0..14 and EOS."""
    counts = np.zeros(model.config.vocab_size, np.int64)
    counts[:15] = np.arange(100, 85, -1)
    counts[EOS] = 1000
    head = tiny_head(model, n_draft, counts=counts)
    head.attach_embeddings(model.get_input_embeddings())
    aux = np.random.default_rng(0).normal(size=(len(tokens), 3 * model.config.hidden_size)).astype(np.float16)
    n_r = len(tokens) - n_prompt
    s = SampleStates("p", 0, n_prompt, np.asarray(tokens, np.int32), aux, np.zeros((n_r, 0), np.int32),
                     np.zeros((n_r, 0), np.float16), stop)
    cfg = DraftTrainConfig(draft_vocab_size=n_draft, ttt_steps=ttt_steps, max_seq_len=64)
    return head, s, cfg


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64)
    m = z.max()
    return z - m - np.log(np.exp(z - m).sum())


def _by_hand(head, s, step, cols, labels):
    """-mean log q(label) at ``cols`` of unroll ``step``, log-softmax in float64 by hand."""
    with torch.no_grad():
        o = head.ttt(torch.from_numpy(s.aux.astype(np.float32))[None], torch.from_numpy(s.tokens.astype(np.int64))[None],
                     step + 1)[step]
        z = head.logits(o[0]).numpy()  # (T, N_draft)
    t2d = head.t2d.numpy()
    d = {int(t): i for i, t in enumerate(np.flatnonzero(t2d))}
    lp = [_log_softmax(z[t])[d[y]] for t, y in zip(cols, labels, strict=True)]
    acc = [float(np.argmax(z[t]) == d[y]) for t, y in zip(cols, labels, strict=True)]
    return -float(np.mean(lp)), float(np.mean(acc))


def test_the_hard_loss_is_the_cross_entropy_of_the_next_sampled_token() -> None:
    model = tiny_llama(init=0.1)
    # prompt 5 6, response 7 8; stopped at EOS: column 1 predicts 8, column 2 (the last) predicts EOS
    head, s, cfg = _planted(model, [5, 6, 7, 8], "eos", ttt_steps=2)
    loss_fn = HardTTTLoss(head, cfg, model.config.vocab_size, EOS)
    with torch.no_grad():
        total, losses, accs, counts = loss_fn([s])
    want0, acc0 = _by_hand(head, s, 0, [1, 2], [8, EOS])
    want1, acc1 = _by_hand(head, s, 1, [1], [EOS])  # step 1, column 1 predicts x_4: past the end, EOS
    assert counts == [2, 1]
    assert losses[0] == pytest.approx(want0, abs=1e-5) and losses[1] == pytest.approx(want1, abs=1e-5)
    assert accs == [acc0, acc1]
    assert float(total) == pytest.approx(want0 + 0.8 * want1, abs=1e-5)
    # the same numbers as soft labels that put all their mass on the sampled token
    soft = SampleStates(s.prompt_id, 0, 2, s.tokens, s.aux, np.array([[8], [EOS]], np.int32),
                        np.zeros((2, 1), np.float16), "eos")
    with torch.no_grad():
        st, sl, sa, sc = TTTLoss(head, cfg, model.config.vocab_size)([soft])
    assert sc == counts and sa == accs and np.allclose(sl, losses, atol=1e-6) and float(st) == pytest.approx(float(total))


def test_the_hard_loss_skips_next_tokens_outside_the_draft_vocabulary_and_unknown_ends() -> None:
    model = tiny_llama(init=0.1)
    head, s, cfg = _planted(model, [5, 6, 7, 50], "eos")  # 50 is not a draft token
    with torch.no_grad():
        _, losses, _, counts = HardTTTLoss(head, cfg, model.config.vocab_size, EOS)([s])
    assert counts == [1] and losses[0] == pytest.approx(_by_hand(head, s, 0, [2], [EOS])[0], abs=1e-5)
    # cut at max_new_tokens: what follows the last token is unknown, so only column 1 counts
    head, s, cfg = _planted(model, [5, 6, 7, 8], "length")
    with torch.no_grad():
        _, losses, _, counts = HardTTTLoss(head, cfg, model.config.vocab_size, EOS)([s])
    assert counts == [1] and losses[0] == pytest.approx(_by_hand(head, s, 0, [1], [8])[0], abs=1e-5)
    # cut to max_seq_len (the sequence fills it): no EOS either; nothing left -> no position, zero loss
    head, s, cfg = _planted(model, [5, 6, 7, 50], "eos")
    with torch.no_grad():
        total, losses, accs, counts = HardTTTLoss(head, cfg.replace(max_seq_len=4), model.config.vocab_size, EOS)([s])
    assert counts == [0] and losses == [0.0] and accs == [0.0] and float(total) == 0.0


# ------------------------------------------------------------------------------------------ training
def _train(run, split, target, *, on_step=None, **kw):
    return train_draft(TrainJob(DraftSource(run, split, target, SPEC), **kw), on_step=on_step)


def test_training_on_a_hard_cache_lowers_the_loss_and_records_hard_labels(bigram, tmp_path) -> None:
    target, run, split = bigram
    cfg = DraftTrainConfig(draft_vocab_size=64, ttt_steps=2, max_steps=40, warmup_steps=5, lr=1e-2,
                           tokens_per_batch=400, checkpoint_every=40, eval_every=0, dtype="float32")
    fill_state_cache(DraftSource(run, split, target, SPEC), cfg, cache_dir=tmp_path / "cache", roles=("train", "val"),
                     progress=False, labels="hard")
    kw = dict(run=run, split=split, target=target, eos_id=EOS, progress=False, cache_dir=tmp_path / "cache")
    r0 = _train(cfg=cfg.replace(max_steps=1, lr=1e-12), out=tmp_path / "h0", ckpt_dir=tmp_path / "ck0", **kw)
    r = _train(cfg=cfg, out=tmp_path / "h", ckpt_dir=tmp_path / "ck", **kw)
    assert r.tokens_per_s_teacher is None  # everything was in the hard cache: no pass, no soft labels made
    assert StateCache.open(tmp_path / "cache").labels == "hard"
    assert r.val_loss[0] < 0.6 * r0.val_loss[0], (r0.val_loss, r.val_loss)  # measured 9.04 -> 3.78
    assert r.val_acc[0] > r0.val_acc[0] + 0.2, (r0.val_acc, r.val_acc)  # 0.02 -> 0.46
    t = load_draft(r.head_path).meta["training"]
    assert t["labels"] == "hard" and t["data"]["topk"] is None and t["steps"] == 40
    assert json.loads((tmp_path / "ck" / "key.json").read_text())["labels"] == "hard"


def test_kill_and_resume_on_a_hard_cache_equals_an_uninterrupted_run(bigram, tmp_path) -> None:
    target, run, split = bigram
    cfg = DraftTrainConfig(draft_vocab_size=48, ttt_steps=2, max_steps=8, warmup_steps=2, lr=1e-3,
                           tokens_per_batch=120, checkpoint_every=4, eval_every=0, dtype="float32")
    fill_state_cache(DraftSource(run, split, target, SPEC), cfg, cache_dir=tmp_path / "cache", roles=("train", "val"),
                     progress=False, labels="hard")
    kw = dict(run=run, split=split, target=target, eos_id=EOS, progress=False, cfg=cfg, cache_dir=tmp_path / "cache")
    _train(out=tmp_path / "a", ckpt_dir=tmp_path / "ck-a", **kw)

    def kill(step: int, steps_now: int) -> None:
        if steps_now >= 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _train(out=tmp_path / "b", ckpt_dir=tmp_path / "ck-b", on_step=kill, **kw)
    seen: list[tuple[int, int]] = []
    _train(out=tmp_path / "b", ckpt_dir=tmp_path / "ck-b", on_step=lambda *a: seen.append(a), **kw)
    assert seen == [(4 + i, i) for i in range(1, 5)]  # resumed at step 4: steps 5..8, once each
    a, b = load_draft(tmp_path / "a").model.state_dict(), load_draft(tmp_path / "b").model.state_dict()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    # checkpoints of hard labels are not resumed on soft ones
    fill_state_cache(DraftSource(run, split, target, SPEC), cfg.replace(topk=8), cache_dir=tmp_path / "soft",
                     roles=("train", "val"), progress=False)
    with pytest.raises(DataError, match="trained on hard labels"):
        _train(**{**kw, "cfg": cfg.replace(topk=8), "cache_dir": tmp_path / "soft"}, out=tmp_path / "c",
               ckpt_dir=tmp_path / "ck-b")


def test_a_foreign_folder_is_refused_but_a_concurrent_slices_temporary_file_is_not(setup, tmp_path) -> None:
    target, run, _ = setup
    _, manifest = cache_location(run, target, SPEC, DraftTrainConfig(topk=8), tmp_path / "x", "hard")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "notes.txt").write_text("mine\n")
    with pytest.raises(DataError, match="non-empty directory without a state-cache manifest"):
        StateCache.open_or_create(tmp_path / "x", manifest)
    assert (tmp_path / "x" / "notes.txt").read_text() == "mine\n"
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / ".manifest.json.tmp").write_text("{")  # another slice writing the manifest right now
    assert StateCache.open_or_create(tmp_path / "y", manifest).labels == "hard"
