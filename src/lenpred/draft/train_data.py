"""What draft training reads: a run's token ids, its split and its target; the training samples,
the state-cache jobs, and the order of the batches.

* :func:`open_run_target` -- the run (with token ids), its split, the loaded target and the device of
  a ``lenpred draft`` verb (refuses a model other than the run's own: its responses are the data);
* :func:`load_training_data` -- the training and validation samples (training prompts only);
* :func:`state_cache_jobs` / :func:`fill_state_cache` -- every sample of chosen split roles,
  teacher-forced into the state cache ``lenpred draft train`` and ``lenpred outlets features`` read
  (soft labels, the target's top-k, or hard ones, the states-only pass: :func:`cache_location`);
* :func:`batch_at` -- the samples of optimiser step ``step``: a pure function of (seed, step), so a
  resumed run sees the batches the uninterrupted one would have.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lenpred.data.lengths import check_token_ids
from lenpred.data.rundir import RunDir
from lenpred.data.split import Split, load_split
from lenpred.draft.states import StateCache
from lenpred.draft.train_config import DraftTrainConfig
from lenpred.errors import CardMismatchError, ConfigError, DataError, ModelError
from lenpred.io.fileio import canonical_json
from lenpred.progress import Progress

__all__ = ["DraftSource", "RunTarget", "TrainingData", "batch_at", "cache_location", "check_cache_labels",
           "epoch_batches", "fill_state_cache", "load_training_data", "open_run_target", "state_cache_jobs",
           "teacher_force"]


@dataclass(frozen=True)
class DraftSource:
    """What draft training and the state cache teacher-force: the run, its split, the target
    (:class:`lenpred.draft.target.Target`) and the target's :class:`lenpred.models.loading.ModelSpec`."""

    run: RunDir
    split: Split
    target: Any
    target_spec: Any


@dataclass
class RunTarget:
    """What a draft verb works on: the run, its split, the loaded target model and its device."""

    run: RunDir
    split: Split
    lm: Any  # lenpred.models.loading.LoadedModel
    target: Any  # lenpred.draft.target.Target
    device: str

    @property
    def eos_id(self) -> int:
        """The target's end-of-sequence id: the card's EOS token where it names one, else the tokenizer's."""
        name = (self.run.card.get("model") or {}).get("eos_token")
        if name:
            tid = self.lm.tokenizer.convert_tokens_to_ids(name)
            if isinstance(tid, int) and tid >= 0:
                return tid
        return int(self.lm.tokenizer.eos_token_id)

    @property
    def source(self) -> DraftSource:
        return DraftSource(self.run, self.split, self.target, self.lm.spec)


def open_run_target(run: str | os.PathLike[str], *, model: str | None = None, cfg: DraftTrainConfig | None = None,
                    device: str = "cpu", threads: int = 0, cache_dir: str | os.PathLike[str] | None = None,
                    train: bool = False) -> RunTarget:
    """The run (checked for token ids), its split, and its target loaded on ``device`` (under torchrun
    ``cuda`` is this process's ``cuda:LOCAL_RANK``); ``model`` defaults to the run's own and must be it.
    Before the weights load: ``cfg``'s ranges (:meth:`DraftTrainConfig.check`) and layers against the target's
    config, ``cache_dir`` (a directory, if it exists) and, for ``train``, training prompts in the split and a
    draft vocabulary that fits."""
    if cfg is not None:
        cfg.check()
    layers = cfg.layer_tuple() if cfg is not None else None
    run_dir = RunDir.open(run)
    check_token_ids(run_dir)
    # the run may still be growing: prompts collected after the split have no role and are not used
    split = load_split(run_dir, require_complete=False)
    import torch

    from lenpred.draft.distributed import Distributed
    from lenpred.draft.target import Target
    from lenpred.models import load
    from lenpred.models.loading import resolve

    card_model = run_dir.card.get("model") or {}
    name = model or card_model.get("id")
    if not name:
        raise DataError(f"{run_dir.path}/card.json names no model", "pass --model")
    spec = resolve(name)
    if card_model.get("fingerprint") and spec.fingerprint != card_model["fingerprint"]:
        raise CardMismatchError(
            f"--model {name} is not the model that generated {run_dir.path} (weights fingerprint differs)",
            "pass the run's own model: its responses are the training data",
        )
    if train and not split.train:
        raise DataError("the split has no training prompts", "write a split with training prompts (`lenpred split`)")
    _check_before_load(spec, layers, cache_dir, cfg.draft_vocab_size if train and cfg is not None else None)
    if threads > 0:
        torch.set_num_threads(threads)
    dev = Distributed().device(device)  # under torchrun: one process per device, cuda -> cuda:LOCAL_RANK
    lm = load(name, device=dev)
    return RunTarget(run_dir, split, lm, Target(lm.model, layers), dev)


