"""Prometheus metrics of the prediction service (prometheus_client), one registry per service.

A registry of its own (not the process-global one) so that several services in one process (tests,
the router embedding a service) never collide. ``GET /metrics`` renders :attr:`ServeMetrics.registry`.
"""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

__all__ = ["ServeMetrics", "CONTENT_TYPE", "ENDPOINTS"]

CONTENT_TYPE = CONTENT_TYPE_LATEST

ENDPOINTS = frozenset({"/v1/predict", "/healthz", "/metrics"})
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class ServeMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter("lenpred_serve_requests", "HTTP requests answered, by endpoint and status code",
                                ["endpoint", "status"], registry=r)
        self.errors = Counter("lenpred_serve_errors", "error replies, by OpenAI error type", ["type"], registry=r)
        self.latency = Histogram("lenpred_serve_request_latency_seconds",
                                 "time from a prediction request's arrival to its answer (queueing included)",
                                 buckets=_LATENCY_BUCKETS, registry=r)
        self.batch_size = Histogram("lenpred_serve_batch_size", "requests per model call (micro-batch size)",
                                    buckets=_BATCH_BUCKETS, registry=r)
        self.batch_seconds = Histogram("lenpred_serve_batch_seconds", "wall time of one model call (one batch)",
                                       buckets=_LATENCY_BUCKETS, registry=r)
        self.model_calls = Counter("lenpred_serve_model_calls", "model calls (one per micro-batch)", registry=r)
        self.predictions = Counter("lenpred_serve_predictions", "predictions made", registry=r)
        self.queue_depth = Gauge("lenpred_serve_queue_depth", "requests waiting for a batch", registry=r)

    def observe_batch(self, size: int, seconds: float) -> None:
        self.model_calls.inc()
        self.batch_size.observe(size)
        self.batch_seconds.observe(seconds)

    def observe_request(self, endpoint: str, status: int, seconds: float | None = None,
                        error_type: str | None = None) -> None:
        if endpoint not in ENDPOINTS:
            endpoint = "other"  # a label per unknown path would grow without bound
        self.requests.labels(endpoint=endpoint, status=str(status)).inc()
        if error_type is not None:
            self.errors.labels(type=error_type).inc()
        if seconds is not None:
            self.latency.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
