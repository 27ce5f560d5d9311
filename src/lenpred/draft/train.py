"""Training an EAGLE-3 head on a run's own responses (self-distillation), resumably.

Recipe (the release's, SafeAILab/EAGLE ``traineagle3``; where lenpred differs it says so):

* **Data**: the run's responses to its *training* prompts (``lenpred.data.split``), teacher-forced
  through the target once and cached (:mod:`lenpred.draft.states`); the target's own samples are
  the data, so the draft learns exactly the distribution it will have to predict.
* **Draft vocabulary**: the ``draft_vocab_size`` most frequent target ids of those responses.
* **Training-time test**: the head is unrolled ``ttt_steps`` times on its own outputs (release: 7;
  default here 3, because each step costs a full draft pass and the CPU is slow -- at k <= 3 the
  later steps are never used anyway); step i's loss is weighted 0.8^i.
* **Loss**: soft cross-entropy against the target's next-token distribution restricted to the
  draft vocabulary and renormalised (from the cached top-K, see the cache's note), at response
  positions only: column t at step i predicts x_{t+i+2} and counts when t >= n_prompt - 1 (chains
  start at the last prompt token at the earliest) and the target's distribution at t+i+1 exists.
  As in the release, positions whose target argmax lies outside the draft vocabulary are left out.
  Each step's loss is the mean over its counted positions (the release divides by all positions).
  A cache made with hard labels (``lenpred draft cache --labels hard``: no logits) trains against the
  run's own next sampled token instead (:class:`lenpred.draft.loss.HardTTTLoss`); the kind is read from
  the cache, recorded in the head's ``meta.json`` (``training.labels``) and in the checkpoint key.
* **Optimiser**: AdamW (betas 0.9, 0.95, no weight decay), gradient clipping 0.5, linear warm-up
  then linear decay to 0 (the release: peak 5e-5, 12k warm-up steps of 800k, on 8 GPUs; the
  defaults here are sized for a few thousand CPU steps). ``lm_head`` starts from the target's output
  embeddings of the draft ids (the release starts from random weights; on a CPU budget this saves
  most of the early steps), the rest from N(0, 0.02).
* **Resumable**: a checkpoint (weights, optimiser, step) every ``checkpoint_every`` steps, under a
  directory named by the hash of everything that determines the result; the data order is a pure
  function of (seed, epoch), so an interrupted run resumed from its checkpoint ends bit-for-bit
  where the uninterrupted one does.

The parts: settings :mod:`lenpred.draft.train_config`; data, state cache and batch order
:mod:`lenpred.draft.train_data`; the loss :mod:`lenpred.draft.loss`; checkpoints
:mod:`lenpred.draft.checkpoint`; data parallelism :mod:`lenpred.draft.distributed`. This module
runs them in order (:func:`train_draft`).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lenpred.draft.checkpoint import checkpoint_key, resume, save_checkpoint
from lenpred.draft.distributed import Distributed
from lenpred.draft.loss import LossModule, make_loss
from lenpred.draft.states import StateCache
from lenpred.draft.train_config import DraftTrainConfig
from lenpred.draft.train_data import (
    DraftSource,
    TrainingData,
    batch_at,
    cache_location,
    check_draft_vocab,
    load_training_data,
    teacher_force,
)
from lenpred.progress import Progress

__all__ = ["TrainJob", "TrainResult", "train_draft"]


@dataclass(frozen=True)
class TrainJob:
    """What ``lenpred draft train`` trains, built once from its flags: the run, split and target
    (``source``), the settings, the head's folder ``out``, the state cache and checkpoint folders
    (None: the default ones, named by what determines their contents), the target's end-of-sequence
    id, the torch device and whether to show progress bars."""

    source: DraftSource
    cfg: DraftTrainConfig
    out: str | os.PathLike[str]
    eos_id: int
    cache_dir: str | os.PathLike[str] | None = None
    ckpt_dir: str | os.PathLike[str] | None = None
    device: str = "cpu"
    progress: bool = True


@dataclass
class _Trained:
    """What :func:`_write_head` records beside the weights: the data, where the cache and checkpoints
    are, the vocabulary's coverage, the steps, the history and the final and speed figures."""

    data: TrainingData
    cdir: Path
    kdir: Path
    coverage: float
    step: int
    history: dict[str, Any]
    final: dict[str, Any]
    speed: dict[str, Any]
    world: int
    labels: str = "soft"


