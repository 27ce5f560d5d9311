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
* **Optimiser**: AdamW (betas 0.9, 0.95, no weight decay), gradient clipping 0.5, linear warm-up
  then linear decay to 0 (the release: peak 5e-5, 12k warm-up steps of 800k, on 8 GPUs; the
  defaults here are sized for a few thousand CPU steps). ``lm_head`` starts from the target's output
  embeddings of the draft ids (the release starts from random weights; on a CPU budget this saves
  most of the early steps), the rest from N(0, 0.02).
* **Resumable**: a checkpoint (weights, optimiser, step) every ``checkpoint_every`` steps, under a
  directory named by the hash of everything that determines the result; the data order is a pure
  function of (seed, epoch), so an interrupted run resumed from its checkpoint ends bit-for-bit
  where the uninterrupted one does.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field

from lenpred.config import Config
from lenpred.draft.states import SampleStates, StateCache
from lenpred.errors import ConfigError, DataError
from lenpred.fileio import canonical_json

__all__ = ["Distributed", "DraftTrainConfig", "TrainResult", "check_token_ids", "fill_state_cache", "load_training_data",
           "state_cache_jobs", "train_draft"]


class DraftTrainConfig(Config):
    """Settings of ``lenpred draft train`` (flags are derived from these fields)."""

    draft_vocab_size: int = Field(8192, description="draft vocabulary: the N most frequent target ids of the responses")
    ttt_steps: int = Field(3, description="training-time-test unroll (the release uses 7)")
    step_decay: float = Field(0.8, description="loss weight of unroll step i is step_decay**i")
    lr: float = Field(3e-4, description="peak learning rate (AdamW)")
    warmup_steps: int = Field(100, description="linear warm-up steps")
    max_steps: int = Field(4000, description="optimiser steps")
    grad_clip: float = Field(0.5, description="gradient-norm clip")
    tokens_per_batch: int = Field(2048, description="tokens (prompt + response) per optimiser step")
    max_seq_len: int = Field(2048, description="longer samples are cut to this many tokens")
    topk: int = Field(64, description="target top-k log-probabilities cached per response token")
    seed: int = Field(0, description="seed of initialisation and data order")
    checkpoint_every: int = Field(100, description="steps between checkpoints")
    eval_every: int = Field(250, description="steps between validation passes (0: only at the end)")
    val_samples: int = Field(32, description="validation samples (from the split's validation prompts)")
    max_prompts: int | None = Field(None, description="use only the first N training prompts (smoke runs)")
    max_samples_per_prompt: int | None = Field(None, description="use at most N samples of each prompt")
    init_lm_head: Literal["target", "random"] = Field("target", description="start lm_head from the target's rows")
    mask_out_of_vocab: bool = Field(True, description="skip positions whose target argmax is outside the draft vocabulary")
    layers: str | None = Field(None, description="target layers as 'a,b,c' (default: 2, L//2, L-3)")
    dtype: Literal["float16", "bfloat16", "float32"] = Field("float16", description="dtype of the saved head")
    format: Literal["safetensors", "bin"] = Field("safetensors", description="weight file of the saved head")

    def layer_tuple(self) -> tuple[int, ...] | None:
        if self.layers is None:
            return None
        try:
            out = tuple(int(x) for x in self.layers.split(","))
        except ValueError:
            raise ConfigError(f"layers must be three integers 'a,b,c', got {self.layers!r}") from None
        if len(out) != 3:
            raise ConfigError(f"layers must be three integers 'a,b,c', got {self.layers!r}")
        return out

    def check(self) -> None:
        for name in ("draft_vocab_size", "ttt_steps", "max_steps", "tokens_per_batch", "max_seq_len", "topk",
                     "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ConfigError(f"lr must be positive, got {self.lr}")

    def identity(self) -> dict[str, Any]:
        """The fields that determine the trained weights (checkpoint cadence and output form do not)."""
        skip = {"checkpoint_every", "eval_every", "val_samples", "dtype", "format"}
        return {k: v for k, v in self.to_dict().items() if k not in skip}


@dataclass
class TrainingData:
    keys: list[tuple[str, int]]  # training samples
    val_keys: list[tuple[str, int]]
    jobs: list[tuple[str, list[int], list[tuple[int, list[int], str]]]]  # for the state cache
    counts_source: list[list[int]]  # training responses (+ EOS where they ended with it)
    n_train_prompts: int
    split_info: dict[str, Any]


def check_token_ids(run: Any) -> tuple[Any, Any]:
    """(prompts, samples with token_ids) of a run; refuses a run without token ids, naming what lacks them."""
    from lenpred.data.lengths import sample_lengths

    prompts = run.prompts()
    if "prompt_token_ids" not in prompts.columns:
        raise DataError(f"{run.path} has no prompt token ids (prompts.parquet lacks prompt_token_ids)",
                        "train on a run collected with a lenpred that records token ids")
    if prompts["prompt_token_ids"].map(lambda t: t is None or len(t) == 0).any():
        raise DataError(f"{run.path} has prompts without token ids", "train on a run collected with token ids")
    s = sample_lengths(run, extra=("token_ids",), with_prompts=False)
    if s.empty:
        raise DataError(f"{run.path} has no samples yet", "collect some first (`lenpred collect`)")
    has_ids = s["token_ids"].map(lambda t: t is not None and len(t) > 0)
    if not bool((has_ids | (s["n_tokens"] == 0)).all()):
        raise DataError(f"{run.path} has samples without token ids (samples.parquet token_ids are empty)",
                        "train on a run collected with an engine that records token ids (hf or llamacpp)")
    return prompts, s


def load_training_data(run: Any, split: Any, cfg: DraftTrainConfig, eos_id: int) -> TrainingData:
    """The training and validation samples of a run, with their token ids; refuses a run without ids."""
    prompts, s = check_token_ids(run)
    pid_ids = {str(r.prompt_id): [int(x) for x in r.prompt_token_ids] for r in prompts.itertuples()}
    order = [str(p) for p in prompts["prompt_id"]]
    train_set, val_set = set(map(str, split.train)), set(map(str, split.val))
    if not train_set:
        raise DataError("the split has no training prompts", "write a split with training prompts (`lenpred split`)")
    by_prompt: dict[str, list[tuple[int, list[int], str]]] = {}
    for r in s.itertuples():
        ids = [int(x) for x in r.token_ids][: cfg.max_seq_len]
        by_prompt.setdefault(str(r.prompt_id), []).append((int(r.sample_idx), ids, str(r.stop_reason)))
    train_pids = [p for p in order if p in train_set and p in by_prompt]
    if cfg.max_prompts is not None:
        train_pids = train_pids[: cfg.max_prompts]
    if hasattr(split, "check_no_test"):  # lenpred.data.split.Split: a last guard against leaks
        split.check_no_test(train_pids, what="draft training data")
    val_pids = [p for p in order if p in val_set and p in by_prompt]
    jobs, keys, val_keys, counts_source = [], [], [], []
    for pid in train_pids:
        samples = sorted(by_prompt[pid])[: cfg.max_samples_per_prompt]
        p_ids = pid_ids[pid][: cfg.max_seq_len - 1]
        samples = [(i, ids[: cfg.max_seq_len - len(p_ids)], stop) for i, ids, stop in samples]
        jobs.append((pid, p_ids, samples))
        keys.extend((pid, i) for i, ids, _ in samples if ids)
        counts_source.extend(ids + ([eos_id] if stop == "eos" else []) for _, ids, stop in samples)
    for pid in val_pids:  # validation: the first sample of each validation prompt, up to val_samples
        if len(val_keys) >= cfg.val_samples:
            break
        i, ids, stop = sorted(by_prompt[pid])[0]
        if ids:
            p_ids = pid_ids[pid][: cfg.max_seq_len - 1]
            jobs.append((pid, p_ids, [(i, ids[: cfg.max_seq_len - len(p_ids)], stop)]))
            val_keys.append((pid, i))
    if not keys:
        raise DataError("no training sample has response tokens", "collect more samples on training prompts")
    h = hashlib.sha256(canonical_json(sorted(train_pids)).encode()).hexdigest()[:16]
    info = {"train_prompts": len(train_pids), "train_samples": len(keys), "val_samples": len(val_keys),
            "train_prompt_ids_sha256": h, "split": _split_info(split)}
    return TrainingData(keys, val_keys, jobs, counts_source, len(train_pids), info)


def state_cache_jobs(run: Any, split: Any, roles: tuple[str, ...] = ("train", "val", "test"),
                     max_seq_len: int = 2048) -> list[tuple[str, list[int], list[tuple[int, list[int], str]]]]:
    """Every sample of the split's ``roles`` prompts as state-cache jobs, in role order (the training
    prompts first), cut to ``max_seq_len`` exactly as :func:`load_training_data` cuts them, so a cache
    filled here is the cache ``lenpred draft train`` reads."""
    prompts, s = check_token_ids(run)
    pid_ids = {str(r.prompt_id): [int(x) for x in r.prompt_token_ids] for r in prompts.itertuples()}
    order = [str(p) for p in prompts["prompt_id"]]
    by_prompt: dict[str, list[tuple[int, list[int], str]]] = {}
    for r in s.itertuples():
        ids = [int(x) for x in r.token_ids][:max_seq_len]
        by_prompt.setdefault(str(r.prompt_id), []).append((int(r.sample_idx), ids, str(r.stop_reason)))
    jobs = []
    for role in roles:
        members = set(map(str, split.ids(role)))
        for pid in order:
            if pid in members and pid in by_prompt:
                p_ids = pid_ids[pid][: max_seq_len - 1]
                jobs.append((pid, p_ids, [(i, ids[: max_seq_len - len(p_ids)], stop)
                                          for i, ids, stop in sorted(by_prompt[pid])]))
    return jobs


def fill_state_cache(run: Any, split: Any, target: Any, target_spec: Any, cfg: DraftTrainConfig, *,
                     cache_dir: str | os.PathLike[str] | None = None, roles: tuple[str, ...] = ("train", "val", "test"),
                     progress: bool = True, prompts_per_shard: int = 4) -> tuple[Path, dict[str, float], int]:
    """Teacher-force every sample of ``roles`` into the state cache ``lenpred draft train`` and
    ``lenpred outlets features`` read (resumable: samples already cached are skipped).
    Returns (cache directory, {"tokens", "seconds"} of this call, response tokens in the cache for these jobs)."""
    from lenpred.draft.states import default_cache_dir

    cfg.check()
    layers = target.layers
    fp = target_spec.fingerprint
    manifest = {"target_fingerprint": fp, "layers": list(layers), "topk": cfg.topk, "dtype": "float16",
                "card_hash": run.card_hash, "max_seq_len": cfg.max_seq_len, "target_id": target_spec.id,
                "run": str(run.path)}
    cdir = Path(cache_dir) if cache_dir else default_cache_dir(run.card_hash, fp, layers, cfg.topk)
    jobs = state_cache_jobs(run, split, roles, cfg.max_seq_len)
    cache = StateCache.open_or_create(cdir, manifest)
    keys = [(p, i) for p, _, ss in jobs for i, _, _ in ss]
    bar = _bar(progress, sum(len(ids) for _, _, ss in jobs for _, ids, _ in ss), "teacher forcing",
               initial=cache.n_tokens(keys))
    tf = cache.build(target, jobs, prompts_per_shard=prompts_per_shard, progress=lambda n, _: bar.update(n))
    bar.close()
    cache._index = None
    return cdir, tf, cache.n_tokens(keys)


def _split_info(split: Any) -> dict[str, Any]:
    if hasattr(split, "counts") and hasattr(split, "config"):
        return {"counts": split.counts(), "config": split.config.to_dict(), "card_hash": split.card_hash}
    return dict(getattr(split, "info", None) or {})


# ---------------------------------------------------------------------------------------- batches
def _epoch_batches(keys: list[tuple[str, int]], lengths: dict[tuple[str, int], int], budget: int, seed: int,
                   epoch: int) -> list[list[tuple[str, int]]]:
    """Shuffled samples packed into batches of at most ``budget`` tokens (a pure function of its inputs)."""
    order = np.random.default_rng([seed, epoch]).permutation(len(keys))
    batches, cur, used = [], [], 0
    for i in order:
        k = keys[int(i)]
        n = lengths[k]
        if cur and used + n > budget:
            batches.append(cur)
            cur, used = [], 0
        cur.append(k)
        used += n
    if cur:
        batches.append(cur)
    return batches


def _batch_at(step: int, keys: list[tuple[str, int]], lengths: dict[tuple[str, int], int], budget: int,
              seed: int) -> list[tuple[str, int]]:
    epoch, s = 0, step
    while True:
        b = _epoch_batches(keys, lengths, budget, seed, epoch)
        if s < len(b):
            return b[s]
        s -= len(b)
        epoch += 1


class _Loss:
    """Soft cross-entropy of the unrolled head against the cached target labels."""

    def __init__(self, model: Any, cfg: DraftTrainConfig, vocab_size: int) -> None:
        self.model = model
        self.cfg = cfg
        t2d = model.t2d.cpu()
        tmap = torch.full((vocab_size,), -1, dtype=torch.long)
        tmap[model.draft_ids_to_target.cpu()] = torch.arange(int(t2d.sum()))
        self.dev = model.fc.weight.device
        self.tmap = tmap.to(self.dev)  # target id -> draft id, or -1

    def __call__(self, samples: list[SampleStates]) -> tuple[torch.Tensor, list[float], list[float], list[int]]:
        """(weighted loss, per-step loss, per-step top-1 agreement, per-step positions)."""
        B = len(samples)
        T = max(len(s.tokens) for s in samples)
        d3 = samples[0].aux.shape[1]
        aux = torch.zeros((B, T, d3))  # assembled on the CPU, moved once
        tok = torch.zeros((B, T), dtype=torch.long)
        for b, s in enumerate(samples):
            n = len(s.tokens)
            aux[b, :n] = torch.from_numpy(s.aux.astype(np.float32))
            tok[b, :n] = torch.from_numpy(s.tokens.astype(np.int64))
        aux, tok = aux.to(self.dev), tok.to(self.dev)
        outs = self.model.ttt(aux, tok, self.cfg.ttt_steps)  # each (B, T, d)
        total = torch.zeros((), device=self.dev)
        losses, accs, counts = [], [], []
        for i, o in enumerate(outs):
            bi, ti, ids, logp = [], [], [], []
            for b, s in enumerate(samples):
                n, npr = len(s.tokens), s.n_prompt
                t = np.arange(max(npr - 1, 0), n - i - 1)  # columns whose target s = t+i+1 exists
                if t.size == 0:
                    continue
                rows = t + i + 1 - npr  # label rows (s - n_prompt)
                bi.append(np.full(t.size, b))
                ti.append(t)
                ids.append(s.topk_ids[rows])
                logp.append(s.topk_logp[rows])
            if not bi:
                losses.append(0.0)
                accs.append(0.0)
                counts.append(0)
                continue
            b_t = torch.from_numpy(np.concatenate(bi)).to(self.dev)
            t_t = torch.from_numpy(np.concatenate(ti)).to(self.dev)
            dids = self.tmap[torch.from_numpy(np.concatenate(ids).astype(np.int64)).to(self.dev)]  # (n, K) draft ids / -1
            lp = torch.from_numpy(np.concatenate(logp).astype(np.float32)).to(self.dev)  # (n, K)
            inv = dids >= 0
            keep = inv.any(dim=1)
            if self.cfg.mask_out_of_vocab:
                keep &= inv[:, 0]  # the target's argmax (column 0) must be a draft token
            if not bool(keep.any()):
                losses.append(0.0)
                accs.append(0.0)
                counts.append(0)
                continue
            dids, lp, inv = dids[keep], lp[keep], inv[keep]
            p = torch.softmax(lp.masked_fill(~inv, float("-inf")), dim=-1)  # (n, K) renormalised on the draft vocab
            logq = torch.log_softmax(self.model.logits(o[b_t[keep], t_t[keep]]), dim=-1)  # (n, N_draft)
            ll = torch.gather(logq, 1, dids.clamp(min=0)) * inv  # (n, K)
            loss_i = -(p * ll).sum(1).mean()
            total = total + (self.cfg.step_decay ** i) * loss_i
            losses.append(float(loss_i.detach()))
            top = dids[torch.arange(len(dids)), torch.argmax(lp.masked_fill(~inv, float("-inf")), dim=1)]
            accs.append(float((torch.argmax(logq, dim=1) == top).float().mean()))
            counts.append(int(keep.sum()))
        return total, losses, accs, counts


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


class Distributed:
    """Data-parallel training under a standard launcher (``torchrun``; accelerate's launcher sets the
    same variables): WORLD_SIZE / RANK / LOCAL_RANK from the environment, one process per device.
    Each optimiser step's batch is split across the ranks, DistributedDataParallel averages the
    gradients, rank 0 teacher-forces the state cache, checkpoints, evaluates and writes the head.
    With WORLD_SIZE unset or 1 nothing changes."""

    def __init__(self) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        self.rank = int(os.environ.get("RANK", "0") or 0)
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
        self._ours = False

    @property
    def active(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def device(self, device: str) -> str:
        """``cuda`` -> this process's ``cuda:LOCAL_RANK`` under a launcher."""
        return f"cuda:{self.local_rank}" if self.active and device == "cuda" else device

    def start(self, device: str) -> None:
        if not self.active:
            return
        import torch.distributed as dist

        if not dist.is_initialized():
            dev = torch.device(device)
            if dev.type == "cuda":
                torch.cuda.set_device(dev)
            dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo")
            self._ours = True

    def barrier(self) -> None:
        if self.active:
            import torch.distributed as dist

            dist.barrier()

    def stop(self) -> None:
        if self._ours:
            import torch.distributed as dist

            dist.destroy_process_group()
            self._ours = False


class _LossModule(torch.nn.Module):
    """The head with its loss as ``forward``, so DistributedDataParallel sees every use of the weights."""

    def __init__(self, model: Any, loss: _Loss) -> None:
        super().__init__()
        self.model = model
        self._loss = loss

    def forward(self, samples: list[SampleStates]) -> tuple[torch.Tensor, list[float], list[float], list[int]]:
        return self._loss(samples)


def _lr_at(step: int, cfg: DraftTrainConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    rest = max(cfg.max_steps - cfg.warmup_steps, 1)
    return cfg.lr * max(0.0, 1.0 - (step - cfg.warmup_steps) / rest)


def _save_ckpt(path: Path, step: int, model: Any, opt: Any, history: dict[str, Any]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    tmp = path / f".ckpt-{step:07d}.pt.tmp"
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict(), "history": history}, tmp)
    os.replace(tmp, path / f"ckpt-{step:07d}.pt")
    for old in sorted(path.glob("ckpt-*.pt"))[:-2]:  # keep the last two
        old.unlink(missing_ok=True)


def _latest_ckpt(path: Path) -> Path | None:
    c = sorted(path.glob("ckpt-*.pt")) if path.is_dir() else []
    return c[-1] if c else None


def train_draft(
    *,
    run: Any,
    split: Any,
    target: Any,
    target_spec: Any,
    cfg: DraftTrainConfig,
    out: str | os.PathLike[str],
    cache_dir: str | os.PathLike[str] | None = None,
    ckpt_dir: str | os.PathLike[str] | None = None,
    eos_id: int,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    device: str = "cpu",
    _stop_after: int | None = None,
) -> TrainResult:
    """Teacher-force (cached), build the vocabulary, train, and write the head to ``out``.

    ``target``: a :class:`lenpred.draft.target.Target`; ``target_spec``: its
    :class:`lenpred.models.loading.ModelSpec`. ``_stop_after`` (tests) raises KeyboardInterrupt
    after that many steps of this call, as a kill would.
    """
    from lenpred.draft.config import DraftConfig
    from lenpred.draft.io import save_draft, target_summary
    from lenpred.draft.model import Eagle3Draft
    from lenpred.draft.states import default_cache_dir
    from lenpred.draft.vocab import build_draft_vocab, count_tokens
    from lenpred.paths import home

    ddp = Distributed()
    ddp.start(device)
    say = (log or (lambda m: None)) if ddp.main else (lambda m: None)
    cfg.check()
    data = load_training_data(run, split, cfg, eos_id)
    layers = target.layers
    fp = target_spec.fingerprint
    manifest = {"target_fingerprint": fp, "layers": list(layers), "topk": cfg.topk, "dtype": "float16",
                "card_hash": run.card_hash, "max_seq_len": cfg.max_seq_len, "target_id": target_spec.id,
                "run": str(run.path)}
    cdir = Path(cache_dir) if cache_dir else default_cache_dir(run.card_hash, fp, layers, cfg.topk)
    V = target.vocab_size

    # 1. teacher forcing (cached, resumable; rank 0 fills the cache, the other ranks wait and read it)
    tf: dict[str, float] = {"tokens": 0, "seconds": 0.0}
    if ddp.main:
        cache = StateCache.open_or_create(cdir, manifest)
        all_tokens = sum(len(ids) for _, _, ss in data.jobs for _, ids, _ in ss)
        bar = _bar(progress, all_tokens, "teacher forcing", initial=cache.n_tokens(
            [(p, i) for p, _, ss in data.jobs for i, _, _ in ss]))
        tf = cache.build(target, data.jobs, progress=lambda n, _: bar.update(n))
        bar.close()
    ddp.barrier()
    if not ddp.main:
        cache = StateCache.open(cdir)
    tf_rate = tf["tokens"] / tf["seconds"] if tf["tokens"] else None  # None: everything was cached already
    if tf["tokens"]:
        say(f"teacher forcing: {int(tf['tokens'])} tokens in {tf['seconds']:.0f}s ({tf_rate:.0f} tokens/s)")

    # 2. draft vocabulary from the training responses
    counts = count_tokens(data.counts_source, V)
    d2t, t2d, coverage = build_draft_vocab(counts, cfg.draft_vocab_size)
    say(f"draft vocabulary: {cfg.draft_vocab_size} ids cover {coverage:.1%} of the training response tokens")

    # 3. model, optimiser, resume
    dcfg = DraftConfig.for_target(target.config, cfg.draft_vocab_size, layers=layers, torch_dtype=cfg.dtype)
    model = Eagle3Draft(dcfg)
    model.init_weights(torch.Generator().manual_seed(cfg.seed))  # on the CPU: the same init on any device
    model.set_vocab(d2t, t2d)
    model.to(device)
    if cfg.init_lm_head == "target":
        with torch.no_grad():
            w = target.model.get_output_embeddings().weight.detach().float().cpu()
            model.lm_head.weight.copy_(w[model.draft_ids_to_target.cpu()])
    model.attach_embeddings(target.embedding)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr, betas=(0.9, 0.95),
                            weight_decay=0.0)
    key = {"config": cfg.identity(), "card_hash": run.card_hash, "fingerprint": fp, "layers": list(layers),
           "train": data.split_info["train_prompt_ids_sha256"], "n_train": len(data.keys)}
    khash = hashlib.sha256(canonical_json(key).encode()).hexdigest()[:16]
    kdir = Path(ckpt_dir) if ckpt_dir else home() / "draft-train" / khash
    step = 0
    history: dict[str, Any] = {"loss": [], "acc": [], "val": []}
    last = _latest_ckpt(kdir)
    if last is not None:
        try:  # the settings the checkpoints began with
            began = json.loads((kdir / "key.json").read_text()).get("config", {})
        except (json.JSONDecodeError, OSError):
            began = {}
        changed = {f: [began[f], v] for f, v in cfg.identity().items() if f in began and began[f] != v}
        ck = torch.load(last, map_location="cpu", weights_only=True)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step = int(ck["step"])
        history = ck["history"]
        say(f"resuming from {last} (step {step})")
        if changed:
            say("resumed with changed settings (recorded in the head's training card): "
                + ", ".join(f"{f} {a} -> {b}" for f, (a, b) in changed.items()))
            seen = history.setdefault("resumed", [])
            if not seen or seen[-1]["changed"] != changed:
                seen.append({"step": step, "changed": changed})
    elif ddp.main:
        kdir.mkdir(parents=True, exist_ok=True)
        (kdir / "key.json").write_text(json.dumps(key, indent=2))

    idx = cache.index()
    lengths = {k: int(idx[k][1]["n"]) + int(idx[k][2]["n"]) for k in data.keys + data.val_keys}  # prompt + response
    loss_fn = _Loss(model, cfg, V)
    step_fn: Any = loss_fn
    if ddp.active:
        dev = torch.device(device)
        step_fn = torch.nn.parallel.DistributedDataParallel(
            _LossModule(model, loss_fn), device_ids=[dev.index] if dev.type == "cuda" else None)
    val = [cache.load(k) for k in data.val_keys] if ddp.main else []

    def evaluate() -> tuple[list[float], list[float]]:
        if not val:
            return [], []
        model.eval()
        with torch.no_grad():
            ls, acs, ns = np.zeros(cfg.ttt_steps), np.zeros(cfg.ttt_steps), np.zeros(cfg.ttt_steps)
            for j in range(0, len(val), 4):
                _, lv, av, nv = loss_fn(val[j : j + 4])
                ls += np.array(lv) * np.array(nv)
                acs += np.array(av) * np.array(nv)
                ns += np.array(nv)
        model.train()
        ns = np.maximum(ns, 1)
        return (ls / ns).tolist(), (acs / ns).tolist()

    # 4. train
    model.train()
    bar = _bar(progress, cfg.max_steps, "training", initial=step)
    t0, steps_now = time.perf_counter(), 0
    while step < cfg.max_steps:
        keys = _batch_at(step, data.keys, lengths, cfg.tokens_per_batch, cfg.seed)
        if ddp.active:  # this rank's share of the step's batch (a rank never goes empty)
            keys = keys[ddp.rank :: ddp.world] or [keys[ddp.rank % len(keys)]]
        batch = [cache.load(k) for k in keys]
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, cfg)
        opt.zero_grad(set_to_none=True)
        loss, ls, acs, _ = step_fn(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        step += 1
        steps_now += 1
        history["loss"].append(ls)
        history["acc"].append(acs)
        bar.update(1)
        if hasattr(bar, "set_postfix_str"):
            bar.set_postfix_str(f"loss {ls[0]:.3f} acc {acs[0]:.2f}")
        if ddp.main and cfg.eval_every and step % cfg.eval_every == 0 and step < cfg.max_steps:
            vl, va = evaluate()
            history["val"].append([step, vl, va])
            say(f"step {step}: val loss {', '.join(f'{x:.3f}' for x in vl)}; acc {', '.join(f'{x:.2f}' for x in va)}")
        if ddp.main and (step % cfg.checkpoint_every == 0 or step == cfg.max_steps):
            _save_ckpt(kdir, step, model, opt, history)
        if _stop_after is not None and steps_now >= _stop_after and step < cfg.max_steps:
            bar.close()
            raise KeyboardInterrupt
    bar.close()
    elapsed = time.perf_counter() - t0
    sps = steps_now / elapsed if steps_now else None
    if not ddp.main:  # rank 0 evaluates and writes the head
        ddp.barrier()
        ddp.stop()
        return TrainResult(Path(out), step, [], [], [], [], None, sps, cdir, 0.0, _digest(model))
    vl, va = evaluate()
    history["val"].append([step, vl, va])
    tail = history["loss"][-50:]
    tl = np.mean(np.array(tail), axis=0).tolist() if tail else []
    ta = np.mean(np.array(history["acc"][-50:]), axis=0).tolist() if tail else []

    # 5. the head, in the released layout, with lenpred's meta.json
    card = run.card
    training = {
        "run": str(run.path), "card_hash": run.card_hash,
        "run_card": {k: card.get(k) for k in ("model", "prompts", "sampling")},
        "data": {**data.split_info, "response_tokens": int(sum(len(c) for c in data.counts_source)),
                 "cache": str(cdir), "topk": cfg.topk},
        "draft_vocab": {"size": cfg.draft_vocab_size, "coverage": coverage},
        "ttt": {"steps": cfg.ttt_steps, "weights": [cfg.step_decay ** i for i in range(cfg.ttt_steps)]},
        "optimiser": {"name": "AdamW", "lr": cfg.lr, "betas": [0.9, 0.95], "weight_decay": 0.0,
                      "schedule": f"linear warm-up {cfg.warmup_steps} then linear decay to 0 at {cfg.max_steps}",
                      "grad_clip": cfg.grad_clip, "tokens_per_batch": cfg.tokens_per_batch},
        "steps": step, "seed": cfg.seed, "checkpoints": str(kdir),
        "world_size": ddp.world,  # data-parallel processes (torchrun); the batch is split among them
        "resumed_with_changes": history.get("resumed", []),
        "final": {"train_loss": tl, "train_acc": ta, "val_loss": vl, "val_acc": va},
        "speed": {"teacher_tokens_per_s": tf_rate, "steps_per_s": sps},
    }
    meta = {"target": target_summary(target.config, fp, target_spec.id), "layers": list(layers),
            "draft_vocab": {"size": cfg.draft_vocab_size, "coverage": coverage}, "training": training}
    model.eval()
    save_draft(model, out, fmt=cfg.format, dtype=cfg.dtype, card=card, config=cfg, meta=meta)
    ddp.barrier()
    ddp.stop()
    return TrainResult(Path(out), step, tl, ta, vl, va, tf_rate, sps, cdir, coverage, _digest(model))


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _bar(enabled: bool, total: int, desc: str, initial: int = 0) -> Any:
    if not enabled:
        return _NoBar()
    import sys

    from tqdm.auto import tqdm

    # into a log file (no terminal) a redraw every few seconds would be megabytes: every 60 s there
    return tqdm(total=total, initial=initial, desc=desc, unit="tok" if "teacher" in desc else "step",
                dynamic_ncols=True, leave=True, mininterval=0.5 if sys.stderr.isatty() else 60.0)
