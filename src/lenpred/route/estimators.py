"""Where a request's predicted output length comes from.

An :class:`Estimator` has ``async estimate(query) -> Estimate`` (plus ``start`` / ``stop``). Three kinds:

* :class:`HeadEstimator`: a trained head in this process, through ``lenpred.serve.service.PredictionService``
  (micro-batched; a hidden-state head runs the target's prefill here, costly for a large model);
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
from dataclasses import dataclass
from typing import Any, Protocol

from lenpred.route.config import EstimatorConfig
from lenpred.route.openai import Query, backend_message
from lenpred.sched.dists import Z90

__all__ = [
    "CharsEstimator", "Estimate", "EstimateFailed", "Estimator", "HeadEstimator", "NoEstimator",
    "RemoteEstimator", "WithFallback", "make_estimator",
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


class HeadEstimator:
    """A trained head served in this process by ``lenpred.serve.service.PredictionService``."""

    def __init__(self, path: str, max_batch: int = 64, max_wait_ms: float = 2.0, spread: float = 0.5) -> None:
        from pathlib import Path

        from lenpred.errors import ConfigError

        if not Path(path).is_dir():
            raise ConfigError(f"estimator.head: no head directory at {path}",
                              "train one (lenpred train ...) or use estimator kind 'remote' / 'chars'")
        try:
            from lenpred.serve.service import PredictionService  # imported only when used
        except ImportError as e:
            raise ConfigError(f"estimator kind 'head' needs lenpred.serve ({e})",
                              "install lenpred with the serve extra, or use estimator kind 'remote' / 'chars'") from None

        self.svc = PredictionService.from_head(path, max_batch=max_batch, max_wait_ms=max_wait_ms)
        self.rel = spread

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
    return WithFallback(HeadEstimator(cfg.head, cfg.max_batch, cfg.max_wait_ms, cfg.spread), fallback, 0.0,
                        on_fallback)