@dataclass
class TrainResult:
    head_path: Path
    steps: int
    train_loss: list[float]  # per unroll step, mean over the last 50 steps
    train_acc: list[float]
    val_loss: list[float]
    val_acc: list[float]
    tokens_per_s_teacher: float | None  # None when the cache held every sample already
    steps_per_s: float | None  # None when the checkpoint was already at max_steps
    cache_dir: Path
    coverage: float
    digest: str = ""  # sha256 of the final weights (every rank's must agree under data parallelism)


def _digest(model: Any) -> str:
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().to("cpu").contiguous().numpy().tobytes())
    return h.hexdigest()


def _lr_at(step: int, cfg: DraftTrainConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    rest = max(cfg.max_steps - cfg.warmup_steps, 1)
    return cfg.lr * max(0.0, 1.0 - (step - cfg.warmup_steps) / rest)


def train_draft(job: TrainJob, *, log: Callable[[str], None] | None = None,
                on_step: Callable[[int, int], None] | None = None) -> TrainResult:
    """Teacher-force (cached), build the vocabulary, train, and write the head to ``out``.

    ``on_step(step, steps_now)`` runs after each step and its checkpoint (if due): ``step`` counts
    from the start of training, ``steps_now`` from this call (a test raises KeyboardInterrupt there)."""
    from lenpred.draft.vocab import build_draft_vocab, count_tokens

    run, split, target, target_spec = job.source.run, job.source.split, job.source.target, job.source.target_spec
    cfg, out, progress = job.cfg, job.out, job.progress
    ddp = Distributed()
    ddp.start(job.device)
    say = (log or (lambda m: None)) if ddp.main else (lambda m: None)
    cfg.check()
    check_draft_vocab(cfg.draft_vocab_size, target.vocab_size)  # before the cache is made and filled
    data = load_training_data(run, split, cfg, job.eos_id)
    cdir, manifest = cache_location(run, target, target_spec, cfg, job.cache_dir)

    # 1. teacher forcing (cached, resumable; rank 0 fills the cache, the other ranks wait and read it)
    tf: dict[str, float] = {"tokens": 0, "seconds": 0.0}
    if ddp.main:
        cache = StateCache.open_or_create(cdir, manifest)
        tf = teacher_force(cache, target, data.jobs, progress=progress)
    ddp.barrier()
    if not ddp.main:
        cache = StateCache.open(cdir)
    tf_rate = tf["tokens"] / tf["seconds"] if tf["tokens"] else None  # None: everything was cached already
    if tf["tokens"]:
        say(f"teacher forcing: {int(tf['tokens'])} tokens in {tf['seconds']:.0f}s ({tf_rate:.0f} tokens/s)")
    labels = cache.labels  # soft: the target's top-k; hard: the run's sampled tokens (the cache says which)
    if labels != "soft":
        say(f"{labels} labels (the state cache {cdir} holds no target logits): trained on the sampled tokens")

    # 2. draft vocabulary from the training responses
    counts = count_tokens(data.counts_source, target.vocab_size)
    d2t, t2d, coverage = build_draft_vocab(counts, cfg.draft_vocab_size)
    say(f"draft vocabulary: {cfg.draft_vocab_size} ids cover {coverage:.1%} of the training response tokens")

    # 3. model, optimiser, resume
    model = _new_head(target, cfg, d2t, t2d, job.device)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr, betas=(0.9, 0.95),
                            weight_decay=0.0)
    key, kdir = checkpoint_key(cfg, run.card_hash, target_spec.fingerprint, target.layers,
                               data.split_info["train_prompt_ids_sha256"], len(data.keys), job.ckpt_dir, labels)
    step, history = resume(kdir, key, model, opt, cfg, main=ddp.main, say=say)

    # 4. train
    loop = _Loop(model, opt, cache, data, ddp, job)
    steps_now, elapsed = loop.run(step, history, kdir, progress=progress, say=say, on_step=on_step)
    step += steps_now
    sps = steps_now / elapsed if steps_now else None
    if not ddp.main:  # rank 0 evaluates and writes the head
        ddp.barrier()
        ddp.stop()
        return TrainResult(Path(out), step, [], [], [], [], None, sps, cdir, 0.0, _digest(model))
    vl, va = loop.evaluate()
    history["val"].append([step, vl, va])
    tail = history["loss"][-50:]
    tl = np.mean(np.array(tail), axis=0).tolist() if tail else []
    ta = np.mean(np.array(history["acc"][-50:]), axis=0).tolist() if tail else []

    # 5. the head, in the released layout, with lenpred's meta.json
    final = {"train_loss": tl, "train_acc": ta, "val_loss": vl, "val_acc": va}
    speed = {"teacher_tokens_per_s": tf_rate, "steps_per_s": sps}
    _write_head(model, job, _Trained(data, cdir, kdir, coverage, step, history, final, speed, ddp.world, labels))
    ddp.barrier()
    ddp.stop()
    return TrainResult(Path(out), step, tl, ta, vl, va, tf_rate, sps, cdir, coverage, _digest(model))


