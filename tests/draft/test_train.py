"""Training a head: the loss falls and acceptance rises on a tiny target; kill + resume = no kill;
the teacher-forced state cache is reused and resumable."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from draft_helpers import tiny_llama, tiny_run, tiny_split

from lenpred.draft.io import load_draft
from lenpred.draft.speculative import SpeculativeDecoder, cached_draft_states, teacher_forced_draft_states
from lenpred.draft.states import StateCache
from lenpred.draft.target import Target
from lenpred.draft.train import TrainJob, _digest, train_draft
from lenpred.draft.train_config import DraftTrainConfig
from lenpred.draft.train_data import DraftSource
from lenpred.errors import DataError

SPEC = SimpleNamespace(id="tiny", fingerprint="sha256:" + "ab" * 32)


def _train(run, split, target, *, on_step=None, **kw):
    """train_draft on ``run`` with the tiny target (``kw``: the :class:`TrainJob` fields but the source)."""
    return train_draft(TrainJob(DraftSource(run, split, target, SPEC), **kw), on_step=on_step)


# tiny models: thread start-up costs more than the arithmetic (and the CPUs are shared)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _tau(target: Target, head, prompts: list[list[int]], eos: int) -> float:
    dec = SpeculativeDecoder(target, head, k=3, sampling=None, max_new_tokens=30, eos_ids=[eos])
    committed, cycles = 0, 0
    for p in prompts:
        g = dec.generate(p)
        committed += sum(g.committed)
        cycles += len(g.committed)
    return committed / cycles


def test_training_lowers_the_loss_and_raises_acceptance(tmp_path) -> None:
    """A bigram target (every layer adds nothing to the residual stream): its next-token law is a
    function of the current token, which a head can learn from ~600 tokens and must generalise to
    the validation prompts' samples; a random deep target is not learnable from that little data."""
    model = tiny_llama(init=0.3, passthrough_from=0)
    target = Target(model)
    run = tiny_run(tmp_path / "run", model, n_prompts=14, n_samples=2, max_new=30)
    split = tiny_split(run, n_val=4)
    cfg = DraftTrainConfig(draft_vocab_size=64, ttt_steps=2, max_steps=150, warmup_steps=10, lr=3e-3,
                           tokens_per_batch=400, checkpoint_every=50, eval_every=0, dtype="float32")
    kw = dict(run=run, split=split, target=target, eos_id=95, progress=False)
    r0 = _train(cfg=cfg.replace(max_steps=1, lr=1e-12), out=tmp_path / "h0", cache_dir=tmp_path / "cache",
                     ckpt_dir=tmp_path / "ck0", **kw)
    r = _train(cfg=cfg, out=tmp_path / "h", cache_dir=tmp_path / "cache", ckpt_dir=tmp_path / "ck", **kw)
    assert r.val_loss[0] < 0.8 * r0.val_loss[0], (r0.val_loss, r.val_loss)
    assert r.val_acc[0] > r0.val_acc[0] + 0.1
    val_prompts = [list(map(int, p)) for p in run.prompts().query("prompt_id in @split.val")["prompt_token_ids"]]
    tau0 = _tau(target, load_draft(r0.head_path).model, val_prompts, 95)
    tau1 = _tau(target, load_draft(r.head_path).model, val_prompts, 95)
    assert tau1 > tau0 + 0.3, (tau0, tau1)
    head = load_draft(r.head_path)
    t = head.meta["training"]
    assert t["steps"] == 150 and t["data"]["train_prompts"] == 10 and t["optimiser"]["name"] == "AdamW"
    assert head.meta["target"]["fingerprint"] == SPEC.fingerprint and head.meta["layers"] == [2, 4, 5]
    assert head.meta["card_scope"] == "model" and head.meta["card"]["model.fingerprint"] == SPEC.fingerprint


def _kill_after(n: int, max_steps: int):
    """An ``on_step`` callback that kills training (KeyboardInterrupt) after ``n`` steps of the call."""
    def on_step(step: int, steps_now: int) -> None:
        if steps_now >= n and step < max_steps:
            raise KeyboardInterrupt

    return on_step


