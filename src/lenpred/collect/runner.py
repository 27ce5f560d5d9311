"""Drive an engine over a run directory: card, prompt list, resume, shards, progress.

``collect(cfg)`` makes the first ``cfg.n_prompts`` prompts of the run have at least
``cfg.samples`` samples each. It derives the missing (prompt_id, sample_idx) keys from the shards
already on disk, so a run killed at any moment (even SIGKILL) and restarted with the same
arguments loses at most the samples buffered since the last shard and never duplicates one.
Raising ``--prompts`` or ``--samples`` on an existing run extends it under the same card.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from lenpred import __version__
from lenpred.collect import engines as _engines  # noqa: F401  (registers every engine)
from lenpred.collect.base import ENGINES, Job, Result, SamplingConfig, sample_seed
from lenpred.data.rundir import RunDir
from lenpred.data.sources import PromptConfig, build_prompt_table, load_raw, text_sha256
from lenpred.errors import ConfigError


@dataclass(frozen=True)
class CollectConfig:
    run_dir: str
    model: str = "smollm2-135m"
    engine: str = "llamacpp"
    prompts: PromptConfig = field(default_factory=PromptConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    n_prompts: int = 16
    samples: int = 4
    # engine options that do not change the distribution (not part of the card identity)
    engine_options: dict[str, Any] = field(default_factory=dict)
    shard_size: int = 64  # samples per shard
    flush_seconds: float = 120.0  # ... or a shard at least this often
    progress: bool = True

    def __post_init__(self) -> None:
        if self.n_prompts <= 0:
            raise ConfigError(f"--prompts must be positive, got {self.n_prompts}")
        if self.samples <= 0:
            raise ConfigError(f"--samples must be positive, got {self.samples}")
        if self.shard_size <= 0:
            raise ConfigError(f"shard_size must be positive, got {self.shard_size}")
        ENGINES.get(self.engine)  # unknown engine -> error listing the valid ones


@dataclass
class CollectSummary:
    run_dir: str
    card_hash: str
    new_samples: int
    new_tokens: int
    seconds: float
    total_samples: int
    shards_written: int

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0


def _make_engine(cfg: CollectConfig, spec: Any, tokenizer: Any) -> Any:
    cls = ENGINES.get(cfg.engine)
    return cls.from_config(cfg, spec, tokenizer)


def build_card(cfg: CollectConfig, spec: Any, tokenizer: Any, dataset_sha256: str, engine_identity: dict[str, Any]) -> dict[str, Any]:
    template = getattr(tokenizer, "chat_template", None) or ""
    return {
        "schema": "lenpred.run/1",
        "model": {
            **spec.card(),
            "tokenizer": type(tokenizer).__name__,
            "vocab_size": int(len(tokenizer)),
            "eos_token": tokenizer.eos_token,
            "chat_template_sha256": text_sha256(template) if cfg.prompts.chat_template else None,
        },
        "prompts": cfg.prompts.card(dataset_sha256),
        "sampling": cfg.sampling.card(),
        "engine": engine_identity,
    }


def _jobs(prompts: pd.DataFrame, samples: int, done: set[tuple[str, int]], seed: int) -> list[Job]:
    jobs = []
    for row in prompts.itertuples(index=False):
        for k in range(samples):
            if (row.prompt_id, k) in done:
                continue
            jobs.append(
                Job(
                    prompt_id=row.prompt_id,
                    sample_idx=k,
                    prompt_token_ids=tuple(int(t) for t in row.prompt_token_ids),
                    prompt_text=row.rendered,
                    seed=sample_seed(seed, row.prompt_id, k),
                )
            )
    return jobs


class _Flusher:
    """Buffers results and writes them as atomic shards."""

    def __init__(self, run: RunDir, shard_size: int, flush_seconds: float) -> None:
        self.run, self.shard_size, self.flush_seconds = run, shard_size, flush_seconds
        self.buf: list[Result] = []
        self.last = time.monotonic()
        self.shards = 0

    def add(self, r: Result) -> None:
        self.buf.append(r)
        if len(self.buf) >= self.shard_size or time.monotonic() - self.last >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            self.run.append_samples([r.row() for r in self.buf])
            self.shards += 1
        self.buf = []
        self.last = time.monotonic()


def prepare(cfg: CollectConfig) -> tuple[dict[str, Any], pd.DataFrame, Any, Any, RunDir | None]:
    """Validate everything and build the card and prompt table, writing nothing.

    Returns (card, prompts, model spec, tokenizer, existing run or None). An existing run directory
    is checked against the card here, so a mismatch fails before any file is touched.
    """
    from transformers import AutoConfig, AutoTokenizer

    from lenpred.models.loading import hf_folder

    spec, folder = hf_folder(cfg.model)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    context = int(getattr(AutoConfig.from_pretrained(folder), "max_position_embeddings", 2048))
    raw = load_raw(cfg.prompts)
    engine_cls = ENGINES.get(cfg.engine)
    card = build_card(cfg, spec, tokenizer, raw.attrs.get("sha256", ""), engine_cls.identity_for(cfg, spec))
    existing = RunDir.create(cfg.run_dir, card) if (Path(cfg.run_dir) / "card.json").exists() else None
    have = existing.prompts() if existing is not None and existing.has_prompts() else None
    if have is not None and len(have.index) >= cfg.n_prompts:
        prompts = have.iloc[: cfg.n_prompts].copy()
        # pandas round-trips DataFrame.attrs through Parquet: a stored table carries the filter stats
        # it was written with, which must not make it look freshly built (it would be rewritten short)
        prompts.attrs.pop("filter_stats", None)
    else:
        prompts, stats = build_prompt_table(cfg.prompts, tokenizer, cfg.n_prompts, context, cfg.sampling.max_new_tokens, raw)
        prompts.attrs["filter_stats"] = stats
    return card, prompts, spec, tokenizer, existing


def open_run(cfg: CollectConfig, card: dict[str, Any], prompts: pd.DataFrame) -> RunDir:
    """Create (or reopen) the run directory and record the prompt table and targets."""
    run = RunDir.create(cfg.run_dir, card)  # refuses a directory made under another card
    run.clean_temp()
    if "filter_stats" in prompts.attrs:
        run.write_prompts(prompts)
        run.update_bookkeeping(prompt_filter=prompts.attrs["filter_stats"])
    targets = list(run.card.get("targets", []))
    t = {"prompts": cfg.n_prompts, "samples": cfg.samples}
    if t not in targets:
        targets.append(t)
    run.update_bookkeeping(
        targets=targets,
        engine_runtime=ENGINES.get(cfg.engine).runtime_for(cfg),
        updated_by={"lenpred_version": __version__, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
    )
    return run


def collect(cfg: CollectConfig) -> CollectSummary:
    card, prompts, spec, tokenizer, existing = prepare(cfg)
    done = existing.done_keys() if existing is not None else set()
    jobs = _jobs(prompts, cfg.samples, done, cfg.sampling.seed)
    engine = _make_engine(cfg, spec, tokenizer) if jobs else None  # fails (unreachable server...) before any write
    run = open_run(cfg, card, prompts)
    t0 = time.monotonic()
    if engine is None:
        return CollectSummary(str(run.path), run.card_hash, 0, 0, 0.0, len(run.done_keys()), 0)
    flusher = _Flusher(run, cfg.shard_size, cfg.flush_seconds)
    n_new = n_tok = 0
    main_thread = threading.current_thread() is threading.main_thread()  # signal handlers live there only
    old_term = signal.getsignal(signal.SIGTERM)

    def _on_term(signum: int, frame: Any) -> None:  # make SIGTERM behave like Ctrl-C: flush, then stop
        raise KeyboardInterrupt

    if main_thread:
        signal.signal(signal.SIGTERM, _on_term)
    try:
        with _Progress(cfg.progress, len(jobs), prompts, cfg.samples, run.done_keys()) as bar:
            for r in engine.generate(iter(jobs)):
                flusher.add(r)
                n_new += 1
                n_tok += len(r.token_ids)
                bar.advance(r, n_tok, time.monotonic() - t0)
    finally:
        flusher.flush()  # a clean stop (Ctrl-C, SIGTERM, an error) keeps what was generated
        if main_thread:
            signal.signal(signal.SIGTERM, old_term)
        engine.close()
    return CollectSummary(
        str(run.path), run.card_hash, n_new, n_tok, time.monotonic() - t0, len(run.done_keys()), flusher.shards
    )


def _eta(done: int, total: int, seconds: float) -> str:
    """Time left at the sample rate so far, as H:MM:SS ("-:--:--" before the first sample).

    Prompts finish late (their K samples are interleaved with everyone else's), so an ETA over
    prompts, like rich's own column, stays unknown for most of a run; samples arrive steadily.
    """
    if done <= 0 or seconds <= 0:
        return "-:--:--"
    left = max(total - done, 0) * seconds / done
    h, rem = divmod(int(round(left)), 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}"


class _Progress:
    """A rich progress bar over prompts (a prompt is done when all its samples are), with tokens/s."""

    def __init__(self, enabled: bool, n_jobs: int, prompts: pd.DataFrame, samples: int, done: set[tuple[str, int]]) -> None:
        self.enabled = enabled
        self.left = {pid: samples - sum((pid, k) in done for k in range(samples)) for pid in prompts["prompt_id"]}
        self.n_prompts = len(self.left)
        self.n_jobs = n_jobs

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self.p = Progress(
                TextColumn("[bold]collect"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("prompts"),
                TextColumn("{task.fields[samples]} samples  {task.fields[tps]:.1f} tok/s"),
                TimeElapsedColumn(),
                TextColumn("ETA {task.fields[eta]}"),
            )
            self.p.__enter__()
            done_prompts = sum(v <= 0 for v in self.left.values())
            self.task = self.p.add_task(
                "collect", total=self.n_prompts, completed=done_prompts, samples=0, tps=0.0, eta=_eta(0, self.n_jobs, 0.0)
            )
            self.samples = 0
        return self

    def advance(self, r: Result, tokens: int, seconds: float) -> None:
        if not self.enabled:
            return
        self.samples += 1
        self.left[r.prompt_id] -= 1
        self.p.update(
            self.task,
            advance=1 if self.left[r.prompt_id] == 0 else 0,
            samples=f"{self.samples}/{self.n_jobs}",
            tps=tokens / max(seconds, 1e-9),
            eta=_eta(self.samples, self.n_jobs, seconds),
        )

    def __exit__(self, *exc: Any) -> None:
        if self.enabled:
            self.p.__exit__(*exc)