def _check_before_load(spec: Any, layers: tuple[int, ...] | None, cache_dir: str | os.PathLike[str] | None,
                       draft_vocab: int | None) -> None:
    """What would otherwise fail only after the target's weights loaded (seconds to minutes)."""
    if cache_dir is not None and Path(cache_dir).exists() and not Path(cache_dir).is_dir():
        raise DataError(f"state cache {cache_dir} is a file", "pass a directory for --cache")
    if layers is None and draft_vocab is None:
        return
    from lenpred.draft.io import target_config

    tcfg = target_config(spec)[1]
    n = int(tcfg.num_hidden_layers)
    if layers is not None and (len(layers) != 3 or not all(0 <= j < n for j in layers)):
        raise ModelError(f"layers {layers} do not fit a target with {n} decoder layers", f"use three layers in 0..{n - 1}")
    check_draft_vocab(draft_vocab, int(tcfg.vocab_size))


def check_draft_vocab(n: int | None, vocab_size: int) -> None:
    """The draft vocabulary is a subset of the target's: refused before any teacher forcing."""
    if n is not None and not 0 < n <= vocab_size:
        raise ModelError(f"draft vocabulary size {n} must be in 1..{vocab_size} (the target's vocabulary)",
                         f"pass --draft-vocab-size {min(8192, vocab_size)} or less")


@dataclass
class TrainingData:
    keys: list[tuple[str, int]]  # training samples
    val_keys: list[tuple[str, int]]
    jobs: list[tuple[str, list[int], list[tuple[int, list[int], str]]]]  # for the state cache
    counts_source: list[list[int]]  # training responses (+ EOS where they ended with it)
    n_train_prompts: int
    split_info: dict[str, Any]


Sample = tuple[int, list[int], str]  # (sample_idx, response token ids, stop_reason)


def _sequences(run: RunDir, max_seq_len: int) -> tuple[list[str], dict[str, list[int]], dict[str, list[Sample]]]:
    """A run's prompts in run order, their token ids, and each prompt's samples with responses cut to
    ``max_seq_len``; refuses a run without token ids."""
    prompts, s = check_token_ids(run)
    pid_ids = {str(r.prompt_id): [int(x) for x in r.prompt_token_ids] for r in prompts.itertuples()}
    by_prompt: dict[str, list[Sample]] = {}
    for r in s.itertuples():
        ids = [int(x) for x in r.token_ids][:max_seq_len]
        by_prompt.setdefault(str(r.prompt_id), []).append((int(r.sample_idx), ids, str(r.stop_reason)))
    return [str(p) for p in prompts["prompt_id"]], pid_ids, by_prompt


def _cut(prompt_ids: list[int], samples: list[Sample], max_seq_len: int) -> tuple[list[int], list[Sample]]:
    """Prompt cut to ``max_seq_len - 1`` tokens, each response to what is left: one sequence fits."""
    p_ids = prompt_ids[: max_seq_len - 1]
    return p_ids, [(i, ids[: max_seq_len - len(p_ids)], stop) for i, ids, stop in samples]


