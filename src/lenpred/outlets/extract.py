"""``lenpred outlets features``: a run's trajectory features, resumably, in shards, into one artifact.

:func:`compute_trajectory` validates everything before it loads the target or writes a byte (the
run has token ids and a split, the roles exist, the draft head is for the run's model, the output
is ours), then teacher-forces each selected sample through the target and the draft head and keeps
the rows of :func:`lenpred.outlets.features.positions`.

**Target states.** The teacher-forced target states come from the draft-training state cache
(:mod:`lenpred.draft.states`) when it holds the sample, and are computed and added to it otherwise,
so draft training and OUTLETS share one cache. By default that is the cache the draft head was
trained with (its meta.json names it) when it was made for this run, target and layers, else the
default ``$LENPRED_HOME/draft-states/<card>-<fp>-L<a>-<b>-<c>-k64``. The cache keeps float16
states, so with a cache every row reads float16-rounded target states (samples longer than the
cache's ``max_seq_len`` are computed in memory and rounded the same way, not stored); ``--no-cache``
computes in float32 and stores nothing (the exact online == offline check uses that path).

**Resumable.** Finished chunks (``chunk_prompts`` prompts each) wait in ``OUT.work/`` as single
safetensors files written atomically (blocks, index columns, and the finished sample keys in the
header); a rerun computes only samples no chunk holds, so a kill loses at most one chunk and never
duplicates a row. ``--shard I/N`` computes a deterministic slice of the prompts (sorted by total
tokens, every N-th: balanced work) into its own artifact; :func:`merge_trajectories` joins them.
Rows are ordered by (prompt_id, sample_idx, t) whatever the sharding, so merged == unsharded.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lenpred.errors import CardMismatchError, ConfigError, DataError
from lenpred.fileio import atomic_write_bytes, atomic_write_json, canonical_json, file_sha256
from lenpred.outlets.features import TrajectoryConfig, block_names, make_spec, positions, sample_rows
from lenpred.outlets.store import KIND, SCHEMA_VERSION, Trajectory, load_trajectory, save_trajectory

__all__ = ["TrajectoryRun", "compute_trajectory", "draft_identity", "merge_trajectories", "parse_roles"]

ROLES = ("train", "val", "test")
WORK_JSON = "work.json"
_CHUNK = re.compile(r"chunk-(\d+)\.safetensors$")
_IDX = ("sample_idx", "t", "length", "truncated")
CACHE_TOPK = 64  # what `lenpred draft train` caches by default: the same directory name and manifest
CACHE_MAX_SEQ = 2048


def parse_roles(text: str | Sequence[str]) -> tuple[str, ...]:
    items = [x.strip() for x in (text.split(",") if isinstance(text, str) else text) if x.strip()]
    if not items:
        raise ConfigError("--roles names no role", f"pass some of {', '.join(ROLES)}")
    for r in items:
        if r not in ROLES:
            raise ConfigError(f"--roles: unknown role {r!r}", f"roles are {', '.join(ROLES)} (e.g. --roles train,val)")
    return tuple(r for r in ROLES if r in items)


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


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise DataError(f"--out {out} exists and is a file", "pass a directory path for the trajectory features")
    if out.is_dir() and any(out.iterdir()):
        meta = out / "meta.json"
        kind = None
        if meta.is_file():
            try:
                kind = json.loads(meta.read_text(encoding="utf-8")).get("kind")
            except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
                kind = None
        if kind != KIND:
            what = f"a {kind} artifact" if kind else "a non-empty directory that is not a lenpred artifact"
            raise DataError(f"--out {out} holds {what}, not trajectory features", "pass a new or empty output directory")


def _work_path(out: Path) -> Path:
    return out.parent / f"{out.name}.work"


# ---------------------------------------------------------------------------------------- selection
@dataclass
class _Prompt:
    prompt_id: str
    ids: list[int]
    samples: list[tuple[int, list[int], bool]]  # (sample_idx, response ids, truncated)

    @property
    def tokens(self) -> int:
        return len(self.ids) * 1 + sum(len(r) for _, r, _ in self.samples)


def _select(run: Any, split: Any, roles: tuple[str, ...], max_prompts: int | None,
            max_samples: int | None) -> list[_Prompt]:
    from lenpred.data.lengths import check_token_ids

    prompts, s = check_token_ids(run)
    by: dict[str, list[tuple[int, list[int], bool]]] = {}
    for r in s.itertuples():
        ids = [int(x) for x in r.token_ids] if r.token_ids is not None else []
        if len(ids) != int(r.n_tokens):
            raise DataError(f"sample ({r.prompt_id}, {r.sample_idx}) of {run.path} has {len(ids)} token ids but "
                            f"n_tokens = {r.n_tokens}", "re-collect the run's samples")
        by.setdefault(str(r.prompt_id), []).append((int(r.sample_idx), ids, bool(r.truncated)))
    out = []
    for role in roles:
        want = split.ids(role)
        chosen = [p for p in prompts.itertuples() if str(p.prompt_id) in want and str(p.prompt_id) in by]
        for p in chosen[:max_prompts]:
            samples = sorted(by[str(p.prompt_id)])[:max_samples]
            out.append(_Prompt(str(p.prompt_id), [int(x) for x in p.prompt_token_ids], samples))
    if not out:
        raise DataError(f"the split of {run.path} has no prompt with samples in role(s) {', '.join(roles)}",
                        "pick other --roles, or re-run `lenpred split` after collecting")
    return out


def _shard(prompts: list[_Prompt], i: int, n: int) -> list[_Prompt]:
    order = sorted(prompts, key=lambda p: (p.tokens, p.prompt_id))
    return order[i::n]


def _keys_sha(prompts: list[_Prompt]) -> str:
    keys = sorted(f"{p.prompt_id}\t{s}" for p in prompts for s, _, _ in p.samples)
    return hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------- work folder
class _Work:
    """Finished chunks of one (spec, card, shard) computation in ``OUT.work/``."""

    def __init__(self, path: Path, identity: dict[str, Any]) -> None:
        self.path = path
        wj = path / WORK_JSON
        if wj.is_file():
            try:
                old = json.loads(wj.read_text(encoding="utf-8")).get("identity")
            except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
                old = None
            if canonical_json(old) != canonical_json(identity):
                raise DataError(f"{path} holds a trajectory computation with other settings "
                                f"({_first_difference(old, identity)})",
                                "rerun with the same options to resume it, or delete that folder to start over")
        elif path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise DataError(f"{path} exists and is not a lenpred trajectory work folder",
                            "move it away: lenpred keeps its resumable chunks there")
        else:
            atomic_write_json(wj, {"identity": identity})
        for t in path.glob(".*.tmp"):  # a chunk whose writer was killed before the rename
            t.unlink(missing_ok=True)

    def chunk_paths(self) -> list[Path]:
        return sorted(p for p in self.path.glob("chunk-*.safetensors") if _CHUNK.search(p.name))

    def chunks(self) -> Iterator[tuple[list[tuple[str, int]], list[str], dict[str, np.ndarray]]]:
        from safetensors import safe_open

        for p in self.chunk_paths():
            try:
                with safe_open(str(p), framework="numpy") as f:
                    md = f.metadata() or {}
                    keys = [(str(a), int(b)) for a, b in json.loads(md["samples"])]
                    pids = json.loads(md["prompt_ids"])
                    t = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open has no __iter__
            except Exception as e:  # noqa: BLE001 - a damaged chunk: name it and the fix
                raise DataError(f"{p} is not a readable trajectory chunk ({type(e).__name__})",
                                "delete that file; a rerun recomputes its samples") from None
            yield keys, pids, t

    def write(self, keys: list[tuple[str, int]], pids: list[str], tensors: dict[str, np.ndarray]) -> None:
        from safetensors.numpy import save

        nums = [int(m.group(1)) for p in self.chunk_paths() if (m := _CHUNK.search(p.name))]
        path = self.path / f"chunk-{(max(nums) + 1 if nums else 0):05d}.safetensors"
        md = {"samples": json.dumps([[k, int(i)] for k, i in keys]), "prompt_ids": json.dumps(pids)}
        atomic_write_bytes(path, save({k: np.ascontiguousarray(v) for k, v in tensors.items()}, metadata=md))

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _first_difference(old: Any, new: dict[str, Any]) -> str:
    if not isinstance(old, dict):
        return "its work.json is unreadable"
    for k in sorted(set(old) | set(new)):
        if canonical_json(old.get(k)) != canonical_json(new.get(k)):
            return f"{k} differs"
    return "identity differs"


# ---------------------------------------------------------------------------------------- cache
def _cache_matches(manifest: dict[str, Any], card_hash: str, fp: str, layers: Sequence[int]) -> str | None:
    """None when a state cache fits this run, target and layers; else what differs."""
    for k, want in (("card_hash", card_hash), ("target_fingerprint", fp), ("layers", [int(j) for j in layers])):
        if manifest.get(k) != want:
            return f"{k} {manifest.get(k)!r} != {want!r}"
    return None


def _open_cache(cache: str | Path | bool | None, head: Any, run: Any, fp: str, target_id: str,
                layers: Sequence[int]) -> Any:
    from lenpred.draft.states import StateCache, default_cache_dir

    if cache is False:
        return None
    if cache:
        path = Path(cache)
    else:
        path = default_cache_dir(run.card_hash, fp, tuple(layers), CACHE_TOPK)
        rec = (((head.meta or {}).get("training") or {}).get("data") or {}).get("cache")
        if rec and (Path(rec) / "manifest.json").is_file():
            try:
                m = json.loads((Path(rec) / "manifest.json").read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError):
                m = {}
            if _cache_matches(m, run.card_hash, fp, layers) is None:
                path = Path(rec)  # the cache the head was trained from
    if (path / "manifest.json").is_file():
        c = StateCache.open(path)
        why = _cache_matches(c.manifest, run.card_hash, fp, layers)
        if why:
            raise DataError(f"state cache {path} was made for another run, target or layers ({why})",
                            "pass another --cache directory, or --no-cache")
        return c
    manifest = {"target_fingerprint": fp, "layers": [int(j) for j in layers], "topk": CACHE_TOPK, "dtype": "float16",
                "card_hash": run.card_hash, "max_seq_len": CACHE_MAX_SEQ, "target_id": target_id, "run": str(run.path)}
    return StateCache.open_or_create(path, manifest)  # refuses a non-empty foreign directory; writes lazily


# ---------------------------------------------------------------------------------------- compute
def _load_target_model(folder: Path, device: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    from lenpred.errors import ModelError

    try:
        m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    except Exception as e:  # noqa: BLE001
        raise ModelError(f"transformers could not load {folder} ({type(e).__name__}: {e})".splitlines()[0]) from e
    return m.to(device).eval()


def compute_trajectory(run: str | Path, draft: str | Path, out: str | Path, cfg: TrajectoryConfig | None = None, *,
                       roles: Sequence[str] = ROLES, shard: tuple[int, int] = (0, 1), model: str | None = None,
                       cache: str | Path | bool | None = None, max_prompts: int | None = None,
                       max_samples_per_prompt: int | None = None, device: str = "cpu", progress: bool = True,
                       log: Callable[[str], None] | None = None, target: Any = None,
                       _stop_after: int | None = None) -> TrajectoryRun:
    """Compute (or resume) the trajectory features of ``run``'s samples into ``out``.

    ``cache``: a state-cache directory, ``None`` (the default choice, see the module docstring) or
    ``False`` (in memory, float32). ``target``: an already loaded :class:`lenpred.draft.target.Target`
    (tests); otherwise the run card's model (or ``model``) is loaded. ``_stop_after`` (tests) raises
    KeyboardInterrupt after that many chunks of this call, as a kill would.
    """
    import torch

    from lenpred.data.rundir import RunDir
    from lenpred.data.split import load_split
    from lenpred.draft.io import check_against_target, load_draft

    say = log or (lambda m: None)
    cfg = cfg or TrajectoryConfig()
    out = Path(out)
    roles = parse_roles(roles)
    i_sh, n_sh = shard
    if n_sh < 1 or not 0 <= i_sh < n_sh:
        raise ConfigError(f"shard {i_sh}/{n_sh} is out of range", f"pass I/N with 0 <= I < N (e.g. 0/{max(n_sh, 1)})")
    _check_out(out)
    rd = RunDir.open(run)
    card_model = rd.card.get("model") or {}
    from lenpred.data.lengths import check_token_ids

    check_token_ids(rd)  # a run without token ids cannot be teacher-forced
    split = load_split(rd, require_complete=False)
    selected = _select(rd, split, roles, max_prompts, max_samples_per_prompt)
    head = load_draft(draft)
    rec_fp = ((head.meta or {}).get("target") or {}).get("fingerprint")
    if rec_fp and card_model.get("fingerprint") and rec_fp != card_model["fingerprint"]:
        raise CardMismatchError(
            f"draft head {head.path} was trained for target {((head.meta or {}).get('target') or {}).get('id') or '?'} "
            f"({rec_fp[:19]}...), not the model of run {rd.path} ({card_model['fingerprint'][:19]}...)",
            "pass a draft head trained for the run's model")

    # the target: the run's own model, and a head made for it
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
    layers = check_against_target(head, tcfg, fingerprint=fp)
    dt = int(tcfg.hidden_size)
    widths = dict(zip(block_names(layers), (head.config.hidden_size, head.config.hidden_size, dt,
                                            head.config.hidden_size), strict=True))
    state_cache = _open_cache(cache, head, rd, fp, target_id, layers)
    tspec = make_spec(target={"id": target_id, "fingerprint": fp, "num_hidden_layers": int(tcfg.num_hidden_layers),
                              "hidden_size": dt},
                      draft=draft_identity(head), layers=layers, widths=widths, cfg=cfg,
                      target_states="float32" if state_cache is None else "float16")
    part = _shard(selected, i_sh, n_sh)
    keys_all = {(p.prompt_id, s) for p in part for s, _, _ in p.samples}
    identity = {"spec": tspec, "card_hash": rd.card_hash, "shard": [i_sh, n_sh], "dtype": cfg.dtype}
    selection = {"roles": list(roles), "max_prompts": max_prompts, "max_samples_per_prompt": max_samples_per_prompt,
                 "samples_sha256": _keys_sha(selected), "total_samples": sum(len(p.samples) for p in selected),
                 "total_prompts": len(selected)}
    if _up_to_date(out, identity, selection):
        t = load_trajectory(out)
        return TrajectoryRun(out, len(keys_all), t.n, 0, 0, 0, 0.0, getattr(state_cache, "root", None), up_to_date=True)

    # ---- from here on, files are written
    work = _Work(_work_path(out), identity)
    done: dict[tuple[str, int], tuple[int, int, int]] = {}  # key -> (chunk, first row, rows)
    chunks: list[tuple[list[str], dict[str, np.ndarray]]] = []
    for keys, pids, tensors in work.chunks():
        ci = len(chunks)
        chunks.append((pids, tensors))
        sidx = tensors["_idx.sample_idx"]
        for k in keys:
            rows = np.flatnonzero((np.asarray(pids) == k[0]) & (sidx == k[1]))
            done.setdefault(k, (ci, int(rows[0]) if rows.size else 0, int(rows.size)))
    todo = [p for p in part if any((p.prompt_id, s) not in done for s, _, _ in p.samples)]
    n_todo = sum(1 for p in todo for s, _, _ in p.samples if (p.prompt_id, s) not in done)
    say(f"{len(keys_all)} samples of {len(part)} prompts (shard {i_sh}/{n_sh}, roles {','.join(roles)}), "
        f"{len(keys_all) - n_todo} done, {n_todo} to compute; layers {list(layers)}; "
        f"state cache {state_cache.root if state_cache is not None else '(none: float32 in memory)'}")
    t0 = time.perf_counter()
    stats = {"computed": 0, "from_cache": 0, "tokens": 0}
    if todo:
        if target is None:
            from lenpred.draft.target import Target

            target = Target(_load_target_model(folder, device), layers)
        model_d = head.model.to(device)
        model_d.attach_embeddings(target.embedding)
        bar = _Bar(progress, n_todo)
        n_chunks = 0
        try:
            for c0 in range(0, len(todo), cfg.chunk_prompts):
                group = todo[c0 : c0 + cfg.chunk_prompts]
                res = _compute_chunk(group, done, target, model_d, layers, cfg, state_cache, stats, bar, torch)
                work.write(*res)
                n_chunks += 1
                if _stop_after is not None and n_chunks >= _stop_after:
                    raise KeyboardInterrupt
        finally:
            bar.close()
        chunks = []
        done = {}
        for keys, pids, tensors in work.chunks():
            ci = len(chunks)
            chunks.append((pids, tensors))
            for k in keys:
                rows = np.flatnonzero((np.asarray(pids) == k[0]) & (tensors["_idx.sample_idx"] == k[1]))
                done.setdefault(k, (ci, int(rows[0]) if rows.size else 0, int(rows.size)))
    seconds = time.perf_counter() - t0
    traj = _assemble(sorted(keys_all), done, chunks, block_names(layers), tspec)
    meta = {"selection": selection, "shard": {"index": i_sh, "count": n_sh}, "draft_path": str(head.path),
            "cache": str(state_cache.root) if state_cache is not None else None, "run": str(rd.path)}
    if stats["computed"]:
        meta["timing"] = {"samples": stats["computed"], "tokens": stats["tokens"], "seconds": round(seconds, 2),
                          "device": device}
    save_trajectory(out, traj, rd.card, config=cfg, meta=meta, dtype=cfg.dtype)
    work.remove()
    return TrajectoryRun(out, len(keys_all), traj.n, stats["computed"], stats["from_cache"], stats["tokens"], seconds,
                         getattr(state_cache, "root", None))


def _up_to_date(out: Path, identity: dict[str, Any], selection: dict[str, Any]) -> bool:
    from lenpred.artifacts import is_artifact, load_artifact

    if not is_artifact(out):
        return False
    m = load_artifact(out, kind=KIND, verify=False).meta
    spec = {k: v for k, v in (m.get("trajectory_spec") or {}).items() if k != "dtype"}
    same = (canonical_json(spec) == canonical_json(identity["spec"]) and m.get("card_hash") == identity["card_hash"]
            and [(m.get("shard") or {}).get("index"), (m.get("shard") or {}).get("count")] == identity["shard"]
            and (m.get("trajectory_spec") or {}).get("dtype") == identity["dtype"])
    return same and canonical_json(m.get("selection")) == canonical_json(selection)


def _teacher_force(target: Any, prompt: list[int], responses: list[list[int]], torch: Any) -> list[Any]:
    """Target states (N, 3d) float32 of prompt + each response: the prompt once, each response after it."""
    out = []
    with torch.inference_mode():
        kv = target.new_cache()
        _, p_aux = target.forward(torch.tensor([prompt], device=target.device), kv)  # (1, P, 3d)
        for r in responses:
            if r:
                _, r_aux = target.forward(torch.tensor([r], device=target.device), kv)  # (1, n_r, 3d)
                target.crop(kv, len(prompt))
                out.append(torch.cat([p_aux[0], r_aux[0]]).float())
            else:
                out.append(p_aux[0].float())
    return out


def _compute_chunk(group: list[_Prompt], done: dict[Any, Any], target: Any, draft: Any, layers: Sequence[int],
                   cfg: TrajectoryConfig, cache: Any, stats: dict[str, int], bar: Any,
                   torch: Any) -> tuple[list[tuple[str, int]], list[str], dict[str, np.ndarray]]:
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
        if missing:  # no cache, or too long for it: in memory
            for (i, _), a in zip(missing, _teacher_force(target, p.ids, [r for _, r in missing], torch), strict=True):
                aux_mem[i] = a.half().float() if cache is not None else a  # one precision per artifact
            stats["tokens"] += P + sum(len(r) for _, r in missing)
        for i, r, tr in ss:
            L = len(r)
            ts = positions(L, cfg.stride, cfg.max_positions)
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
            bar.update(1)
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


# ---------------------------------------------------------------------------------------- merge
def merge_trajectories(out: str | Path, shards: Sequence[str | Path]) -> Trajectory:
    """Join the shard artifacts of one ``--shard I/N`` partition into one artifact at ``out``."""
    from lenpred.artifacts import load_artifact

    out_p = Path(out)
    if not shards:
        raise ConfigError("--merge needs at least one shard directory", "pass the shard outputs: --merge OUT_0 OUT_1 ...")
    if any(Path(s).resolve() == out_p.resolve() for s in shards):
        raise ConfigError(f"--out {out_p} is one of the shards being merged", "write the merged artifact to a new directory")
    _check_out(out_p)
    arts = [load_artifact(s, kind=KIND, schema_versions=(SCHEMA_VERSION,), what="trajectory shard") for s in shards]
    first = arts[0].meta
    for a in arts[1:]:
        m = a.meta
        if m.get("card_hash") != first.get("card_hash"):
            raise CardMismatchError(f"shard {a.path} is of another run than {arts[0].path}",
                                    "merge only shards computed from the same run directory")
        if canonical_json(m.get("trajectory_spec")) != canonical_json(first.get("trajectory_spec")):
            raise DataError(f"shard {a.path} has another trajectory spec than {arts[0].path} (draft head, layers or "
                            "positions differ)", "recompute the odd shard with the same options")
        if canonical_json(m.get("selection")) != canonical_json(first.get("selection")):
            raise DataError(f"shard {a.path} was computed from another selection of samples than {arts[0].path}",
                            "recompute every shard with the same --roles and limits from the run as it is now")
    counts = {(a.meta.get("shard") or {}).get("count") for a in arts}
    idxs = [(a.meta.get("shard") or {}).get("index") for a in arts]
    if len(counts) != 1 or len(set(idxs)) != len(idxs):
        raise DataError("the shards are not distinct slices of one --shard I/N partition",
                        "merge each slice I/N exactly once")
    n = counts.pop()
    gone = sorted(set(range(int(n))) - set(idxs))
    if gone:
        raise DataError(f"shard(s) {', '.join(f'{i}/{n}' for i in gone)} missing", "compute them and merge all N")
    trajs = [load_trajectory(a.path) for a in arts]
    index = pd.concat([t.index for t in trajs], ignore_index=True)
    keys = index[["prompt_id", "sample_idx"]].drop_duplicates()
    if len(keys) != sum(len(t.index[["prompt_id", "sample_idx"]].drop_duplicates()) for t in trajs):
        raise DataError("shards overlap (a sample is in two of them)", "merge each slice of one partition once")
    blocks = {k: np.concatenate([t.blocks[k] for t in trajs]) for k in trajs[0].blocks}
    order = np.lexsort((index["t"].to_numpy(), index["sample_idx"].to_numpy(), index["prompt_id"].to_numpy()))
    spec = {k: v for k, v in (first.get("trajectory_spec") or {}).items() if k != "dtype"}
    traj = Trajectory(index.iloc[order].reset_index(drop=True), {k: v[order] for k, v in blocks.items()}, spec)
    meta = {"selection": first.get("selection"), "shard": {"index": 0, "count": 1}, "draft_path": first.get("draft_path"),
            "run": first.get("run"), "merged_from": [a.meta.get("shard") for a in arts]}
    save_trajectory(out_p, traj, {"card_hash": first["card_hash"]}, config=arts[0].config, meta=meta,
                    dtype=(first.get("trajectory_spec") or {}).get("dtype", "float16"))
    return traj


class _Bar:
    """tqdm on a terminal; into a log file, a line at most every 60 s."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.bar = None
        if enabled and total:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc="trajectory", unit="sample", dynamic_ncols=True,
                            mininterval=0.5 if sys.stderr.isatty() else 60.0)

    def update(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
