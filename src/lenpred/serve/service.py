"""The prediction service: a head behind an asyncio micro-batcher. Usable in process, without FastAPI.

    svc = PredictionService.from_head("data/heads/proxy-smollm2-sharegpt")
    await svc.start()
    r = await svc.predict(PredictRequest(prompt="Write a haiku about tea."))
    r.predicted_tokens, r.q10, r.q90
    await svc.stop()

**Micro-batching.** :meth:`predict` puts the request on a bounded queue and awaits its future. One
batcher task takes the first waiting request, then gathers more for at most ``max_wait_ms`` (or
until ``max_batch``), and hands the whole batch to one model call (:meth:`Runner.run`) in a
single worker thread, so the event loop never blocks on torch and model calls never overlap.
Requests that arrive while a batch runs wait for the next one: under load batches fill by
themselves; alone, a request waits ``max_wait_ms`` at most.

**Never a hang.** The queue is bounded (``max_queue``: a full queue answers
:class:`~lenpred.serve.errors.OverloadedError` at once), every request has a timeout
(``timeout_s``: :class:`~lenpred.serve.errors.PredictTimeoutError`), a request that fails fails alone
(a failed model call is repeated request by request, :meth:`Runner.run`), and :meth:`stop` answers
whatever still waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from lenpred.errors import ConfigError
from lenpred.serve.errors import (
    InternalError,
    OverloadedError,
    PredictTimeoutError,
    ServeError,
    ServiceStoppedError,
)
from lenpred.serve.heads import PrefillOptions, RawPrediction, Runner, TextOptions, load_runner
from lenpred.serve.schema import PredictRequest, PredictResponse

__all__ = ["Batching", "PredictionService"]


@dataclass(frozen=True)
class Batching:
    """How the micro-batcher batches: at most ``max_batch`` requests per model call, a request waits at
    most ``max_wait_ms`` for batch mates, at most ``max_queue`` wait (more: overloaded), and a request
    answers within ``timeout_s`` (queueing included) or times out."""

    max_batch: int = 64
    max_wait_ms: float = 2.0
    max_queue: int = 4096
    timeout_s: float = 60.0


@dataclass
class _Item:
    req: PredictRequest
    fut: asyncio.Future[RawPrediction]


class PredictionService:
    """A loaded head and its micro-batcher. Build with :meth:`from_head`; ``start`` / ``stop`` the batcher."""

    def __init__(self, runner: Runner, batching: Batching | None = None, *, threads: int = 1,
                 metrics: Any = None) -> None:
        b = batching or Batching()
        max_batch, max_wait_ms, max_queue, timeout_s = b.max_batch, b.max_wait_ms, b.max_queue, b.timeout_s
        if max_batch < 1:
            raise ConfigError(f"max_batch must be at least 1, got {max_batch}", "set max_batch to 1 or more")
        if max_wait_ms < 0:
            raise ConfigError(f"max_wait_ms must be 0 or more, got {max_wait_ms}", "set max_wait_ms to 0 or more")
        if max_queue < 1:
            raise ConfigError(f"max_queue must be at least 1, got {max_queue}", "set max_queue to 1 or more")
        if timeout_s <= 0:
            raise ConfigError(f"timeout_s must be positive, got {timeout_s}", "set timeout_s to a positive number of seconds")
        self.runner = runner
        self.max_batch = int(max_batch)
        self.max_wait_ms = float(max_wait_ms)
        self.threads = threads
        self.max_queue = int(max_queue)
        self.timeout_s = float(timeout_s)
        self.metrics = metrics  # a ServeMetrics (or None); the app passes its own
        self._queue: asyncio.Queue[_Item] | None = None
        self._task: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._started_at: float | None = None
        self.inline = False  # True: each request runs on the event loop at once (cheap text heads; `serve --inline`)
        self.batches = 0  # model calls made by the batcher
        self.batch_sizes: list[int] = []  # the last few hundred batch sizes (tests, health)

    @classmethod
    def from_head(cls, path: str | os.PathLike[str], *, batching: Batching | None = None, threads: int = 1,
                  prefill: PrefillOptions | None = None, text: TextOptions | None = None, warmup: bool = True,
                  metrics: Any = None) -> PredictionService:
        """Load the head at ``path`` (and the embedder or target model it reads), ready to :meth:`start`.

        ``batching``: how requests are batched (default ``Batching()``); ``threads``: torch CPU threads of
        the model calls; ``prefill``: a hidden-state head's target model, prompt cut and device; ``text``:
        how a text head runs. Everything that can be wrong with the head (missing, not a head, another
        format version, a model that is not the head's) raises here, before any request is taken.
        ``warmup`` runs one prediction so the first request does not pay for lazy loading.
        """
        if threads is not None and threads < 1:
            raise ConfigError(f"threads must be at least 1, got {threads}", "pass --threads 1 or more")
        _set_threads(threads)
        runner = load_runner(path, prefill=prefill, threads=threads, text=text)
        svc = cls(runner, batching, threads=threads, metrics=metrics)
        if warmup:
            out = runner.run([PredictRequest(prompt="Hello.")])
            if isinstance(out[0], Exception):
                raise out[0]
            runner.calls = 0
        return svc

    # ---------------------------------------------------------------- identity
    @property
    def head_name(self) -> str:
        return self.runner.path.resolve().name

    @property
    def card_hash(self) -> str | None:
        v = self.runner.meta.get("card_hash")
        return str(v) if v is not None else None

    @property
    def predictor(self) -> str:
        return self.runner.predictor

    @property
    def input_kind(self) -> str:
        return self.runner.input_kind

    @property
    def model_id(self) -> str | None:
        return self.runner.model_id

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def queue_depth(self) -> int:
        return self._queue.qsize() if self._queue is not None else 0

    @property
    def uptime_s(self) -> float:
        return time.monotonic() - self._started_at if self._started_at is not None else 0.0

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Start the batcher on the running loop (a no-op when it runs already)."""
        if self.running:
            return
        self._queue = asyncio.Queue(maxsize=self.max_queue)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lenpred-serve",
                                            initializer=_set_threads, initargs=(self.threads,))
        self._task = asyncio.get_running_loop().create_task(self._batcher(), name="lenpred-serve-batcher")
        self._started_at = time.monotonic()

    async def stop(self) -> None:
        """Stop the batcher; requests still queued get :class:`ServiceStoppedError`."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        q = self._queue
        while q is not None and not q.empty():
            it = q.get_nowait()
            if not it.fut.done():
                it.fut.set_exception(ServiceStoppedError("the prediction service stopped before this request ran"))
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    async def __aenter__(self) -> PredictionService:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    # ---------------------------------------------------------------- predictions
    async def predict(self, req: PredictRequest) -> PredictResponse:
        """The prediction for one request (waits at most ``max_wait_ms`` for batch mates)."""
        t0 = time.perf_counter()
        if self.inline:
            raw = self._run_inline(req)
            return PredictResponse(predicted_tokens=raw.point, q10=raw.q10, q50=raw.q50, q90=raw.q90,
                                   head=self.head_name, card_hash=self.card_hash,
                                   elapsed_ms=(time.perf_counter() - t0) * 1e3, predictor=self.predictor,
                                   prompt_tokens=raw.prompt_tokens)
        if not self.running:
            await self.start()
        assert self._queue is not None
        fut: asyncio.Future[RawPrediction] = asyncio.get_running_loop().create_future()
        try:
            self._queue.put_nowait(_Item(req, fut))
        except asyncio.QueueFull:
            raise OverloadedError(f"the prediction queue is full ({self.max_queue} requests waiting)",
                                  "retry later, or run more prediction services") from None
        self._gauge()
        try:
            raw = await asyncio.wait_for(fut, self.timeout_s)  # cancels fut on timeout: the batcher skips it
        except TimeoutError:
            raise PredictTimeoutError(f"the prediction took longer than {self.timeout_s:g} s",
                                      "retry, or raise the service's --timeout-s") from None
        return PredictResponse(predicted_tokens=raw.point, q10=raw.q10, q50=raw.q50, q90=raw.q90,
                               head=self.head_name, card_hash=self.card_hash,
                               elapsed_ms=(time.perf_counter() - t0) * 1e3, predictor=self.predictor,
                               prompt_tokens=raw.prompt_tokens)

    def _run_inline(self, req: PredictRequest) -> RawPrediction:
        """One request through the runner on the calling (event-loop) thread: no queue, no batch wait, no
        thread hop. Only for heads of a fraction of a millisecond (ngram, gbdt): a slow one stalls the loop."""
        out = self.runner.run([req])[0]
        if isinstance(out, ServeError):
            raise out
        self.batches += 1
        return out

    async def predict_many(self, reqs: Sequence[PredictRequest]) -> list[PredictResponse]:
        """Predictions for several requests, in order (batched together); the first error is raised."""
        return list(await asyncio.gather(*(self.predict(r) for r in reqs)))

    # ---------------------------------------------------------------- the batcher
    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.queue_depth.set(self.queue_depth)

    async def _collect(self, q: asyncio.Queue[_Item]) -> list[_Item]:
        """The first waiting request, plus whatever joins it within ``max_wait_ms`` (up to ``max_batch``)."""
        batch = [await q.get()]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait_ms / 1e3
        while len(batch) < self.max_batch:
            while len(batch) < self.max_batch and not q.empty():
                batch.append(q.get_nowait())
            left = deadline - loop.time()
            if len(batch) >= self.max_batch or left <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(q.get(), left))
            except TimeoutError:
                break
        return batch

    async def _batcher(self) -> None:
        assert self._queue is not None and self._executor is not None
        q, loop = self._queue, asyncio.get_running_loop()
        while True:
            batch = [it for it in await self._collect(q) if not it.fut.done()]  # timed-out requests: dropped
            self._gauge()
            if not batch:
                continue
            t0 = time.perf_counter()
            try:
                outcomes: list[Any] = await loop.run_in_executor(self._executor, self.runner.run,
                                                                 [it.req for it in batch])
            except asyncio.CancelledError:
                for it in batch:
                    if not it.fut.done():
                        it.fut.set_exception(ServiceStoppedError("the prediction service stopped during this request"))
                raise
            except Exception as e:  # noqa: BLE001 - the runner answers per request; this is a last resort
                outcomes = [InternalError(f"prediction failed ({type(e).__name__}: {e})".splitlines()[0][:300])] * len(batch)
            seconds = time.perf_counter() - t0
            self.batches += 1
            self.batch_sizes = (self.batch_sizes + [len(batch)])[-512:]
            if self.metrics is not None:
                self.metrics.observe_batch(len(batch), seconds)
            for it, o in zip(batch, outcomes, strict=True):
                if it.fut.done():
                    continue
                if isinstance(o, ServeError):
                    it.fut.set_exception(o)
                else:
                    it.fut.set_result(o)


def _set_threads(threads: int | None) -> None:
    """torch's intra-op threads (one is fastest on a busy CPU; see lenpred.predictors.nn.one_thread)."""
    if threads:
        import torch

        torch.set_num_threads(int(threads))