def _new_head(target: Any, cfg: DraftTrainConfig, d2t: Any, t2d: Any, device: str) -> Any:
    """A freshly initialised head on ``device`` with the draft vocabulary (``lm_head`` from the
    target's output embeddings of the draft ids, unless ``init_lm_head`` is random)."""
    from lenpred.draft.config import DraftConfig
    from lenpred.draft.model import Eagle3Draft

    dcfg = DraftConfig.for_target(target.config, cfg.draft_vocab_size, layers=target.layers, torch_dtype=cfg.dtype)
    model = Eagle3Draft(dcfg)
    model.init_weights(torch.Generator().manual_seed(cfg.seed))  # on the CPU: the same init on any device
    model.set_vocab(d2t, t2d)
    model.to(device)
    if cfg.init_lm_head == "target":
        with torch.no_grad():
            w = target.model.get_output_embeddings().weight.detach().float().cpu()
            model.lm_head.weight.copy_(w[model.draft_ids_to_target.cpu()])
    model.attach_embeddings(target.embedding)
    return model


class _Loop:
    """The optimiser steps from a (resumed) step to ``max_steps``, with validation and checkpoints."""

    def __init__(self, model: Any, opt: Any, cache: StateCache, data: TrainingData, ddp: Distributed,
                 job: TrainJob) -> None:
        cfg, device, vocab_size = job.cfg, job.device, job.source.target.vocab_size
        self.model, self.opt, self.cache, self.data, self.cfg, self.ddp = model, opt, cache, data, cfg, ddp
        idx = cache.index()
        # prompt + response tokens of each sample
        self.lengths = {k: int(idx[k][1]["n"]) + int(idx[k][2]["n"]) for k in data.keys + data.val_keys}
        self.loss_fn = make_loss(model, cfg, vocab_size, cache.labels, job.eos_id)
        self.step_fn: Any = self.loss_fn
        if ddp.active:
            dev = torch.device(device)
            self.step_fn = torch.nn.parallel.DistributedDataParallel(
                LossModule(model, self.loss_fn), device_ids=[dev.index] if dev.type == "cuda" else None)
        self.val = [cache.load(k) for k in data.val_keys] if ddp.main else []

    def evaluate(self) -> tuple[list[float], list[float]]:
        """Validation loss and top-1 agreement per unroll step (empty without validation samples)."""
        if not self.val:
            return [], []
        n_steps = self.cfg.ttt_steps
        self.model.eval()
        with torch.no_grad():
            ls, acs, ns = np.zeros(n_steps), np.zeros(n_steps), np.zeros(n_steps)
            for j in range(0, len(self.val), 4):
                _, lv, av, nv = self.loss_fn(self.val[j : j + 4])
                ls += np.array(lv) * np.array(nv)
                acs += np.array(av) * np.array(nv)
                ns += np.array(nv)
        self.model.train()
        ns = np.maximum(ns, 1)
        return (ls / ns).tolist(), (acs / ns).tolist()

    def run(self, step: int, history: dict[str, Any], kdir: Path, *, progress: bool, say: Callable[[str], None],
            on_step: Callable[[int, int], None] | None) -> tuple[int, float]:
        """Train from ``step`` to ``max_steps`` (appending to ``history``): (steps taken, seconds)."""
        cfg, ddp, model, opt = self.cfg, self.ddp, self.model, self.opt
        model.train()
        t0, steps_now = time.perf_counter(), 0
        with Progress("training", cfg.max_steps, initial=step, unit="step", enabled=progress) as bar:
            while step < cfg.max_steps:
                keys = batch_at(step, self.data.keys, self.lengths, cfg.tokens_per_batch, cfg.seed)
                if ddp.active:  # this rank's share of the step's batch (a rank never goes empty)
                    keys = keys[ddp.rank :: ddp.world] or [keys[ddp.rank % len(keys)]]
                batch = [self.cache.load(k) for k in keys]
                for g in opt.param_groups:
                    g["lr"] = _lr_at(step, cfg)
                opt.zero_grad(set_to_none=True)
                loss, ls, acs, _ = self.step_fn(batch)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                opt.step()
                step += 1
                steps_now += 1
                history["loss"].append(ls)
                history["acc"].append(acs)
                bar.update(1, info=f"loss {ls[0]:.3f} acc {acs[0]:.2f}")
                if ddp.main and cfg.eval_every and step % cfg.eval_every == 0 and step < cfg.max_steps:
                    vl, va = self.evaluate()
                    history["val"].append([step, vl, va])
                    say(f"step {step}: val loss {', '.join(f'{x:.3f}' for x in vl)}; "
                        f"acc {', '.join(f'{x:.2f}' for x in va)}")
                if ddp.main and (step % cfg.checkpoint_every == 0 or step == cfg.max_steps):
                    save_checkpoint(kdir, step, model, opt, history)
                if on_step is not None:
                    on_step(step, steps_now)
        return steps_now, time.perf_counter() - t0


