"""The router's Prometheus metrics (``GET /metrics``), in a registry of its own per app (so several
routers in one process, as in the tests, do not collide). Backend state (health, load) is read at
scrape time by a collector rather than kept in gauges that could drift."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

__all__ = ["LAG_EVERY_S", "GcTimer", "RouterMetrics", "watch_loop_lag"]

LAG_EVERY_S = 0.02  # the loop-lag probe's period

_MS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)
_GC = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)
_TTFB = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_TOKENS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


class _Backends:
    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily("lenpred_route_backend_healthy", "1 when the backend is in rotation", labels=["backend"])
        req = GaugeMetricFamily("lenpred_route_backend_outstanding_requests", "requests in flight", labels=["backend"])
        tok = GaugeMetricFamily("lenpred_route_backend_outstanding_tokens",
                                "predicted outstanding output tokens (drawn down as responses stream)",
                                labels=["backend"])
        pri = GaugeMetricFamily("lenpred_route_backend_priority_enabled", "1 when the priority field is sent",
                                labels=["backend"])
        for b in self.pool.backends:
            up.add_metric([b.label], 1.0 if b.healthy else 0.0)
            req.add_metric([b.label], float(b.outstanding_requests()))
            tok.add_metric([b.label], b.outstanding_tokens())
            pri.add_metric([b.label], 1.0 if b.priority_on else 0.0)
        q = GaugeMetricFamily("lenpred_route_queue_waiting", "requests waiting for a backend slot")
        q.add_metric([], float(self.pool.n_waiting))
        yield from (up, req, tok, pri, q)


class _Gboost:
    """gboost's numbers now (:class:`lenpred.route.calibrate.GboostState`), read at scrape time."""

    def __init__(self, state: Callable[[], Any]) -> None:
        self.state = state

    def collect(self) -> Iterator[GaugeMetricFamily]:
        st = self.state()
        if st is None:
            return
        g = GaugeMetricFamily("lenpred_route_gboost_gamma", "gboost's gamma (1/s) and where it comes from "
                              "(measured, pinned, default)", labels=["source"])
        g.add_metric([st.gamma_source], st.gamma)
        s = GaugeMetricFamily("lenpred_route_gboost_s_per_token_seconds", "gboost's seconds per generated token "
                              "of one backend (measured, pinned, default)", labels=["source"])
        s.add_metric([st.s_per_token_source], st.s_per_token)
        c = GaugeMetricFamily("lenpred_route_gboost_calibrated", "1 once every auto gboost number is measured")
        c.add_metric([], 1.0 if st.calibrated else 0.0)
        n = GaugeMetricFamily("lenpred_route_gboost_completions", "completions measured for gboost's calibration")
        n.add_metric([], float(st.completions))
        yield from (g, s, c, n)
        if st.rate is not None:
            r = GaugeMetricFamily("lenpred_route_gboost_rate_per_server", "arrivals per second per healthy backend "
                                  "at the last calibration")
            r.add_metric([], st.rate)
            yield r


class RouterMetrics:
    def __init__(self, pool: Any) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("lenpred_route_requests", "requests by backend and outcome",
                                ["backend", "outcome"], registry=r)
        self.retries = Counter("lenpred_route_retries", "attempts given up on a backend and retried on another",
                               ["backend", "reason"], registry=r)
        self.fallbacks = Counter("lenpred_route_estimator_fallbacks", "predictions answered by the fallback",
                                 registry=r)
        self.overhead = Histogram("lenpred_route_overhead_seconds",
                                  "router time from the request's arrival to the backend request (read, parse, "
                                  "predict, dispatch)", buckets=_MS, registry=r)
        self.estimate = Histogram("lenpred_route_estimate_seconds", "time to a prediction", ["source"],
                                  buckets=_MS, registry=r)
        self.ttfb = Histogram("lenpred_route_first_byte_seconds", "arrival to the first byte sent back",
                              buckets=_TTFB, registry=r)
        self.predicted = Histogram("lenpred_route_predicted_tokens", "predicted output tokens per sequence",
                                   buckets=_TOKENS, registry=r)
        self.completion = Histogram("lenpred_route_completion_tokens", "output tokens a request produced",
                                    buckets=_TOKENS, registry=r)
        self.abs_error = Histogram("lenpred_route_prediction_abs_error_tokens",
                                   "|predicted - produced| output tokens (requests that finished)",
                                   buckets=_TOKENS, registry=r)
        self.loop_lag = Histogram("lenpred_route_loop_lag_seconds",
                                  f"how late the event loop ran a timer (sampled every {LAG_EVERY_S * 1e3:g} ms): a stall here "
                                  "delays every stream the router relays", buckets=_MS, registry=r)
        self.gc_pause = Histogram("lenpred_route_gc_pause_seconds",
                                  "garbage collections after start-up by generation, and how long each stopped the "
                                  "event loop", ["generation"], buckets=_GC, registry=r)
        r.register(_Backends(pool))

    def watch_gboost(self, state: Callable[[], Any]) -> None:
        """Export gboost's numbers (``state()``: a GboostState, read at each scrape)."""
        self.registry.register(_Gboost(state))

    def render(self) -> bytes:
        return generate_latest(self.registry)


async def watch_loop_lag(hist: Histogram, every_s: float = LAG_EVERY_S) -> None:
    """Sleep ``every_s`` and record how much later than asked the loop woke us, for ever (cancel to stop)."""
    while True:
        t = time.monotonic()
        await asyncio.sleep(every_s)
        hist.observe(max(0.0, time.monotonic() - t - every_s))


class GcTimer:
    """Times every garbage collection (``gc.callbacks``) into a histogram labelled by generation. Installed
    while the router serves (:meth:`install` after start-up, :meth:`remove` at its stop), so several routers
    in one process (tests) each count only their own span."""

    def __init__(self, hist: Histogram) -> None:
        self._children = [hist.labels(str(g)) for g in range(3)]  # resolved once: no label lookup per collection
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self._children[info["generation"]].observe(time.perf_counter() - self._t0)

    def install(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def remove(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)
