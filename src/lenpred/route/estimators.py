"""Where a request's predicted output length comes from.

An :class:`Estimator` has ``async estimate(query) -> Estimate`` (plus ``start`` / ``stop``). The kinds:

* :class:`InlineEstimator`: a cheap text head (ngram, gbdt) called on the router's own event
  loop for each request -- no thread, no batch, no HTTP hop. It must earn that place: at load it is
  timed on :data:`lenpred.serve.check_prompts.CHECK_PROMPTS` and refused when its p50 or p99 per
  request is over ``inline_p50_ms`` / ``inline_p99_ms`` (a slow head on the loop would delay every
  other request the router relays);
* :class:`HeadEstimator`: a trained head in this process, through ``lenpred.serve.service.PredictionService``
  (micro-batched in a worker thread; a hidden-state head runs the target's prefill here, costly for a
  large model);
* :class:`RemoteEstimator`: ``POST {url}/v1/predict`` on a ``lenpred serve`` process, with a timeout;
* :class:`CharsEstimator`: prompt characters / ``chars_per_token`` * ``factor`` (what a router without
  a model can do; llm-d uses 1.5 x the input length), or :class:`NoEstimator` (no prediction at all).

:class:`WithFallback` wraps the first two: when the head or the service fails (down, slow, garbage)
the request gets the cheap estimate instead, and a remote service that failed is skipped for
``retry_after_s`` so that a dead service does not add its timeout to every request; a service that
refused one request (a 4xx: a prompt it cannot read) is asked again by the next. The router
therefore always works, degraded, without a head.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from lenpred.route.bodies import Query, backend_message
from lenpred.route.config import EstimatorConfig
from lenpred.stats.quantiles import Z90

__all__ = [
    "CharsEstimator", "Estimate", "EstimateFailed", "Estimator", "HeadEstimator", "InlineEstimator", "NoEstimator",
    "RemoteEstimator", "WithFallback", "make_estimator", "measure_latency",
]

log = logging.getLogger("lenpred.route")


@dataclass(frozen=True, slots=True)
class Estimate:
    """Predicted output tokens of one sequence (None: no prediction), its spread (sd), and provenance."""

    tokens: float | None
    spread: float | None
    source: str  # "head:<name>", "remote:<name>", "chars", "none"; "+fallback" when the primary failed
    elapsed_ms: float = 0.0
    card_hash: str | None = None


class EstimateFailed(Exception):
    """The primary estimator could not answer (the fallback is used). ``this_request``: the estimator
    refused this request (a 4xx from the service) and is fine for others: no pause after it."""

    def __init__(self, message: str, this_request: bool = False) -> None:
        super().__init__(message)
        self.this_request = this_request


class Estimator(Protocol):
    async def start(self) -> None: ...

    async def estimate(self, query: Query) -> Estimate: ...

    async def stop(self) -> None: ...


def _spread(resp: Any, tokens: float, rel: float) -> float:
    q10, q90 = getattr(resp, "q10", None), getattr(resp, "q90", None)
    if q10 is not None and q90 is not None and q90 >= q10:
        return (float(q90) - float(q10)) / (2 * Z90)  # a normal's sd from its 10/90% quantiles
    return rel * tokens


def _predict_payload(query: Query) -> dict[str, Any]:
    if query.messages is not None:
        return {"messages": [dict(m) for m in query.messages], "model": query.model}
    return {"prompt": query.prompt or "", "model": query.model}


class CharsEstimator:
    """Predicted output tokens = prompt tokens (characters / chars_per_token, or the token-id count) x factor."""

    def __init__(self, chars_per_token: float = 4.0, factor: float = 1.0, spread: float = 0.5) -> None:
        self.chars_per_token, self.factor, self.rel = chars_per_token, factor, spread

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def estimate_now(self, query: Query) -> Estimate:
        n_prompt = query.prompt_token_ids if query.prompt_token_ids is not None else query.chars / self.chars_per_token
        tokens = max(1.0, math.ceil(n_prompt) * self.factor)
        return Estimate(tokens, self.rel * tokens, "chars")

    async def estimate(self, query: Query) -> Estimate:
        return self.estimate_now(query)


class NoEstimator:
    """No prediction: no header, the default load and priority."""

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def estimate_now(self, query: Query) -> Estimate:
        return Estimate(None, None, "none")

    async def estimate(self, query: Query) -> Estimate:
        return self.estimate_now(query)


def measure_latency(fn: Any, prompts: Sequence[str], calls: int, p50_budget_ms: float,
                    clock: Any = time.perf_counter) -> tuple[float, float, int]:
    """(p50, p99, calls made) in ms of ``fn(prompt)`` over ``calls`` calls cycling through ``prompts``, after
    one untimed call. Stops early once more than half the planned calls were over ``p50_budget_ms`` (the
    p50 cannot be met any more: a slow head is refused in a few calls, not after all of them)."""
    fn(prompts[0])
    times: list[float] = []
    over = 0
    for i in range(calls):
        t0 = clock()
        fn(prompts[i % len(prompts)])
        times.append((clock() - t0) * 1e3)
        over += times[-1] > p50_budget_ms
        if over > calls // 2:
            break
    ts = sorted(times)
    return ts[len(ts) // 2], ts[min(len(ts) - 1, math.ceil(0.99 * len(ts)) - 1)], len(ts)


def query_text(query: Query) -> str | None:
    """What a text head reads (as ``lenpred serve`` does): the prompt, or the last user message with text."""
    if query.prompt is not None:
        return query.prompt if query.prompt.strip() else None
    users = [m["content"] for m in query.messages or () if m.get("role") == "user" and m.get("content", "").strip()]
    return users[-1] if users else None


class InlineEstimator:
    """A text head run on the router's event loop (see the module docstring). Requests that arrive in the same
    loop turn (a burst) are predicted together, ``inline_max_batch`` per call; a lone request is predicted
    on the next turn, alone.

    ``runner``: a :class:`lenpred.serve.heads.TextRunner` (or anything with ``predict_texts(texts) ->
    [RawPrediction]``, ``predictor`` and ``meta``); ``clock``: the timer of the load-time check (tests)."""

    def __init__(self, runner: Any, cfg: EstimatorConfig, clock: Any = time.perf_counter) -> None:
        from lenpred.errors import ConfigError
        from lenpred.serve.check_prompts import CHECK_PROMPTS

        self.runner, self.rel, self.max_batch = runner, cfg.spread, cfg.inline_max_batch
        self._pending: list[tuple[str, asyncio.Future[Any]]] = []
        self.name = str(getattr(runner, "path", cfg.head)).rstrip("/").rsplit("/", 1)[-1]
        self.card_hash = (getattr(runner, "meta", None) or {}).get("card_hash")
        p50, p99, n = measure_latency(lambda t: runner.predict_texts([t]), CHECK_PROMPTS, cfg.inline_check_calls,
                                      cfg.inline_p50_ms, clock)
        self.latency_ms = (p50, p99)
        if p50 > cfg.inline_p50_ms or p99 > cfg.inline_p99_ms:
            raise ConfigError(f"estimator.head {cfg.head} ({runner.predictor}) takes {p50:.2f} ms p50 / {p99:.2f} ms "
                              f"p99 per request here (over {n} check calls), over the inline budget of "
                              f"{cfg.inline_p50_ms:g} ms p50 / {cfg.inline_p99_ms:g} ms p99",
                              "use estimator kind 'head' (a worker thread) or 'remote' (lenpred serve) for this head, "
                              "a cheaper head (ngram, gbdt), or raise estimator.inline_p50_ms / inline_p99_ms")

    @classmethod
    def from_config(cls, cfg: EstimatorConfig) -> InlineEstimator:
        from lenpred.errors import ConfigError

        runner = _load_runner(cfg)
        if runner.input_kind != "text":
            raise ConfigError(f"estimator kind 'inline' runs text heads; {cfg.head} is a {runner.predictor} head "
                              "that reads the target's prefill", "use estimator kind 'head' or 'remote' for it")
        return cls(runner, cfg)

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def estimate(self, query: Query) -> Estimate:
        text = query_text(query)
        if text is None:
            raise EstimateFailed("no prompt text a text head can read (token ids, or no user message)", True)
        t0 = time.perf_counter()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._pending.append((text, fut))
        if len(self._pending) == 1:
            loop.call_soon(self._flush)  # after the other requests of this loop turn have joined
        raw = await fut
        tokens = float(raw.point)
        if not math.isfinite(tokens) or tokens < 0:
            raise EstimateFailed(f"the head predicted {tokens!r} tokens", True)
        return Estimate(tokens, _spread(raw, tokens, self.rel), f"inline:{self.name}",
                        (time.perf_counter() - t0) * 1e3, self.card_hash)

    def _flush(self) -> None:
        """Predict up to ``max_batch`` waiting requests in one call (those that arrived in the same loop turn:
        a burst costs one vectorised call per batch, not one call each); more wait for the next turn."""
        batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch:]
        if self._pending:
            asyncio.get_running_loop().call_soon(self._flush)
        live = [(t, f) for t, f in batch if not f.done()]
        if not live:
            return
        try:
            out = self.runner.predict_texts([t for t, _ in live])
        except Exception as e:  # noqa: BLE001 - a head failure must not fail the requests: the fallback answers
            err = EstimateFailed(f"{type(e).__name__}: {e}", True)
            for _, f in live:
                if not f.done():
                    f.set_exception(err)
            return
        for (_, f), raw in zip(live, out, strict=True):
            if not f.done():
                f.set_result(raw)


def _load_runner(cfg: EstimatorConfig) -> Any:
    from pathlib import Path

    from lenpred.errors import ConfigError

    if not Path(str(cfg.head)).is_dir():
        raise ConfigError(f"estimator.head: no head directory at {cfg.head}",
                          "train one (lenpred train ...) or use estimator kind 'remote' / 'chars'")
    try:
        from lenpred.serve.heads import TextOptions, load_runner  # imported only when used
    except ImportError as e:
        raise ConfigError(f"estimator kind {cfg.kind!r} needs lenpred.serve ({e})",
                          "install lenpred with the serve extra, or use estimator kind 'remote' / 'chars'") from None
    return load_runner(str(cfg.head), text=TextOptions(cfg.runtime, cfg.runtime_tolerance))


class HeadEstimator:
    """A trained head served in this process by ``lenpred.serve.service.PredictionService``."""

    def __init__(self, cfg: EstimatorConfig) -> None:
        from lenpred.serve.service import Batching, PredictionService

        runner = _load_runner(cfg)
        self.svc = PredictionService(runner, Batching(max_batch=cfg.max_batch, max_wait_ms=cfg.max_wait_ms))
        from lenpred.serve.schema import PredictRequest

        out = runner.run([PredictRequest(prompt="Hello.")])  # warm-up: the first request pays no lazy loading
        if isinstance(out[0], Exception):
            raise out[0]
        self.rel = cfg.spread

    async def start(self) -> None:
        await self.svc.start()

    async def stop(self) -> None:
        await self.svc.stop()

    async def estimate(self, query: Query) -> Estimate:
        from lenpred.serve.schema import PredictRequest

        if query.prompt is None and query.messages is None:
            raise EstimateFailed("the prompt is token ids: a text head cannot read it")
        t0 = time.perf_counter()
        try:
            resp = await self.svc.predict(PredictRequest(**_predict_payload(query)))
        except Exception as e:  # a head failure must not fail the request: the fallback answers
            raise EstimateFailed(f"{type(e).__name__}: {e}") from e
        tokens = float(resp.predicted_tokens)
        return Estimate(tokens, _spread(resp, tokens, self.rel), f"head:{resp.head}",
                        (time.perf_counter() - t0) * 1e3, getattr(resp, "card_hash", None))


@dataclass(frozen=True, slots=True)
class _Resp:
    predicted_tokens: float
    q10: float | None
    q90: float | None
    head: str
    card_hash: str | None


class RemoteEstimator:
    """``POST {url}/v1/predict`` on a ``lenpred serve`` process (kept-alive connections, one client session)."""

    def __init__(self, url: str, timeout_s: float = 0.5, spread: float = 0.5) -> None:
        self.url, self.timeout_s, self.rel = url, timeout_s, spread
        self._client: Any = None
        self._target: Any = None

    async def start(self) -> None:
        from yarl import URL

        from lenpred.route.upstream import Client

        self._client = Client(connect_s=self.timeout_s)
        await self._client.start()
        self._target = URL(self.url.rstrip("/") + "/v1/predict")

    async def stop(self) -> None:
        if self._client is not None:
            await self._client.close()

    async def estimate(self, query: Query) -> Estimate:
        from lenpred.route.upstream import UpstreamError

        if query.prompt is None and query.messages is None:
            raise EstimateFailed("the prompt is token ids: the service reads text")
        t0 = time.perf_counter()
        body = json.dumps(_predict_payload(query)).encode()
        try:
            async with asyncio.timeout(self.timeout_s):  # the whole exchange, not a phase of it
                r = await self._client.post(self._target, _JSON, body, read_s=None)
                try:
                    raw = await r.read(1 << 20)
                finally:
                    r.close()
        except TimeoutError as e:
            raise EstimateFailed(f"{self.url}: no prediction within {self.timeout_s:g} s") from e
        except UpstreamError as e:
            raise EstimateFailed(f"{self.url}: {e}") from e
        if r.status != 200:
            mine = 400 <= r.status < 500 and r.status != 429  # this request's problem, not the service's
            raise EstimateFailed(f"{self.url} answered HTTP {r.status}: {backend_message(raw, 200)}", mine)
        try:
            j = json.loads(raw)
            resp = _Resp(float(j["predicted_tokens"]), j.get("q10"), j.get("q90"), str(j.get("head", "?")),
                         j.get("card_hash"))
        except (ValueError, KeyError, TypeError) as e:
            raise EstimateFailed(f"{self.url} answered something that is not a prediction ({e})") from e
        if not math.isfinite(resp.predicted_tokens) or resp.predicted_tokens < 0:
            raise EstimateFailed(f"{self.url} predicted {resp.predicted_tokens!r} tokens")
        tokens = resp.predicted_tokens
        return Estimate(tokens, _spread(resp, tokens, self.rel), f"remote:{resp.head}",
                        (time.perf_counter() - t0) * 1e3, resp.card_hash)


_JSON = (("content-type", "application/json"),)


class WithFallback:
    """The primary estimator, or the fallback when it fails (and, after a failure, for ``retry_after_s``)."""

    def __init__(self, primary: Any, fallback: CharsEstimator | NoEstimator, retry_after_s: float = 5.0,
                 on_fallback: Any = None) -> None:
        self.primary, self.fallback, self.retry_after_s = primary, fallback, retry_after_s
        self.on_fallback = on_fallback  # called with the reason (metrics)
        self._skip_until = 0.0
        self._last_log = -math.inf
        self.failures = 0

    async def start(self) -> None:
        await self.primary.start()

    async def stop(self) -> None:
        await self.primary.stop()

    def _degraded(self, est: Estimate) -> Estimate:
        return Estimate(est.tokens, est.spread, est.source + "+fallback", est.elapsed_ms)

    async def estimate(self, query: Query) -> Estimate:
        now = time.monotonic()
        if now < self._skip_until or (query.prompt is None and query.messages is None):  # token ids: no text
            return self._degraded(self.fallback.estimate_now(query))
        try:
            return await self.primary.estimate(query)
        except EstimateFailed as e:
            self.failures += 1
            if not e.this_request:  # the service is down or broken: spare the next requests its timeout
                self._skip_until = now + self.retry_after_s
            if now - self._last_log >= 10.0:  # at most one line per 10 s, however many requests fail
                self._last_log = now
                pause = self.retry_after_s and not e.this_request
                log.warning("estimator failed (%s): the %s fallback answers%s", e, type(self.fallback).__name__,
                            f" for {self.retry_after_s:g} s" if pause else " for this request")
            if self.on_fallback is not None:
                self.on_fallback(str(e))
            return self._degraded(self.fallback.estimate_now(query))


def make_estimator(cfg: EstimatorConfig, on_fallback: Any = None) -> Any:
    """The estimator a config asks for, wrapped with its fallback where it can fail."""
    fallback: CharsEstimator | NoEstimator = (
        CharsEstimator(cfg.chars_per_token, cfg.factor, cfg.spread) if cfg.fallback == "chars" else NoEstimator()
    )
    if cfg.kind == "chars":
        return CharsEstimator(cfg.chars_per_token, cfg.factor, cfg.spread)
    if cfg.kind == "none":
        return NoEstimator()
    if cfg.kind == "remote":
        assert cfg.url is not None
        primary: Any = RemoteEstimator(cfg.url, cfg.timeout_s, cfg.spread)
        return WithFallback(primary, fallback, cfg.retry_after_s, on_fallback)
    assert cfg.head is not None
    # a head that fails per request falls back; one retried at once (no skip window: it is in-process)
    primary = InlineEstimator.from_config(cfg) if cfg.kind == "inline" else HeadEstimator(cfg)
    return WithFallback(primary, fallback, 0.0, on_fallback)
