"""Compute a run's prefill features: validate, plan, run the batches resumably, assemble.

:func:`compute_features` is what ``lenpred features --run RUN --out OUT`` calls. Everything that
can be wrong with the inputs (no prompts, a bad shard, another model than the run's, a layer the
model does not have, an output folder that is not ours) is refused before anything is written or
any weights are loaded. The input of each forward pass is the run's ``prompt_token_ids``: exactly
the tokens the target saw when the samples were drawn.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lenpred.checks import check_device
from lenpred.errors import CardMismatchError, ConfigError, DataError
from lenpred.features.prefill import (
    Extractor,
    FeatureConfig,
    check_layers,
    make_spec,
    resolve_layers,
    text_config,
)
from lenpred.features.shards import prompts_sha256, shard_label, shard_slice
from lenpred.features.store import KIND, Features, save_features, spec_key
from lenpred.features.work import WorkDir, work_path
from lenpred.io.artifacts import check_out
from lenpred.progress import Progress

__all__ = ["compute_features", "FeatureRun"]


@dataclass
class FeatureRun:
    """What one call did: the artifact path, and how much it computed (0 when resumed complete)."""

    out: Path
    n_prompts: int  # rows in the artifact
    computed: int  # prompts computed by this call
    tokens: int  # prompt tokens fed by this call
    forward_calls: int
    seconds: float
    up_to_date: bool = False

    @property
    def prompts_per_s(self) -> float:
        return self.computed / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def _run_prompts(rd: Any) -> pd.DataFrame:
    if not rd.has_prompts():
        raise DataError(f"run {rd.path} has no prompts.parquet yet",
                        "collect the run first (lenpred collect), then compute its features")
    p = rd.prompts()
    if "prompt_token_ids" not in p.columns:
        raise DataError(f"{rd.prompts_path} has no prompt_token_ids column (the tokens the target saw)",
                        "re-collect the run with this version of lenpred")
    if p.empty:
        raise DataError(f"run {rd.path} lists no prompts", "collect the run first (lenpred collect)")
    empty = p["prompt_token_ids"].map(len) == 0
    if empty.any():
        raise DataError(f"prompt {p.loc[empty, 'prompt_id'].iloc[0]!r} of {rd.path} has no tokens",
                        "re-collect the run's prompt table")
    return p


def _resolve_model(card: dict[str, Any], model: str | None) -> tuple[Any, Path]:
    from lenpred.models.loading import hf_folder, resolve

    name = model or (card.get("model") or {}).get("id")
    if not name:
        raise DataError("the run card names no model", "pass --model (the model the run was collected with)")
    spec = resolve(name)
    want = (card.get("model") or {}).get("fingerprint")
    if want and spec.fingerprint != want:
        raise CardMismatchError(
            f"model {name!r} has fingerprint {spec.fingerprint[:19]}..., the run was collected with {want[:19]}...",
            "pass --model with the run's own model (its card's model.id)")
    return hf_folder(name)  # converts the embedded GGUF once (cached), else the folder as is


def _existing_rows(out: Path, identity: dict[str, Any]) -> tuple[dict[str, tuple[dict[str, np.ndarray], np.ndarray]], str | None]:
    """Rows of a features artifact already at ``out`` made under ``identity`` (reused as done), and its prompt hash."""
    from lenpred.features.store import load_features
    from lenpred.io.artifacts import is_artifact, load_artifact

    if not is_artifact(out):
        return {}, None
    art = load_artifact(out, kind=KIND)
    same = (art.meta.get("card_hash") == identity["card_hash"]
            and spec_key(art.meta.get("feature_spec") or {}) == identity["spec"]
            and [(art.meta.get("shard") or {}).get(k, d) for k, d in (("index", 0), ("count", 1))] == identity["shard"])
    if not same:
        return {}, None  # another spec: it will be replaced once the new one is complete
    f = load_features(out)
    rows = {pid: ({k: v[i] for k, v in f.blocks.items()}, f.side[i]) for i, pid in enumerate(f.prompt_ids)}
    return rows, (art.meta.get("prompts") or {}).get("sha256")


def compute_features(run: str | Path, out: str | Path, cfg: FeatureConfig | None = None, *,
                     shard: tuple[int, int] = (0, 1), model: str | None = None, progress: bool = True,
                     log: Callable[[str], None] | None = None) -> FeatureRun:
    """Compute (or resume, or extend) the features of ``run``'s prompts (slice ``shard``) into ``out``."""
    from transformers import AutoConfig

    from lenpred.data.rundir import RunDir

    cfg = cfg or FeatureConfig()
    out = Path(out)
    say = log or (lambda s: print(s, flush=True))
    rd = RunDir.open(run)
    check_out(out, kind=KIND, card=rd.card, inputs={"--run": run})
    check_device(cfg.device)
    prompts = _run_prompts(rd)
    mspec, folder = _resolve_model(rd.card, model)
    mconfig = AutoConfig.from_pretrained(folder)
    layers = resolve_layers(cfg, mconfig)
    check_layers(layers, int(text_config(mconfig).num_hidden_layers), mspec.id)
    spec = make_spec(cfg, mconfig, mspec.id, mspec.fingerprint)
    identity = {"spec": spec_key(spec), "card_hash": rd.card_hash, "shard": [shard[0], shard[1]]}
    all_ids = prompts["prompt_id"].astype(str).tolist()
    psha = prompts_sha256(all_ids)
    part = shard_slice(prompts, *shard)
    if part.empty:  # an empty artifact would merge into nothing and hide a launcher's mistake
        raise ConfigError(f"shard {shard_label(*shard)} holds no prompt: the run has {len(all_ids)} prompt(s) for "
                          f"{shard[1]} shards", f"pass fewer shards (--shard I/N with N <= {len(all_ids)})")
    done, old_sha = _existing_rows(out, identity)
    if old_sha == psha and set(part["prompt_id"]) <= set(done):
        say(f"features: {out} is up to date ({len(part)} prompts, spec unchanged)")
        return FeatureRun(out, len(part), 0, 0, 0, 0.0, up_to_date=True)

    work = WorkDir.open(work_path(out), identity)
    for ids, blocks, side in work.chunks():
        for j, pid in enumerate(ids):
            done.setdefault(pid, ({k: v[j] for k, v in blocks.items()}, side[j]))
    todo = part[~part["prompt_id"].isin(done)].reset_index(drop=True)  # still shortest first
    say(f"features: {len(part)} prompts ({shard_label(*shard)} of run {rd.path}), {len(part) - len(todo)} done, "
        f"{len(todo)} to compute; layers {','.join(map(str, layers))}; work folder {work.path}")
    t0, tokens, calls = time.perf_counter(), 0, 0
    if len(todo):
        try:
            ext = Extractor.load(folder, cfg, layers)
            tokens = _compute(ext, todo, work, cfg, done, progress, say)
        except BaseException:
            if not work.chunk_paths():  # nothing to resume: leave no work folder behind
                work.remove()
            raise
        calls = ext.forward_calls
    seconds = time.perf_counter() - t0

    rows = part.sort_values("idx")
    ids = rows["prompt_id"].astype(str).tolist()
    names = spec["blocks"]
    feats = Features(
        np.asarray(ids), {k: np.stack([done[p][0][k] for p in ids]) for k in names},
        np.stack([done[p][1] for p in ids]), tuple(spec["side_names"]), spec,
    )
    meta: dict[str, Any] = {"prompts": {"total": len(all_ids), "sha256": psha},
                            "shard": {"index": shard[0], "count": shard[1]}}
    if len(todo):
        meta["timing"] = {"device": cfg.device, "prompts": len(todo), "tokens": tokens, "seconds": round(seconds, 2),
                          "batch_size": cfg.batch_size}
    save_features(out, feats, rd.card, config=cfg, meta=meta, positions=rows["idx"].to_numpy())
    work.remove()
    res = FeatureRun(out, len(ids), len(todo), tokens, calls, seconds)
    if len(todo):
        say(f"features: {res.computed} prompts, {tokens} tokens in {seconds:.1f} s "
            f"({res.prompts_per_s:.2f} prompts/s, {res.tokens_per_s:.0f} tokens/s) -> {out}")
    else:
        say(f"features: assembled {out} from the work folder ({len(ids)} prompts)")
    return res


