"""``lenpred outlets features``: a run's trajectory features, resumably, in shards, into one artifact.

:func:`compute_trajectory` validates everything before it loads the target or writes a byte (the
run has token ids and a split, the roles exist, the draft head is for the run's model, the output
is ours), then teacher-forces each selected sample through the target and the draft head and keeps
the rows of :func:`lenpred.outlets.features.positions`.

**Target states.** By default the pass computes only what the rows read
(:class:`lenpred.draft.teacher.StatesOnlyTarget`): the target's three captured states, no LM head,
a prompt's samples batched on its cache, in bf16 autocast where the CPU has bf16 hardware (or on a
GPU) and float32 elsewhere (``compute_dtype``); nothing is written but the rows. With ``cache=DIR``
the states come from the draft-training state cache (:mod:`lenpred.draft.states`) when it holds the
sample and are computed into it otherwise (logits and top-k included, for ``lenpred draft train``);
the cache keeps float16 states, so every row of such an artifact reads float16-rounded target
states (samples longer than the cache's ``max_seq_len`` are computed in memory and rounded the same
way, not stored). The spec's ``target_states`` says which: ``float32``, ``bfloat16`` or ``float16``.

**Resumable.** Finished chunks (``chunk_prompts`` prompts each) wait in ``OUT.work/`` as single
safetensors files written atomically (blocks, index columns, and the finished sample keys in the
header); a rerun computes only samples no chunk holds, so a kill loses at most one chunk and never
duplicates a row; a damaged chunk is named, set aside and recomputed. A rerun with another
precision, other layers or another draft head than the chunks it would extend is refused, naming
both. ``--shard I/N`` computes a deterministic slice of the prompts (sorted by total tokens, every
N-th: balanced work) into its own artifact; :func:`merge_trajectories` joins them. Rows are ordered
by (prompt_id, sample_idx, t) whatever the sharding, so merged == unsharded.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lenpred.draft.teacher import StatesOnlyTarget, resolve_compute_dtype
from lenpred.errors import CardMismatchError, ConfigError, DataError
from lenpred.features.work import WorkDir, work_path
from lenpred.io.artifacts import check_out
from lenpred.io.fileio import canonical_json, file_sha256
from lenpred.outlets.features import TrajectoryConfig, block_names, make_spec, sample_rows
from lenpred.outlets.inputs import (
    CACHE_MAX_SEQ,
    Prompt,
    check_cache_writable,
    keys_sha,
    open_cache,
    select_prompts,
    shard_prompts,
)
from lenpred.outlets.store import KIND, Trajectory, load_trajectory, save_trajectory
from lenpred.progress import Progress

__all__ = ["TrajectoryRequest", "TrajectoryRun", "compute_trajectory", "draft_identity", "parse_roles"]

ROLES = ("train", "val", "test")
_IDX = ("sample_idx", "t", "length", "truncated")


def parse_roles(text: str | Sequence[str]) -> tuple[str, ...]:
    items = [x.strip() for x in (text.split(",") if isinstance(text, str) else text) if x.strip()]
    if not items:
        raise ConfigError("--roles names no role", f"pass some of {', '.join(ROLES)}")
    for r in items:
        if r not in ROLES:
            raise ConfigError(f"--roles: unknown role {r!r}", f"roles are {', '.join(ROLES)} (e.g. --roles train,val)")
    return tuple(r for r in ROLES if r in items)


@dataclass(frozen=True)
class TrajectoryRequest:
    """What ``lenpred outlets features`` computes, built once from its flags: the run, the draft head,
    the output, the row options and which prompts (``roles`` as ``"train,val"`` or a sequence,
    ``shard`` as ``"I/N"`` or a pair; None: the whole run). ``cache``: a state-cache directory to read
    and fill; None or False: none (the states-only pass, see the module docstring)."""

    run: str | Path | None = None
    draft: str | Path | None = None
    out: str | Path | None = None
    cfg: TrajectoryConfig = field(default_factory=TrajectoryConfig)
    roles: str | Sequence[str] = ROLES
    shard: str | tuple[int, int] | None = None
    model: str | None = None
    cache: str | Path | bool | None = None
    max_prompts: int | None = None
    max_samples_per_prompt: int | None = None
    device: str = "cpu"
    progress: bool = True

    @property
    def limits(self) -> tuple[int | None, int | None]:
        return self.max_prompts, self.max_samples_per_prompt

    def shard_pair(self) -> tuple[int, int]:
        if self.shard is None or isinstance(self.shard, str):
            from lenpred.features.shards import parse_shard

            return parse_shard(self.shard)
        return self.shard


@dataclass
class TrajectoryRun:
    out: Path
    samples: int  # samples in the artifact
    rows: int
    computed: int  # samples computed by this call
    from_cache: int  # of those, read from the state cache
    tokens: int  # target tokens teacher-forced by this call (prompt + response)
    seconds: float
    cache: Path | None
    up_to_date: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        if self.up_to_date:
            return f"{self.out} is up to date ({self.samples} samples, {self.rows} rows)"
        rate = (f", {self.tokens} target tokens teacher-forced, {self.tokens / self.seconds:.0f} tokens/s overall"
                if self.tokens and self.seconds else "")
        return (f"{self.samples} samples, {self.rows} rows -> {self.out} ({self.computed} computed now, "
                f"{self.from_cache} of them from the state cache {self.cache or '(none)'}; {self.seconds:.1f} s{rate})")


# ---------------------------------------------------------------------------------------- identity
def draft_identity(head: Any) -> dict[str, Any]:
    """What the spec records about a draft head: its weights' sha256, its target and card."""
    meta = head.meta or {}
    tgt = meta.get("target") or {}
    return {
        "sha256": file_sha256(head.path / head.weights_file),
        "weights_file": head.weights_file,
        "hidden_size": int(head.config.hidden_size),
        "draft_vocab_size": int(head.config.draft_vocab_size),
        "target_id": tgt.get("id"),
        "target_fingerprint": tgt.get("fingerprint"),
        "card": meta.get("card"),
        "card_hash": meta.get("card_hash"),
    }