def _write_head(model: Any, job: TrainJob, done: _Trained) -> None:
    """Save the head in the released layout, with lenpred's meta.json (the training card)."""
    from lenpred.draft.io import save_draft, target_summary

    run, target, target_spec, cfg, data = job.source.run, job.source.target, job.source.target_spec, job.cfg, done.data
    cdir, kdir, coverage, step, history = done.cdir, done.kdir, done.coverage, done.step, done.history
    card = run.card
    training = {
        "run": str(run.path), "card_hash": run.card_hash,
        "run_card": {k: card.get(k) for k in ("model", "prompts", "sampling")},
        "data": {**data.split_info, "response_tokens": int(sum(len(c) for c in data.counts_source)),
                 "cache": str(cdir), "topk": cfg.topk if done.labels == "soft" else None},
        "labels": done.labels,  # soft: the target's top-k distribution; hard: the run's sampled next tokens
        "draft_vocab": {"size": cfg.draft_vocab_size, "coverage": coverage},
        "ttt": {"steps": cfg.ttt_steps, "weights": [cfg.step_decay ** i for i in range(cfg.ttt_steps)]},
        "optimiser": {"name": "AdamW", "lr": cfg.lr, "betas": [0.9, 0.95], "weight_decay": 0.0,
                      "schedule": f"linear warm-up {cfg.warmup_steps} then linear decay to 0 at {cfg.max_steps}",
                      "grad_clip": cfg.grad_clip, "tokens_per_batch": cfg.tokens_per_batch},
        "steps": step, "seed": cfg.seed, "checkpoints": str(kdir),
        "world_size": done.world,  # data-parallel processes (torchrun); the batch is split among them
        "resumed_with_changes": history.get("resumed", []),
        "final": done.final,
        "speed": done.speed,
    }
    meta = {"target": target_summary(target.config, target_spec.fingerprint, target_spec.id),
            "layers": list(target.layers), "draft_vocab": {"size": cfg.draft_vocab_size, "coverage": coverage},
            "training": training}
    model.eval()
    save_draft(model, job.out, fmt=cfg.format, dtype=cfg.dtype, card=card, config=cfg, meta=meta)