def _compute(ext: Extractor, todo: pd.DataFrame, work: WorkDir, cfg: FeatureConfig,
             done: dict[str, Any], progress: bool, say: Callable[[str], None]) -> int:
    """Run ``todo`` (shortest first) chunk by chunk; every finished chunk goes to ``work`` at once."""
    from lenpred.features.prefill import plan_batches

    seqs = todo["prompt_token_ids"].map(lambda s: [int(x) for x in s]).tolist()
    pids = todo["prompt_id"].astype(str).tolist()
    total_tokens = int(sum(min(len(s), ext.max_tokens) for s in seqs))
    # a rich bar on a terminal; into a log, one line per saved chunk (below) instead of the bar's
    bar = Progress("features", len(pids), unit="prompts", enabled=progress, log_every=None)
    tokens = 0
    t0 = time.perf_counter()
    try:
        for c0 in range(0, len(pids), cfg.chunk_prompts):
            cseqs = seqs[c0 : c0 + cfg.chunk_prompts]
            lens = [min(len(s), ext.max_tokens) for s in cseqs]
            parts_b: list[dict[str, np.ndarray]] = []
            parts_s: list[np.ndarray] = []
            for batch in plan_batches(lens, cfg.batch_size, cfg.batch_tokens):
                b, s = ext.features([cseqs[i] for i in batch])
                parts_b.append(b)
                parts_s.append(s)
                n_tok = sum(lens[i] for i in batch)
                tokens += n_tok
                bar.update(len(batch), info=f"{tokens / max(time.perf_counter() - t0, 1e-9):.0f} tok/s")
            cids = pids[c0 : c0 + cfg.chunk_prompts]
            blocks = {k: np.concatenate([p[k] for p in parts_b]) for k in parts_b[0]}
            side = np.concatenate(parts_s)
            _check_storable(blocks, cfg.dtype)
            work.write_chunk(cids, blocks, side)
            for j, pid in enumerate(cids):
                done[pid] = ({k: v[j] for k, v in blocks.items()}, side[j])
            if progress and not bar.live:
                say(_chunk_line(bar.done, len(pids), tokens, total_tokens, time.perf_counter() - t0, len(done)))
    finally:
        bar.close()
    return tokens


def _check_storable(blocks: dict[str, np.ndarray], dtype: str) -> None:
    for k, v in blocks.items():
        if not np.isfinite(v).all():
            raise DataError(f"features block {k!r} came out NaN or infinite", "try --compute-dtype float32")
        if dtype == "float16" and float(np.abs(v).max()) > float(np.finfo(np.float16).max):
            raise DataError(f"features block {k!r} overflows float16 (max |x| = {float(np.abs(v).max()):.4g})",
                            "store the features as float32 (--dtype float32; delete the work folder first)")


def _chunk_line(prompts: int, n: int, tokens: int, total_tokens: int, seconds: float, rows_done: int) -> str:
    """The log line of a saved chunk: how far, how fast, how long still."""
    dt = max(seconds, 1e-9)
    left = (total_tokens - tokens) / (tokens / dt) if tokens else float("nan")
    return (f"features: {prompts}/{n} prompts, {tokens}/{total_tokens} tokens, {prompts / dt:.2f} prompts/s, "
            f"{tokens / dt:.0f} tokens/s, ~{left / 60:.1f} min left (chunk saved; {rows_done} rows done)")