# ---------------------------------------------------------------------------------------- compute
def _load_target_model(folder: Path, device: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    from lenpred.errors import ModelError

    try:
        m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    except Exception as e:
        raise ModelError(f"transformers could not load {folder} ({type(e).__name__}: {e})".splitlines()[0],
                         "pass the run's model as a folder transformers can load (--model)") from e
    return m.to(device).eval()

@dataclass
class _Job:
    """Everything :func:`compute_trajectory` resolved and checked before it writes a byte."""

    req: TrajectoryRequest
    run: Any  # RunDir
    head: Any  # DraftHead
    roles: tuple[str, ...]
    shard: tuple[int, int]
    selected: list[Prompt]  # every selected prompt (the selection hash covers them all)
    part: list[Prompt]  # this shard's
    layers: list[int]
    folder: Path | None  # the target's weights (None: a loaded target was passed)
    state_cache: Any
    spec: dict[str, Any]
    identity: dict[str, Any]
    selection: dict[str, Any]


def _check_draft_for_run(head: Any, rd: Any) -> None:
    card_model = rd.card.get("model") or {}
    rec_fp = ((head.meta or {}).get("target") or {}).get("fingerprint")
    if rec_fp and card_model.get("fingerprint") and rec_fp != card_model["fingerprint"]:
        raise CardMismatchError(
            f"draft head {head.path} was trained for target {((head.meta or {}).get('target') or {}).get('id') or '?'} "
            f"({rec_fp[:19]}...), not the model of run {rd.path} ({card_model['fingerprint'][:19]}...)",
            "pass a draft head trained for the run's model")


def _resolve_target(rd: Any, model: str | None, target: Any) -> tuple[Path | None, str, str, Any]:
    """(weights folder or None, fingerprint, id, config) of the target: the run's own model."""
    card_model = rd.card.get("model") or {}
    if target is None:
        from transformers import AutoConfig

        from lenpred.models.loading import hf_folder

        name = model or card_model.get("id")
        if not name:
            raise DataError(f"{rd.path}/card.json names no model", "pass --model (the run's model)")
        spec, folder = hf_folder(name)
        fp, target_id = spec.fingerprint, spec.id
        tcfg = AutoConfig.from_pretrained(folder)
    else:
        folder, fp, target_id, tcfg = None, card_model.get("fingerprint"), card_model.get("id"), target.config
    if card_model.get("fingerprint") and fp != card_model["fingerprint"]:
        raise CardMismatchError(f"model {target_id!r} is not the model that generated {rd.path} (weights fingerprint "
                                f"{str(fp)[:19]}... != {card_model['fingerprint'][:19]}...)",
                                "pass the run's own model (--model, default: the card's)")
    return folder, fp, target_id, tcfg


def _prepare(req: TrajectoryRequest, out: Path, target: Any, warn: Callable[[str], None] | None) -> _Job:
    """Every check of :func:`compute_trajectory`, before anything is written."""
    from lenpred.data.lengths import check_token_ids
    from lenpred.data.rundir import RunDir
    from lenpred.data.split import load_split
    from lenpred.draft.io import check_against_target, load_draft

    cfg, roles, limits = req.cfg, parse_roles(req.roles), req.limits
    i_sh, n_sh = req.shard_pair()
    if n_sh < 1 or not 0 <= i_sh < n_sh:
        raise ConfigError(f"shard {i_sh}/{n_sh} is out of range", f"pass I/N with 0 <= I < N (e.g. 0/{max(n_sh, 1)})")
    check_out(out, kind=KIND)
    rd = RunDir.open(req.run)
    check_token_ids(rd)  # a run without token ids cannot be teacher-forced
    split = load_split(rd, require_complete=False)
    selected = select_prompts(rd, split, roles, *limits)
    part = shard_prompts(selected, i_sh, n_sh)
    if not part:  # an empty artifact would merge into nothing and hide a launcher's mistake
        raise ConfigError(f"shard {i_sh}/{n_sh} holds no prompt: the selection has {len(selected)} prompt(s) for "
                          f"{n_sh} shards", f"pass fewer shards (--shard I/N with N <= {len(selected)}) or select more "
                          "prompts (a larger --max-prompts, more --roles)")
    head = load_draft(req.draft)
    _check_draft_for_run(head, rd)
    folder, fp, target_id, tcfg = _resolve_target(rd, req.model, target)
    layers = check_against_target(head, tcfg, fingerprint=fp)
    dt = int(tcfg.hidden_size)
    widths = dict(zip(block_names(layers), (head.config.hidden_size, head.config.hidden_size, dt,
                                            head.config.hidden_size), strict=True))
    state_cache = open_cache(req.cache, rd, fp, target_id, layers) if req.cache else None  # False / None: no cache
    if state_cache is not None:
        check_cache_writable(state_cache, part)
    tstates = "float16" if state_cache is not None else resolve_compute_dtype(cfg.compute_dtype, req.device, warn=warn)
    tspec = make_spec(target={"id": target_id, "fingerprint": fp, "num_hidden_layers": int(tcfg.num_hidden_layers),
                              "hidden_size": dt},
                      draft=draft_identity(head), layers=layers, widths=widths, cfg=cfg,
                      target_states=tstates)
    identity = {"spec": tspec, "card_hash": rd.card_hash, "shard": [i_sh, n_sh], "dtype": cfg.dtype}
    selection = {"roles": list(roles), "max_prompts": limits[0], "max_samples_per_prompt": limits[1],
                 "samples_sha256": keys_sha(selected), "total_samples": sum(len(p.samples) for p in selected),
                 "total_prompts": len(selected)}
    return _Job(req, rd, head, roles, (i_sh, n_sh), selected, part, list(layers),
                folder, state_cache, tspec, identity, selection)


def compute_trajectory(req: TrajectoryRequest, *, log: Callable[[str], None] | None = None, target: Any = None,
                       on_chunk: Callable[[int], None] | None = None) -> TrajectoryRun:
    """Compute (or resume) the trajectory features of ``req.run``'s samples into ``req.out``.

    ``target``: an already loaded :class:`lenpred.draft.target.Target` (tests); otherwise the run
    card's model (or ``req.model``) is loaded. ``on_chunk(n)`` is called after the n-th chunk of this
    call is written (a test raises KeyboardInterrupt there, as a kill would).
    """
    if req.run is None or req.draft is None or req.out is None:
        raise ConfigError("trajectory features need a run, a draft head and an output",
                          "lenpred outlets features --run data/runs/NAME --draft HEAD --out TRAJ")
    say = log or (lambda m: None)
    cfg, out = req.cfg, Path(req.out)
    job = _prepare(req, out, target, say)
    cache_root = getattr(job.state_cache, "root", None)
    keys_all = {(p.prompt_id, s) for p in job.part for s, _, _ in p.samples}
    if _up_to_date(out, job.identity, job.selection):
        t = load_trajectory(out)
        return TrajectoryRun(out, len(keys_all), t.n, 0, 0, 0, 0.0, cache_root, up_to_date=True)

    # ---- from here on, files are written
    work = WorkDir.open(work_path(out), job.identity, what="trajectory")
    done, chunks = _finished(work, say)
    todo = [p for p in job.part if any((p.prompt_id, s) not in done for s, _, _ in p.samples)]
    n_todo = sum(1 for p in todo for s, _, _ in p.samples if (p.prompt_id, s) not in done)
    i_sh, n_sh = job.shard
    say(f"{len(keys_all)} samples of {len(job.part)} prompts (shard {i_sh}/{n_sh}, roles {','.join(job.roles)}), "
        f"{len(keys_all) - n_todo} done, {n_todo} to compute; layers {job.layers}; "
        f"target states {job.spec['target_states']}"
        f"{f' from the state cache {cache_root}' if job.state_cache is not None else ' (states only, no cache)'}")
    t0 = time.perf_counter()
    stats = {"computed": 0, "from_cache": 0, "tokens": 0}
    if todo:
        try:
            _compute_all(job, todo, done, work, stats, target=target, on_chunk=on_chunk)
        except BaseException:
            if not work.chunk_paths():  # nothing to resume: leave no work folder behind
                work.remove()
            raise
        done, chunks = _finished(work)
    seconds = time.perf_counter() - t0
    traj = _assemble(sorted(keys_all), done, chunks, block_names(job.layers), job.spec)
    meta = {"selection": job.selection, "shard": {"index": i_sh, "count": n_sh}, "draft_path": str(job.head.path),
            "cache": str(cache_root) if job.state_cache is not None else None, "run": str(job.run.path)}
    if stats["computed"]:
        meta["timing"] = {"samples": stats["computed"], "tokens": stats["tokens"], "seconds": round(seconds, 2),
                          "device": req.device}
    save_trajectory(out, traj, job.run.card, config=cfg, meta=meta, dtype=cfg.dtype)
    work.remove()
    return TrajectoryRun(out, len(keys_all), traj.n, stats["computed"], stats["from_cache"], stats["tokens"], seconds,
                         cache_root)


def _parse_chunk(md: dict[str, str], t: dict[str, np.ndarray]) -> tuple[list[tuple[str, int]], list[str],
                                                                         dict[str, np.ndarray]]:
    keys = [(str(a), int(b)) for a, b in json.loads(md["samples"])]
    return keys, json.loads(md["prompt_ids"]), t


def _finished(work: WorkDir, warn: Callable[[str], None] | None = None
              ) -> tuple[dict[tuple[str, int], tuple[int, int, int]], list[tuple[list[str], dict[str, np.ndarray]]]]:
    """The finished samples of the work folder: key -> (chunk, first row, rows), and the chunks (a damaged
    chunk is set aside through ``warn``: its samples count as not done)."""
    done: dict[tuple[str, int], tuple[int, int, int]] = {}
    chunks: list[tuple[list[str], dict[str, np.ndarray]]] = []
    for keys, pids, tensors in work.read(_parse_chunk, warn or (lambda m: None)):
        ci = len(chunks)
        chunks.append((pids, tensors))
        sidx = tensors["_idx.sample_idx"]
        for k in keys:
            rows = np.flatnonzero((np.asarray(pids) == k[0]) & (sidx == k[1]))
            done.setdefault(k, (ci, int(rows[0]) if rows.size else 0, int(rows.size)))
    return done, chunks


def _compute_all(job: _Job, todo: list[Prompt], done: dict[Any, Any], work: WorkDir, stats: dict[str, int], *,
                 target: Any, on_chunk: Callable[[int], None] | None) -> None:
    """Teacher-force the prompts still to do, a chunk of ``cfg.chunk_prompts`` at a time, into ``work``."""
    cfg, device = job.req.cfg, job.req.device
    n_todo = sum(1 for p in todo for s, _, _ in p.samples if (p.prompt_id, s) not in done)
    if target is None:
        from lenpred.draft.target import Target

        target = Target(_load_target_model(job.folder, device), job.layers)
    # the cache path fills the draft-training cache (logits included) through `target`; rows of samples
    # it cannot hold, and every row without a cache, come from the states-only pass
    dtype = "float32" if job.state_cache is not None else job.spec["target_states"]
    states = StatesOnlyTarget(target.model, job.layers, dtype)
    model_d = job.head.model.to(device)
    model_d.attach_embeddings(target.embedding)
    # the bar counts the response tokens the rows need (all of L for fraction rows, up to the last live point for live)
    n_tokens = sum(len(_forced(r, cfg)) for p in todo for s, r, _ in p.samples if (p.prompt_id, s) not in done)
    bar = Progress("trajectory", total=n_tokens, unit="tokens", enabled=job.req.progress and n_todo > 0)
    n_chunks = 0
    try:
        for c0 in range(0, len(todo), cfg.chunk_prompts):
            group = todo[c0 : c0 + cfg.chunk_prompts]
            keys, pids, tensors = _compute_chunk(job, group, done, (target, states, model_d), stats, bar)
            work.write(tensors, {"samples": json.dumps([[k, int(i)] for k, i in keys]),
                                 "prompt_ids": json.dumps(pids)})
            n_chunks += 1
            if on_chunk is not None:
                on_chunk(n_chunks)
    finally:
        bar.close()


def _up_to_date(out: Path, identity: dict[str, Any], selection: dict[str, Any]) -> bool:
    from lenpred.io.artifacts import is_artifact, load_artifact

    if not is_artifact(out):
        return False
    m = load_artifact(out, kind=KIND, verify=False).meta
    spec = {k: v for k, v in (m.get("trajectory_spec") or {}).items() if k != "dtype"}
    same = (canonical_json(spec) == canonical_json(identity["spec"]) and m.get("card_hash") == identity["card_hash"]
            and [(m.get("shard") or {}).get("index"), (m.get("shard") or {}).get("count")] == identity["shard"]
            and (m.get("trajectory_spec") or {}).get("dtype") == identity["dtype"])
    return same and canonical_json(m.get("selection")) == canonical_json(selection)


def _compute_chunk(job: _Job, group: list[Prompt], done: dict[Any, Any], models: tuple[Any, StatesOnlyTarget, Any],
                   stats: dict[str, int], bar: Any) -> tuple[list[tuple[str, int]], list[str], dict[str, np.ndarray]]:
    """One chunk's rows: ``models`` are the target, its states-only pass and the draft model."""
    target, states, draft = models
    layers, cfg, cache = job.layers, job.req.cfg, job.state_cache
    todo = [(p, [s for s in p.samples if (p.prompt_id, s[0]) not in done]) for p in group]
    pre = set(cache.index()) if cache is not None else set()
    if cache is not None:  # fill the shared cache with what fits its max_seq_len (draft training would cut the rest)
        limit = int(cache.manifest.get("max_seq_len", CACHE_MAX_SEQ))
        jobs = [(p.prompt_id, p.ids, [(i, r, "length" if tr else "eos") for i, r, tr in ss
                                      if len(p.ids) + len(r) <= limit and (p.prompt_id, i) not in pre])
                for p, ss in todo]
        jobs = [j for j in jobs if j[2]]
        if jobs:
            cache.build(target, jobs, prompts_per_shard=len(jobs))
            stats["tokens"] += sum(len(ids) + sum(len(r) for _, r, _ in ss) for _, ids, ss in jobs)
    keys, pids, parts = [], [], []
    idx: dict[str, list[np.ndarray]] = {k: [] for k in _IDX}
    for p, ss in todo:
        if not ss:
            continue
        P = len(p.ids)
        aux_mem: dict[int, Any] = {}
        cached = {}
        if cache is not None:
            have = cache.index()
            for i, r, _ in ss:
                if (p.prompt_id, i) in have:
                    st = cache.load((p.prompt_id, i))
                    if st.n_prompt == P and np.array_equal(st.tokens, np.asarray(p.ids + r, dtype=st.tokens.dtype)):
                        cached[i] = st.aux
        missing = [(i, r) for i, r, _ in ss if i not in cached]
        if missing:  # no cache, or too long for it: the states-only pass
            forced = [_forced(r, cfg) for _, r in missing]
            for (i, _), a in zip(missing, states.sample_states(p.ids, forced), strict=True):
                aux_mem[i] = a.half().float() if cache is not None else a  # one precision per artifact
            stats["tokens"] += P + sum(len(r) for r in forced)
        for i, r, tr in ss:
            L = len(r)
            ts = cfg.positions(L)
            aux = cached[i].astype(np.float32) if i in cached else aux_mem[i]
            blocks = sample_rows(draft, aux, np.asarray(p.ids + r, dtype=np.int64), P, ts, layers)
            parts.append(blocks)
            pids.extend([p.prompt_id] * len(ts))
            idx["sample_idx"].append(np.full(len(ts), i, np.int64))
            idx["t"].append(ts)
            idx["length"].append(np.full(len(ts), L, np.int64))
            idx["truncated"].append(np.full(len(ts), int(tr), np.int64))
            keys.append((p.prompt_id, i))
            stats["computed"] += 1
            stats["from_cache"] += int((p.prompt_id, i) in pre)
            bar.update(int(ts.max()) if ts.size else 0)  # = len(_forced(r, cfg))
    names = list(parts[0]) if parts else []
    dtype = np.float16 if cfg.dtype == "float16" else np.float32
    tensors: dict[str, np.ndarray] = {}
    for k in names:
        v = np.concatenate([b[k] for b in parts])
        if not np.isfinite(v).all() or (dtype == np.float16 and float(np.abs(v).max()) > float(np.finfo(np.float16).max)):
            raise DataError(f"trajectory block {k!r} has NaN, infinite or float16-overflowing values",
                            "store as float32 (--dtype float32; delete the work folder first)")
        tensors[k] = v.astype(dtype)
    for k in _IDX:
        tensors[f"_idx.{k}"] = np.concatenate(idx[k]) if idx[k] else np.zeros(0, np.int64)
    return keys, pids, tensors


# ---- row selection: how much of a response the rows need (kept apart from the chunk bookkeeping above)
def _forced(response: Sequence[int], cfg: TrajectoryConfig) -> Sequence[int]:
    """The part of ``response`` the kept rows read: row t reads states up to x_{P+t-2} and the token
    x_{P+t-1}, so teacher forcing stops at the last kept position (attention is causal: the states
    before it do not depend on what follows). Live rows end at the last doubling point below L, so a
    long answer is forced only up to about half its length."""
    ts = cfg.positions(len(response))
    return response[: int(ts.max())] if ts.size else response[:0]


def _assemble(keys: list[tuple[str, int]], done: dict[Any, tuple[int, int, int]],
              chunks: list[tuple[list[str], dict[str, np.ndarray]]], names: Sequence[str],
              spec: dict[str, Any]) -> Trajectory:
    missing = [k for k in keys if k not in done]
    if missing:
        raise DataError(f"{len(missing)} sample(s) have no finished chunk (first: {missing[0]})",
                        "rerun the same command to compute them")
    sel: list[np.ndarray] = []
    by_chunk: dict[int, list[np.ndarray]] = {}
    for k in keys:
        ci, r0, n = done[k]
        by_chunk.setdefault(ci, []).append(np.arange(r0, r0 + n))
    index_parts, block_parts = [], {k: [] for k in names}
    for ci, rows in sorted(by_chunk.items()):
        r = np.concatenate(rows)
        pids, t = chunks[ci]
        index_parts.append(pd.DataFrame({
            "prompt_id": np.asarray(pids, dtype=object)[r].astype(str), "sample_idx": t["_idx.sample_idx"][r],
            "t": t["_idx.t"][r], "length": t["_idx.length"][r], "truncated": t["_idx.truncated"][r].astype(bool)}))
        for k in names:
            block_parts[k].append(t[k][r])  # the stored dtype: save_trajectory writes it as it is
        sel.append(r)
    index = pd.concat(index_parts, ignore_index=True)
    index["remaining"] = index["length"] - index["t"]
    order = np.lexsort((index["t"].to_numpy(), index["sample_idx"].to_numpy(), index["prompt_id"].to_numpy()))
    blocks = {k: np.concatenate(v)[order] for k, v in block_parts.items()}
    return Trajectory(index.iloc[order].reset_index(drop=True), blocks, dict(spec))