def test_kill_and_resume_equals_an_uninterrupted_run(tmp_path) -> None:
    model = tiny_llama(init=0.1)
    target = Target(model)
    run = tiny_run(tmp_path / "run", model, n_prompts=8, n_samples=2, max_new=20)
    split = tiny_split(run, n_val=2)
    cfg = DraftTrainConfig(draft_vocab_size=48, ttt_steps=3, max_steps=12, warmup_steps=3, lr=1e-3,
                           tokens_per_batch=120, checkpoint_every=4, eval_every=0, dtype="float32")
    kw = dict(run=run, split=split, target=target, eos_id=95, progress=False, cfg=cfg,
              cache_dir=tmp_path / "cache")
    _train(out=tmp_path / "a", ckpt_dir=tmp_path / "ck-a", **kw)
    with pytest.raises(KeyboardInterrupt):
        _train(out=tmp_path / "b", ckpt_dir=tmp_path / "ck-b", on_step=_kill_after(6, 12), **kw)  # killed after step 6
    assert not (tmp_path / "b").exists()
    assert sorted(p.name for p in (tmp_path / "ck-b").glob("ckpt-*.pt")) == ["ckpt-0000004.pt"]
    seen: list[tuple[int, int]] = []
    _train(out=tmp_path / "b", ckpt_dir=tmp_path / "ck-b", on_step=lambda *a: seen.append(a), **kw)  # resumes at step 4
    assert seen == [(4 + i, i) for i in range(1, 9)]  # (step, steps of this call) after each of steps 5..12
    a, b = load_draft(tmp_path / "a").model.state_dict(), load_draft(tmp_path / "b").model.state_dict()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert load_draft(tmp_path / "b").meta["training"]["resumed_with_changes"] == []
    # resumed under a shorter schedule: allowed, and the head's training card says so
    with pytest.raises(KeyboardInterrupt):
        _train(out=tmp_path / "c", ckpt_dir=tmp_path / "ck-c", on_step=_kill_after(4, 12), **kw)
    kw["cfg"] = cfg.replace(max_steps=6)
    _train(out=tmp_path / "c", ckpt_dir=tmp_path / "ck-c", **kw)
    _train(out=tmp_path / "c2", ckpt_dir=tmp_path / "ck-c", **kw)  # resumed again: recorded once
    for out in ("c", "c2"):
        meta = load_draft(tmp_path / out).meta["training"]
        assert meta["steps"] == 6
        assert meta["resumed_with_changes"] == [{"step": 4, "changed": {"max_steps": [12, 6]}}]


def test_state_cache_is_reused_and_matches_teacher_forcing(tmp_path) -> None:
    model = tiny_llama(init=0.1)
    target = Target(model)
    run = tiny_run(tmp_path / "run", model, n_prompts=6, n_samples=2, max_new=15)
    split = tiny_split(run, n_val=1)
    cfg = DraftTrainConfig(draft_vocab_size=48, ttt_steps=1, max_steps=2, warmup_steps=1, topk=8,
                           checkpoint_every=2, eval_every=0)
    kw = dict(run=run, split=split, target=target, eos_id=95, progress=False, cfg=cfg,
              cache_dir=tmp_path / "cache")
    _train(out=tmp_path / "h", ckpt_dir=tmp_path / "ck", **kw)
    cache = StateCache.open(tmp_path / "cache")
    shards = cache.shard_names()
    n_keys = len(cache.done_keys())
    assert n_keys == 5 * 2 + 1  # train samples + one validation sample
    _train(out=tmp_path / "h2", ckpt_dir=tmp_path / "ck2", **kw)
    assert cache.shard_names() == shards  # nothing recomputed
    # a cached sample is what one full teacher-forced pass gives
    pid, sidx = sorted(cache.done_keys())[0]
    st = cache.load((pid, sidx))
    with torch.no_grad():
        logits, aux = target.forward(torch.from_numpy(st.tokens.astype(np.int64))[None])
    assert np.allclose(st.aux, aux[0].numpy(), atol=2e-2 * float(aux.abs().max()), rtol=1e-2)
    logp = torch.log_softmax(logits[0, st.n_prompt :], dim=-1)
    assert (st.topk_ids[:, 0] == logp.argmax(-1).numpy()).all()
    assert np.allclose(st.topk_logp[:, 0], logp.max(-1).values.numpy(), atol=1e-2)
    # OUTLETS reads draft states from the cache without a target pass: float16-close to the online ones
    head = load_draft(tmp_path / "h").model
    from_cache = cached_draft_states(head, target.embedding, st)
    online = teacher_forced_draft_states(target, head, st.tokens.tolist())
    assert from_cache.shape == online.shape == (len(st.tokens) - 1, head.config.hidden_size)
    assert torch.allclose(from_cache, online, atol=5e-3 * float(online.abs().max()), rtol=0)
    # another top-k is another cache
    with pytest.raises(DataError, match="another topk"):
        _train(out=tmp_path / "h3", ckpt_dir=tmp_path / "ck3", **{**kw, "cfg": cfg.replace(topk=4)})


def test_data_parallel_training_under_torchrun(tmp_path) -> None:
    """Two processes under torchrun (gloo on the CPU): the ranks end with the same weights (the
    gradients were averaged), rank 0 alone wrote the head, the cache and the checkpoints, and the
    head's training card says world_size 2."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    tiny_run(tmp_path / "run", tiny_llama(init=0.1), n_prompts=8, n_samples=2, max_new=20)
    worker = Path(__file__).parent / "ddp_worker.py"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(worker),
           str(tmp_path), "ddp"]
    env = {**__import__("os").environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    r0 = json.loads((tmp_path / "ddp-rank0.json").read_text())
    r1 = json.loads((tmp_path / "ddp-rank1.json").read_text())
    assert r0["steps"] == r1["steps"] == 8
    assert r0["digest"] == r1["digest"]  # gradients averaged: identical weights on both ranks
    head = load_draft(tmp_path / "head-ddp")
    assert head.meta["training"]["world_size"] == 2
    assert _digest(head.model) == r0["digest"]  # the head is the trained weights
    assert sorted(x.name for x in (tmp_path / "ck-ddp").glob("ckpt-*.pt")) == ["ckpt-0000004.pt", "ckpt-0000008.pt"]