def load_training_data(run: RunDir, split: Split, cfg: DraftTrainConfig, eos_id: int) -> TrainingData:
    """The training and validation samples of a run, with their token ids; refuses a run without ids."""
    order, pid_ids, by_prompt = _sequences(run, cfg.max_seq_len)
    train_set, val_set = set(map(str, split.train)), set(map(str, split.val))
    if not train_set:
        raise DataError("the split has no training prompts", "write a split with training prompts (`lenpred split`)")
    train_pids = [p for p in order if p in train_set and p in by_prompt]
    if cfg.max_prompts is not None:
        train_pids = train_pids[: cfg.max_prompts]
    split.check_no_test(train_pids, what="draft training data")  # a last guard against leaks
    val_pids = [p for p in order if p in val_set and p in by_prompt]
    jobs, keys, val_keys, counts_source = [], [], [], []
    for pid in train_pids:
        p_ids, samples = _cut(pid_ids[pid], sorted(by_prompt[pid])[: cfg.max_samples_per_prompt], cfg.max_seq_len)
        jobs.append((pid, p_ids, samples))
        keys.extend((pid, i) for i, ids, _ in samples if ids)
        counts_source.extend(ids + ([eos_id] if stop == "eos" else []) for _, ids, stop in samples)
    for pid in val_pids:  # validation: the first sample of each validation prompt, up to val_samples
        if len(val_keys) >= cfg.val_samples:
            break
        first = sorted(by_prompt[pid])[0]
        if first[1]:
            jobs.append((pid, *_cut(pid_ids[pid], [first], cfg.max_seq_len)))
            val_keys.append((pid, first[0]))
    if not keys:
        raise DataError("no training sample has response tokens", "collect more samples on training prompts")
    h = hashlib.sha256(canonical_json(sorted(train_pids)).encode()).hexdigest()[:16]
    info = {"train_prompts": len(train_pids), "train_samples": len(keys), "val_samples": len(val_keys),
            "train_prompt_ids_sha256": h, "split": _split_info(split)}
    return TrainingData(keys, val_keys, jobs, counts_source, len(train_pids), info)


def state_cache_jobs(run: RunDir, split: Split, roles: tuple[str, ...] = ("train", "val", "test"),
                     max_seq_len: int = 2048) -> list[tuple[str, list[int], list[tuple[int, list[int], str]]]]:
    """Every sample of the split's ``roles`` prompts as state-cache jobs, in role order (the training
    prompts first), cut to ``max_seq_len`` exactly as :func:`load_training_data` cuts them, so a cache
    filled here is the cache ``lenpred draft train`` reads."""
    order, pid_ids, by_prompt = _sequences(run, max_seq_len)
    jobs = []
    for role in roles:
        members = set(map(str, split.ids(role)))
        jobs.extend((pid, *_cut(pid_ids[pid], sorted(by_prompt[pid]), max_seq_len))
                    for pid in order if pid in members and pid in by_prompt)
    return jobs


def cache_location(run: RunDir, target: Any, target_spec: Any, cfg: DraftTrainConfig,
                   cache_dir: str | os.PathLike[str] | None = None, labels: str | None = None,
                   compute_dtype: str | None = None) -> tuple[Path, dict[str, Any]]:
    """The state cache's directory (``cache_dir``, or the default one named by what determines its
    contents) and its manifest (which a cache opened again must match). ``labels`` (``soft``: the
    target's top-k; ``hard``: the sampled tokens only) and ``compute_dtype`` (the hard pass's
    arithmetic, ``float32`` or ``bfloat16``); None: what the cache already at ``cache_dir`` holds (draft
    training reads it from there), soft and float32 for a new one."""
    from lenpred.draft.states import LABELS, compute_dtype_of, default_cache_dir, labels_of

    have = _existing_manifest(cache_dir)  # read once: the labels and the arithmetic both come from it
    if labels is None:
        labels = labels_of(have) if have is not None else "soft"
    if compute_dtype is None:
        compute_dtype = compute_dtype_of(have) if have is not None else "float32"
    if labels not in LABELS:
        raise ConfigError(f"--labels must be one of {', '.join(LABELS)}, got {labels!r}",
                          "pass --labels soft (the target's top-k) or --labels hard (the sampled tokens)")
    layers = target.layers
    fp = target_spec.fingerprint
    manifest = {"target_fingerprint": fp, "layers": list(layers), "labels": labels,
                "topk": cfg.topk if labels == "soft" else 0, "dtype": "float16",
                "card_hash": run.card_hash, "max_seq_len": cfg.max_seq_len, "target_id": target_spec.id,
                "run": str(run.path), "compute_dtype": compute_dtype}
    cdir = Path(cache_dir) if cache_dir else default_cache_dir(run.card_hash, fp, layers, cfg.topk, labels,
                                                               compute_dtype)
    return cdir, manifest


