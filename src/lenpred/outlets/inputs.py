"""What a trajectory computation reads: the selected samples, and the state cache for their target states.

* :func:`select_prompts` -- the prompts of the split's roles that have samples (with token ids), each with
  its samples (at most ``max_samples`` each, at most ``max_prompts`` prompts per role), and
  :func:`shard_prompts` -- a deterministic slice of them (sorted by total tokens, every N-th: balanced work);
* :func:`open_cache` -- the draft-training state cache (:mod:`lenpred.draft.states`) named by ``--cache``,
  which the target states come from and go to (without it the states-only pass keeps none), and
  :func:`check_cache_writable` -- refused before any work when it must be written and cannot.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lenpred.errors import DataError

__all__ = ["Prompt", "select_prompts", "shard_prompts", "keys_sha", "open_cache", "check_cache_writable", "CACHE_TOPK",
           "CACHE_MAX_SEQ"]

CACHE_TOPK = 64  # what `lenpred draft train` caches by default: the same manifest
CACHE_MAX_SEQ = 2048


@dataclass
class Prompt:
    prompt_id: str
    ids: list[int]
    samples: list[tuple[int, list[int], bool]]  # (sample_idx, response ids, truncated)

    @property
    def tokens(self) -> int:
        return len(self.ids) * 1 + sum(len(r) for _, r, _ in self.samples)


def select_prompts(run: Any, split: Any, roles: tuple[str, ...], max_prompts: int | None,
            max_samples: int | None) -> list[Prompt]:
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
            out.append(Prompt(str(p.prompt_id), [int(x) for x in p.prompt_token_ids], samples))
    if not out:
        raise DataError(f"the split of {run.path} has no prompt with samples in role(s) {', '.join(roles)}",
                        "pick other --roles, or re-run `lenpred split` after collecting")
    return out


def shard_prompts(prompts: list[Prompt], i: int, n: int) -> list[Prompt]:
    order = sorted(prompts, key=lambda p: (p.tokens, p.prompt_id))
    return order[i::n]


def keys_sha(prompts: list[Prompt]) -> str:
    keys = sorted(f"{p.prompt_id}\t{s}" for p in prompts for s, _, _ in p.samples)
    return hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------- cache
def _cache_matches(manifest: dict[str, Any], card_hash: str, fp: str, layers: Sequence[int]) -> str | None:
    """None when a state cache fits this run, target and layers; else what differs."""
    for k, want in (("card_hash", card_hash), ("target_fingerprint", fp), ("layers", [int(j) for j in layers])):
        if manifest.get(k) != want:
            return f"{k} {manifest.get(k)!r} != {want!r}"
    return None


def open_cache(cache: str | Path, run: Any, fp: str, target_id: str, layers: Sequence[int]) -> Any:
    """The draft-training state cache at ``cache`` (``--cache DIR``): opened when it exists and fits this
    run, target and layers, else created lazily there."""
    from lenpred.draft.states import StateCache

    path = Path(cache)
    if (path / "manifest.json").is_file():
        c = StateCache.open(path)
        why = _cache_matches(c.manifest, run.card_hash, fp, layers)
        if why:
            raise DataError(f"state cache {path} was made for another run, target or layers ({why})",
                            "pass another --cache directory, or none (the states-only pass)")
        return c
    manifest = {"target_fingerprint": fp, "layers": [int(j) for j in layers], "topk": CACHE_TOPK, "dtype": "float16",
                "card_hash": run.card_hash, "max_seq_len": CACHE_MAX_SEQ, "target_id": target_id, "run": str(run.path)}
    return StateCache.open_or_create(path, manifest)  # refuses a non-empty foreign directory; writes lazily


def check_cache_writable(cache: Any, part: Sequence[Prompt]) -> None:
    """Refuse, before the target loads, a state cache the computation would have to write and cannot
    (a read-only folder): the samples of ``part`` it does not hold yet and could hold are written there.
    A read-only cache that already holds them all is only read."""
    root = Path(cache.root)
    d = root
    while not d.exists():
        d = d.parent
    if not d.is_dir():
        raise DataError(f"--cache {root} cannot be created: {d} is a file", "pass a --cache path whose parent is a directory")
    if os.access(d, os.W_OK | os.X_OK):
        return
    limit = int(cache.manifest.get("max_seq_len", CACHE_MAX_SEQ))
    have = set(cache.index()) if (root / "manifest.json").is_file() else set()
    todo = sum(1 for p in part for i, r, _ in p.samples if (p.prompt_id, i) not in have and len(p.ids) + len(r) <= limit)
    if todo:
        raise DataError(f"--cache {root} cannot be written: directory {d} is read-only ({todo} sample(s) to add)",
                        "pass a --cache directory you can write to, or leave --cache out (the states-only pass)")
