"""Drive an engine over a run directory: card, prompt list, resume, shards, progress.

``collect(cfg)`` makes the first ``cfg.n_prompts`` prompts of the run have at least
``cfg.samples`` samples each. It derives the missing (prompt_id, sample_idx) keys from the shards
already on disk, so a run killed at any moment (even SIGKILL) and restarted with the same
arguments loses at most the samples buffered since the last shard and never duplicates one.
Raising ``--prompts`` or ``--samples`` on an existing run extends it under the same card.

Nothing is written until the engine has produced its first sample: a bad argument, an unreachable
server or a server error on the first request leaves no directory, card or prompt table behind
(and an existing run untouched). A shard that cannot be read is set aside as ``*.corrupt`` at that
moment and its samples are generated again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import Field, SerializeAsAny, ValidationInfo, field_validator, model_validator

from lenpred import __version__
from lenpred.collect import engines as _engines  # noqa: F401  (registers every engine)
from lenpred.collect.base import (
    ENGINES,
    EngineOptions,
    EngineSetup,
    FieldError,
    Job,
    Result,
    SamplingConfig,
    sample_seed,
)
from lenpred.config import Config
from lenpred.data.rundir import CARD, RunDir, card_hash, check_run_target
from lenpred.data.sources import PromptConfig, build_prompt_table, load_raw, text_sha256
from lenpred.errors import ConfigError, DataError, EngineError
from lenpred.models.loading import EMBEDDED, ModelSpec
from lenpred.progress import Progress

__all__ = ["CollectConfig", "CollectPlan", "CollectSummary", "build_card", "collect", "open_run", "prepare", "run_card"]


class CollectConfig(Config):
    """Everything ``lenpred collect`` needs. ``prompts``, ``sampling``, the model and the card fields
    of ``engine_options`` make the run card; the rest is how this invocation runs."""

    run_dir: str = Field(description="run directory (created, or resumed/extended if it exists)")
    model: str = Field(EMBEDDED, description=f"{EMBEDDED} (embedded), a HF id, a local folder or .gguf")
    engine: str = Field("llamacpp", description="generation engine: hf | llamacpp | openai")
    prompts: PromptConfig = Field(default_factory=PromptConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    n_prompts: int = Field(16, description="the first N prompts of the run get samples")
    samples: int = Field(4, description="samples per prompt (K)")
    # the engine's own options class (HFOptions, LlamaCppOptions, OpenAIOptions); None = its defaults
    engine_options: SerializeAsAny[EngineOptions] | None = None
    shard_size: int = Field(64, description="samples per shard")
    flush_seconds: float = Field(120.0, description="write a shard at least this often (seconds)")
    progress: bool = Field(True, description="show a progress bar")

    @model_validator(mode="before")
    @classmethod
    def _options_of_the_engine(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        engine = data.get("engine", cls.model_fields["engine"].default)
        if not isinstance(engine, str):
            return data  # the field's own validation names the problem
        options_cls = ENGINES.get(engine).Options  # an unknown engine lists the valid ones
        opts = data.get("engine_options")
        if opts is None:
            opts = options_cls()
        elif isinstance(opts, dict):
            opts = options_cls.from_dict(opts, "engine_options")
        elif not isinstance(opts, options_cls):
            raise ConfigError(
                f"engine_options are {type(opts).__name__}, but the {engine} engine takes {options_cls.__name__}",
                f"pass {options_cls.__name__}(...) or a plain dict of its fields",
            )
        return {**data, "engine_options": opts}

    @field_validator("n_prompts", "samples", "shard_size")
    @classmethod
    def _positive(cls, v: int, info: ValidationInfo) -> int:
        if v <= 0:
            flag = {"n_prompts": "--prompts", "samples": "--samples", "shard_size": "--shard-size"}[str(info.field_name)]
            raise FieldError(f"must be positive, got {v}", f"pass {flag} 1 or more")
        return v

    @field_validator("flush_seconds")
    @classmethod
    def _flush(cls, v: float) -> float:
        if not v > 0:
            raise FieldError(f"must be > 0 seconds, got {v}", "pass a positive number of seconds, e.g. 30")
        return v

    @property
    def options(self) -> EngineOptions:
        """The engine options (never None once validated)."""
        assert self.engine_options is not None
        return self.engine_options


@dataclass
class CollectSummary:
    run_dir: str
    card_hash: str
    new_samples: int
    new_tokens: int
    seconds: float
    total_samples: int
    shards_written: int
    set_aside: list[str] = field(default_factory=list)  # unreadable shards renamed to *.corrupt

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class CollectPlan:
    """What :func:`prepare` worked out, before anything is written."""

    card: dict[str, Any]
    prompts: pd.DataFrame  # the first n_prompts of the run; attrs["filter_stats"] when newly built
    setup: EngineSetup
    existing: RunDir | None
    done: set[tuple[str, int]]  # keys of the readable shards
    corrupt: list[Path]  # shards that cannot be read (set aside by open_run)

    @property
    def card_hash(self) -> str:
        return card_hash(self.card)


def build_card(cfg: CollectConfig, spec: ModelSpec, tokenizer: Any, dataset_sha256: str, engine_identity: dict[str, Any]) -> dict[str, Any]:
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


def run_card(cfg: CollectConfig) -> tuple[dict[str, Any], EngineSetup, pd.DataFrame, int]:
    """The run card ``cfg`` makes, without touching ``cfg.run_dir``: (card, engine setup, the raw
    prompt records, the model's context length). Loads the tokenizer, not the model."""
    from transformers import AutoConfig, AutoTokenizer

    from lenpred.models.loading import hf_folder, resolve

    spec = resolve(cfg.model)  # a bad model name fails before the prompt file is read
    raw = load_raw(cfg.prompts)
    spec, folder = hf_folder(spec)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    context = int(getattr(AutoConfig.from_pretrained(folder), "max_position_embeddings", 2048))
    setup = EngineSetup(cfg.model, spec, tokenizer, cfg.sampling, cfg.prompts.max_prompt_tokens)
    identity = ENGINES.get(cfg.engine).identity(cfg.options, setup)
    return build_card(cfg, spec, tokenizer, raw.attrs.get("sha256", ""), identity), setup, raw, context


def prepare(cfg: CollectConfig) -> CollectPlan:
    """Validate everything and build the card and prompt table, writing nothing.

    An existing run directory is checked against the card here, so a mismatch fails before any
    file is touched; its shards are scanned (keys only) and the unreadable ones listed.
    """
    check_run_target(cfg.run_dir)  # a file, or somebody's non-empty directory: refused at once
    existing = RunDir.open(cfg.run_dir) if (Path(cfg.run_dir) / CARD).exists() else None
    card, setup, raw, context = run_card(cfg)
    tokenizer = setup.tokenizer
    if existing is not None:
        existing.require_card(card)
    have = existing.prompts() if existing is not None and existing.has_prompts() else None
    if have is not None and len(have.index) >= cfg.n_prompts:
        prompts = have.iloc[: cfg.n_prompts].copy()
        # pandas round-trips DataFrame.attrs through Parquet: a stored table carries the filter stats
        # it was written with, which must not make it look freshly built (it would be rewritten short)
        prompts.attrs.pop("filter_stats", None)
    else:
        prompts, stats = build_prompt_table(cfg.prompts, tokenizer, cfg.n_prompts, context, cfg.sampling.max_new_tokens, raw)
        prompts.attrs["filter_stats"] = stats
    done, corrupt = existing.scan_shards() if existing is not None else (set(), [])
    return CollectPlan(card, prompts, setup, existing, done, corrupt)


def _stderr(msg: str) -> None:
    print(f"lenpred collect: {msg}", file=sys.stderr, flush=True)


def open_run(cfg: CollectConfig, plan: CollectPlan, notify: Callable[[str], None] = _stderr) -> tuple[RunDir, list[str]]:
    """Create (or reopen) the run directory, set unreadable shards aside, record the prompt table and
    targets. Returns the run and the shards set aside."""
    run = RunDir.create(cfg.run_dir, plan.card)  # refuses a directory made under another card
    run.clean_temp()
    set_aside = []
    for shard in plan.corrupt:
        new = run.set_aside(shard)
        set_aside.append(str(new))
        notify(f"shard {shard} cannot be read: set aside as {new.name}; its samples are generated again")
    prompts = plan.prompts
    if "filter_stats" in prompts.attrs:
        run.write_prompts(prompts)
        run.update_bookkeeping(prompt_filter=prompts.attrs["filter_stats"])
    targets = list(run.card.get("targets", []))
    t = {"prompts": cfg.n_prompts, "samples": cfg.samples}
    if t not in targets:
        targets.append(t)
    run.update_bookkeeping(
        targets=targets,
        engine_runtime=cfg.options.runtime(),
        updated_by={"lenpred_version": __version__, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
    )
    return run, set_aside


@contextlib.contextmanager
def run_lock(run_dir: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive lock on ``run_dir`` for one collector: two collectors on one run would
    generate the same missing samples twice. The lock is a hidden file beside the run
    (``.<name>.collect.lock``, an OS lock, so it is released when the process dies however it dies),
    removed on a normal exit so that a refused or finished command leaves nothing behind."""
    import fcntl

    d = Path(run_dir)
    made = [p for p in [d.parent, *d.parent.parents] if not p.exists()]  # removed again if left empty
    d.parent.mkdir(parents=True, exist_ok=True)
    path = d.parent / f".{d.name}.collect.lock"
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise DataError(f"another lenpred collect (pid {other}) is writing to {d}",
                            "wait for it to finish or stop it: two collectors on one run would generate the "
                            "same samples twice") from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed the file after we opened it: lock the one that is there now
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # while still holding the lock: a waiting opener sees the inode change
        os.close(fd)
        for p in made:  # innermost first
            with contextlib.suppress(OSError):
                p.rmdir()


def collect(cfg: CollectConfig, notify: Callable[[str], None] = _stderr) -> CollectSummary:
    """Collect the missing samples of ``cfg``'s targets. ``notify`` receives one-line notes (a shard
    set aside); the default prints them to stderr. One collector per run at a time (``run_lock``)."""
    with run_lock(cfg.run_dir):
        return _collect(cfg, notify)


def _collect(cfg: CollectConfig, notify: Callable[[str], None]) -> CollectSummary:
    plan = prepare(cfg)
    jobs = _jobs(plan.prompts, cfg.samples, plan.done, cfg.sampling.seed)
    if not jobs:
        run, aside = open_run(cfg, plan, notify)
        return CollectSummary(str(run.path), run.card_hash, 0, 0, 0.0, len(run.done_keys()), 0, aside)
    engine = ENGINES.get(cfg.engine).create(cfg.options, plan.setup)  # fails (unreachable server...) before any write
    run: RunDir | None = None
    flusher: _Flusher | None = None
    aside: list[str] = []
    t0 = time.monotonic()
    n_new = n_tok = 0
    main_thread = threading.current_thread() is threading.main_thread()  # signal handlers live there only
    old_term = signal.getsignal(signal.SIGTERM)

    def _on_term(signum: int, frame: Any) -> None:  # make SIGTERM behave like Ctrl-C: flush, then stop
        raise KeyboardInterrupt

    if main_thread:
        signal.signal(signal.SIGTERM, _on_term)
    try:
        with _Progress(cfg.progress, len(jobs), plan.prompts, cfg.samples, plan.done) as bar:
            for r in engine.generate(iter(jobs)):
                if flusher is None:  # the first sample: only now is there something worth a directory
                    run, aside = open_run(cfg, plan, notify)
                    flusher = _Flusher(run, cfg.shard_size, cfg.flush_seconds)
                flusher.add(r)
                n_new += 1
                n_tok += len(r.token_ids)
                bar.advance(r, n_tok, time.monotonic() - t0)
    finally:
        if flusher is not None:
            flusher.flush()  # a clean stop (Ctrl-C, SIGTERM, an error) keeps what was generated
        if main_thread:
            signal.signal(signal.SIGTERM, old_term)
        engine.close()
    if run is None:  # the engine returned nothing for a non-empty job list: an engine bug
        raise EngineError(f"the {cfg.engine} engine produced no sample for {len(jobs)} jobs", "report this as a bug")
    return CollectSummary(
        str(run.path), run.card_hash, n_new, n_tok, time.monotonic() - t0, len(run.done_keys()), flusher.shards if flusher else 0, aside
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
    """Progress over prompts (a prompt is done when all its samples are), with samples, tokens/s and
    the ETA from the sample rate; drawn by :class:`lenpred.progress.Progress`."""

    def __init__(self, enabled: bool, n_jobs: int, prompts: pd.DataFrame, samples: int, done: set[tuple[str, int]]) -> None:
        self.left = {pid: samples - sum((pid, k) in done for k in range(samples)) for pid in prompts["prompt_id"]}
        self.n_jobs = n_jobs
        self.samples = 0
        self.bar = Progress("collect", len(self.left), initial=sum(v <= 0 for v in self.left.values()),
                            unit="prompts", enabled=enabled, eta=False)  # prompts finish late: the ETA is the samples'

    def __enter__(self) -> _Progress:
        return self

    def advance(self, r: Result, tokens: int, seconds: float) -> None:
        if not self.bar.enabled:
            return
        self.samples += 1
        self.left[r.prompt_id] -= 1
        self.bar.update(1 if self.left[r.prompt_id] == 0 else 0,
                        info=f"{self.samples}/{self.n_jobs} samples  {tokens / max(seconds, 1e-9):.1f} tok/s  "
                             f"ETA {_eta(self.samples, self.n_jobs, seconds)}")

    def __exit__(self, *exc: Any) -> None:
        self.bar.close()