def _existing_manifest(cache_dir: str | os.PathLike[str] | None) -> dict[str, Any] | None:
    """The manifest of the state cache at ``cache_dir``, None without a readable one (an unreadable
    manifest is left to :meth:`StateCache.open_or_create` to refuse, naming the fix)."""
    import json

    f = Path(cache_dir) / "manifest.json" if cache_dir else None
    if f is None or not f.is_file():
        return None
    try:
        m = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) else None


def check_cache_labels(cache_dir: str | os.PathLike[str] | None, labels: str) -> None:
    """Refuse, before the target loads, to extend the cache at ``cache_dir`` with another label kind."""
    from lenpred.draft.states import refuse_other_labels

    m = _existing_manifest(cache_dir)
    if m is not None and cache_dir is not None:
        refuse_other_labels(Path(cache_dir), m, labels)


def teacher_force(cache: StateCache, target: Any, jobs: list[tuple[str, list[int], list[tuple[int, list[int], str]]]], *,
                  progress: bool = True, prompts_per_shard: int = 4, writer: str = "") -> dict[str, float]:
    """Teacher-force the ``jobs`` not cached yet into ``cache``: {"tokens", "seconds"} of this call."""
    keys = [(p, i) for p, _, ss in jobs for i, _, _ in ss]
    with Progress("teacher forcing", sum(len(ids) for _, _, ss in jobs for _, ids, _ in ss), unit="tok",
                  initial=cache.n_tokens(keys), enabled=progress) as bar:
        return cache.build(target, jobs, prompts_per_shard=prompts_per_shard, progress=lambda n, _: bar.update(n),
                           writer=writer)


def fill_state_cache(src: DraftSource, cfg: DraftTrainConfig, *, cache_dir: str | os.PathLike[str] | None = None,
                     roles: tuple[str, ...] = ("train", "val", "test"), progress: bool = True,
                     prompts_per_shard: int = 4, labels: str = "soft", compute_dtype: str = "float32",
                     shard: tuple[int, int] = (0, 1)) -> tuple[Path, dict[str, float], int]:
    """Teacher-force every sample of ``roles`` into the state cache ``lenpred draft train`` and
    ``lenpred outlets features`` read (resumable: samples already cached are skipped). ``labels``:
    ``soft`` (the target's top-k, a full pass with its LM head) or ``hard`` (the states-only pass; no
    logits kept, in ``compute_dtype``); a cache of the other kind or arithmetic is refused. ``shard``
    (i, n): only slice i of n of the prompts (:func:`lenpred.features.shards.shard_positions`), written
    under shard names of its own, so n processes fill one cache at once with nothing to merge.
    Returns (cache directory, {"tokens", "seconds"} of this call, response tokens in the cache for these jobs)."""
    from lenpred.features.shards import shard_positions

    cfg.check()
    cdir, manifest = cache_location(src.run, src.target, src.target_spec, cfg, cache_dir, labels, compute_dtype)
    jobs = state_cache_jobs(src.run, src.split, roles, cfg.max_seq_len)
    i, n = shard
    if n > 1:
        jobs = [jobs[k] for k in sorted(shard_positions([len(ids) for _, ids, _ in jobs], i, n))]
    cache = StateCache.open_or_create(cdir, manifest)
    tf = teacher_force(cache, src.target, jobs, progress=progress, prompts_per_shard=prompts_per_shard,
                       writer=f"s{i}of{n}" if n > 1 else "")
    return cdir, tf, cache.n_tokens([(p, i) for p, _, ss in jobs for i, _, _ in ss])


def _split_info(split: Split) -> dict[str, Any]:
    return {"counts": split.counts(), "config": split.config.to_dict(), "card_hash": split.card_hash}


def epoch_batches(keys: list[tuple[str, int]], lengths: dict[tuple[str, int], int], budget: int, seed: int,
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


def batch_at(step: int, keys: list[tuple[str, int]], lengths: dict[tuple[str, int], int], budget: int,
              seed: int) -> list[tuple[str, int]]:
    epoch, s = 0, step
    while True:
        b = epoch_batches(keys, lengths, budget, seed, epoch)
        if s < len(b):
            return b[s]
        s -= len(b)
        epoch += 1
