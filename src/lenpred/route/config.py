"""The router's config file (``lenpred route --config router.json``): backends, estimator, priority,
dispatch policy, timeouts, limits, health checks. One pydantic model tree on :class:`lenpred.config.Config`
(frozen, unknown keys refused, one-line errors naming the field), validated before anything starts.

A minimal file::

    {"backends": [{"url": "http://127.0.0.1:8001"}, {"url": "http://127.0.0.1:8002"}],
     "policy": "least-predicted-tokens",
     "estimator": {"kind": "remote", "url": "http://127.0.0.1:8100"}}

``docs/route.md`` documents every field; ``RouterConfig.json_schema()`` is the machine-readable form.
"""

from __future__ import annotations

import math
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, StrictBool, field_validator, model_validator

from lenpred.config import Config
from lenpred.errors import ConfigError, FieldError
from lenpred.sched import DISPATCHERS, QUEUE_POLICIES, ROUTER_DEFAULT
from lenpred.sched.params import FLAT_KEYS, QueueParams, with_flat_keys
from lenpred.sched.queue import PolicyParams, queue_params

__all__ = [
    "BackendConfig", "CalibrateConfig", "EstimatorConfig", "GcConfig", "HealthConfig", "LimitsConfig", "PriorityConfig",
    "PREDICTING_ESTIMATORS", "RouterConfig", "TimeoutConfig", "router_queues", "HintsConfig", "normalize_url",
]


# the router's collector thresholds by default (GcConfig.thresholds): a young collection every 50,000 net
# allocations instead of 700. A relayed stream's objects die by reference counting, not in cycles, so at 200
# streams the count never reaches it and no collection runs; at 700 one ran every ~0.2 s, each stopping every
# stream for 0.4 ms (2.5-3 ms every tenth, the middle generation): docs/route.md, "The router's own loop"
GC_THRESHOLDS = (50_000, 10, 10)


def normalize_url(url: str, what: str = "url", path: bool = True) -> str:
    """``http(s)://host[:port][/prefix]`` without a trailing ``/`` or ``/v1`` (the router adds ``/v1/...``).
    With ``path`` False, a path other than ``/v1`` is refused: an OpenAI-compatible server (vLLM, SGLang,
    llama.cpp) serves ``/v1/...`` at its root, and a path kept silently (``.../v1/chat/completions``, a typo)
    would turn every request into a 404."""
    if not isinstance(url, str) or not url.strip():
        raise FieldError(f"{what} is empty", "give a URL such as http://127.0.0.1:8000")
    u = urlsplit(url.strip())
    if u.scheme not in ("http", "https") or not u.hostname:
        raise FieldError(f"{what} {url!r} is not an http(s) URL with a host",
                         "give a URL such as http://127.0.0.1:8000 (the /v1 suffix is optional)")
    try:
        u.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise FieldError(f"{what} {url!r} has an invalid port", "use a port number from 1 to 65535") from None
    if u.query or u.fragment:
        raise FieldError(f"{what} {url!r} has a query or fragment", "give only scheme, host, port and path")
    prefix = u.path.rstrip("/")
    if prefix.endswith("/v1"):
        prefix = prefix[: -len("/v1")]
    if prefix and not path:
        root = f"{u.scheme}://{u.netloc}"
        fix = f"give the server's root URL, {root} (or {root}/v1)"
        if "v1" not in prefix.split("/"):  # not an endpoint's path: perhaps a gateway's prefix
            fix += f"; for a server under a path prefix, add \"prefix\": \"{prefix}\""
        raise FieldError(f"{what} {url!r} has the path {u.path!r}; the router adds /v1/chat/completions and the "
                         "other endpoints itself", fix)
    return f"{u.scheme}://{u.netloc}{prefix}"


def _positive(where: str, **values: float | None) -> None:
    for k, v in values.items():
        if v is not None and not (math.isfinite(v) and v > 0):
            raise ConfigError(f"{where}.{k} must be a number > 0, got {v!r}", f"set {where}.{k} to a positive number")


class BackendConfig(Config):
    """One OpenAI-compatible server (vLLM, SGLang, llama.cpp server, ...)."""

    url: str = Field(description="the server's root URL, e.g. http://10.0.0.5:8000 (a /v1 suffix is accepted and "
                                 "dropped; any other path is refused: see prefix)")
    prefix: str = Field("", description="a path the server's /v1/... endpoints sit under (a gateway's, e.g. "
                                        "/openai for KServe); empty for vLLM, SGLang and llama.cpp")
    name: str | None = Field(None, description="name in headers, logs and metrics (default host:port)")
    models: tuple[str, ...] = Field((), description="models it serves; empty = discovered from GET /v1/models")
    priority: Literal["auto", "on", "off"] = Field(
        "auto", description="send the priority field: on, off (the backend rejects it), or auto (send it and "
                            "turn it off for this backend the first time it answers 400 about the field)")
    max_outstanding: int = Field(256, description="requests in flight at once on this backend; more wait")
    flatten_content: StrictBool = Field(False, description="the server takes only a string as a chat message's content "
                                                     "(llama-cpp-python's chat templates): a list of text parts is "
                                                     "joined into one string (newlines between parts) before it is "
                                                     "sent; a request with another part (an image) is not sent to it")

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        return normalize_url(v, "backend url", path=False)

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        p = v.strip().rstrip("/")
        if p.endswith("/v1"):
            p = p[: -len("/v1")]
        if p and (not p.startswith("/") or "?" in p or "#" in p or "//" in p):
            raise FieldError(f"prefix {v!r} is not a URL path", "give a path such as /openai, or leave it empty")
        return p

    @property
    def base(self) -> str:
        """Where the server's ``/v1/...`` endpoints are: the URL and the prefix."""
        return self.url + self.prefix

    @field_validator("max_outstanding")
    @classmethod
    def _max(cls, v: int) -> int:
        if v < 1:
            raise FieldError(f"max_outstanding must be >= 1, got {v}", "set it to the server's slots (llama.cpp --parallel; vLLM: its max_num_seqs)")
        return v

    @property
    def label(self) -> str:
        return self.name or urlsplit(self.url).netloc


ESTIMATORS = ("inline", "head", "remote", "chars", "none")


class EstimatorConfig(Config):
    """Where each request's predicted output length comes from (and what is used when that fails)."""

    kind: Literal["inline", "head", "remote", "chars", "none"] = Field(
        "chars", description="inline: a cheap text head (ngram, gbdt) called on the router's event loop, refused "
                             "when slower than inline_p50_ms / inline_p99_ms; head: a trained head in this process "
                             "(lenpred.serve, a worker thread); remote: a `lenpred serve` URL; chars: prompt "
                             "characters / chars_per_token * factor; none: no prediction")
    head: str | None = Field(None, description="head directory (kinds inline and head)")
    runtime: Literal["torch", "torch-int8", "onnx", "onnx-int8"] = Field(
        "torch", description="inline / head, proxy head only: the MiniLM encoder's runtime (onnx*: needs "
                             "onnxruntime); refused when it moves a check prompt's prediction by more than "
                             "runtime_tolerance")
    runtime_tolerance: float = Field(0.10, description="largest relative change of a check prompt's prediction "
                                                       "a runtime may make (0.10: 10%)")
    inline_p50_ms: float = Field(2.0, description="inline: the head's median time per request, measured at load "
                                                  "on the check prompts, may not exceed this")
    inline_p99_ms: float = Field(5.0, description="inline: nor its 99th percentile this")
    inline_check_calls: int = Field(200, description="inline: timed calls of the load-time latency check (its p99 "
                                                    "is the 2nd slowest of 200: one preemption does not refuse a head)")
    inline_max_batch: int = Field(16, description="inline: requests that arrive in one event-loop turn are "
                                                  "predicted together, this many per call (the loop is busy "
                                                  "for one call at a time)")
    url: str | None = Field(None, description="`lenpred serve` base URL (kind remote)")
    timeout_s: float = Field(0.5, description="remote: give up on a prediction after this long and use the fallback")
    retry_after_s: float = Field(5.0, description="remote: after a failure, use the fallback for this long")
    fallback: Literal["chars", "none"] = Field("chars", description="used when the head or service fails")
    chars_per_token: float = Field(4.0, description="chars: prompt characters per token")
    factor: float = Field(1.0, description="chars: predicted output tokens per prompt token")
    spread: float = Field(0.5, description="relative spread (sd / mean) assumed when a prediction has no quantiles")
    max_batch: int = Field(64, description="head: micro-batch size")
    max_wait_ms: float = Field(2.0, description="head: longest wait to fill a micro-batch")

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return None if v is None else normalize_url(v, "estimator url")

    @model_validator(mode="after")
    def _check(self) -> EstimatorConfig:
        if self.kind in ("head", "inline") and not self.head:
            raise ConfigError(f"estimator.head is required for kind {self.kind!r}", "give the head's directory")
        if self.kind == "remote" and not self.url:
            raise ConfigError("estimator.url is required for kind 'remote'", "give the `lenpred serve` URL")
        _positive("estimator", timeout_s=self.timeout_s, chars_per_token=self.chars_per_token,
                  factor=self.factor, max_wait_ms=self.max_wait_ms, inline_p50_ms=self.inline_p50_ms,
                  inline_p99_ms=self.inline_p99_ms)
        if not (math.isfinite(self.runtime_tolerance) and self.runtime_tolerance >= 0):
            raise ConfigError(f"estimator.runtime_tolerance must be >= 0, got {self.runtime_tolerance!r}", "set it to 0 or more")
        if self.inline_check_calls < 1:
            raise ConfigError(f"estimator.inline_check_calls must be >= 1, got {self.inline_check_calls}", "set it to 1 or more (default 200)")
        if self.inline_max_batch < 1:
            raise ConfigError(f"estimator.inline_max_batch must be >= 1, got {self.inline_max_batch}", "set it to 1 or more")
        if not (math.isfinite(self.retry_after_s) and self.retry_after_s >= 0):
            raise ConfigError(f"estimator.retry_after_s must be >= 0, got {self.retry_after_s!r}", "set it to 0 or more seconds")
        if not (math.isfinite(self.spread) and self.spread >= 0):
            raise ConfigError(f"estimator.spread must be >= 0, got {self.spread!r}", "set it to 0 or more tokens")
        if self.max_batch < 1:
            raise ConfigError(f"estimator.max_batch must be >= 1, got {self.max_batch}", "set it to 1 or more")
        return self


# estimators whose answer is a model's prediction of the output length; chars (a prompt-length guess) and
# none are not; the default queue ("auto", ROUTER_DEFAULT) orders by arrival after either since issue 37
PREDICTING_ESTIMATORS = ("inline", "head", "remote")


def router_queues() -> list[str]:
    """The queue policies a router can run (:attr:`lenpred.sched.queue.QueuePolicy.routable`: a key known
    when the request arrives, which the router's wait queue and a backend's static priority field carry)."""
    return [n for n in QUEUE_POLICIES.names() if QUEUE_POLICIES.get(n).routable]


class CalibrateConfig(Config):
    """gboost's online calibration (``gamma`` / ``s_per_token`` "auto"): :mod:`lenpred.route.calibrate`."""

    min_completions: int = Field(16, description="completions measured before the measured values replace the "
                                                 "defaults (lenpred.sched.boost.GAMMA, S_PER_TOKEN) or pinned ones")
    every_n: int = Field(32, description="recompute after this many completions since the last time ...")
    every_s: float = Field(5.0, description="... or this many seconds, whichever comes first (on a completion)")
    window: int = Field(256, description="completions kept: the median seconds per token, the service samples")
    rate_window_s: float = Field(60.0, description="seconds of arrivals the arrival rate is measured over")

    @model_validator(mode="after")
    def _check(self) -> CalibrateConfig:
        for k in ("min_completions", "every_n", "window"):
            if getattr(self, k) < 1:
                raise ConfigError(f"priority.calibrate.{k} must be >= 1, got {getattr(self, k)}", f"set priority.calibrate.{k} to 1 or more")
        if self.min_completions > self.window:
            raise ConfigError(f"priority.calibrate.min_completions ({self.min_completions}) is above window "
                              f"({self.window})", "keep min_completions <= window")
        _positive("priority.calibrate", every_s=self.every_s, rate_window_s=self.rate_window_s)
        return self


class PriorityConfig(Config):
    """How the router orders requests: its own wait queue, and the backend's priority field.

    ``queue`` is a queue policy a router can run (:attr:`lenpred.sched.queue.QueuePolicy.routable`: its
    key is known at arrival) with its parameters, the same typed object a simulator arm's ``queue`` is
    (:data:`lenpred.sched.params.QueueParams`; defaults and ranges are the policy's own), or ``auto``:

    * ``auto`` (the default, :data:`lenpred.sched.recommended.ROUTER_DEFAULT`): ``fcfs`` whether the
      estimator gives a model's prediction (kinds inline, head, remote) or not (chars, none), since issue 37
      (it was ``gboost`` after a prediction): :meth:`RouterConfig.queue_policy`;
    * ``fcfs``: the arrival;
    * ``boost2``: the arrival minus ``boost_s`` seconds when the predicted output is under
      ``short_threshold`` tokens (a two-class boost);
    * ``gboost``: the arrival minus gamma-Boost's boost of the prediction (a normal of the predicted
      tokens and spread, or a point mass without a spread), with ``gamma`` (1/s) and ``s_per_token``
      (a backend's seconds per token at a full batch) measured from the router's traffic ("auto", the
      default: :mod:`lenpred.route.calibrate`) or as given: :mod:`lenpred.sched.boost`;
    * ``sjf``: ``predicted + quantile_z * spread + aging * seconds since the router started`` (a long
      request gains ``aging`` tokens of priority per second it waits).

    A policy's parameters may also be given beside ``queue`` (``{"queue": "sjf", "aging": 1000}``): they
    are read into it. The same key orders the router's wait queue and the backend's field: a time key
    (:attr:`~lenpred.sched.queue.QueuePolicy.key_unit` "s": fcfs, boost2, gboost) as milliseconds since the
    router started, a token key (sjf) as ``round(key / tokens_per_level)``; either clipped to [min, max].
    vLLM and SGLang serve the lowest value first. The field is sent only when ``enabled`` is true, or when
    it is null and ``queue`` names a policy other than fcfs (not for ``auto``: a vLLM started without
    ``--scheduling-policy priority`` refuses a non-zero priority).
    """

    queue: QueueParams | Literal["auto"] = Field(
        "auto", description='queue policy: auto (fcfs, with a prediction or '
                                             'without: lenpred.sched.recommended.ROUTER_DEFAULT), or one a router can run with its parameters, '
                                             '{"name": "sjf", "aging": 1000}, or its name alone (fcfs, gboost, '
                                             'boost2, sjf)')
    enabled: bool | None = Field(None, description="send the priority field: true, false, or null = only when "
                                                   "queue is set explicitly to a policy other than fcfs (never "
                                                   "for auto: vLLM refuses the field unless started with "
                                                   "--scheduling-policy priority)")
    field: str = Field("priority", description="the request field to set (vLLM and SGLang: priority)")
    tokens_per_level: float = Field(1.0, description="predicted tokens per priority step (a token-keyed queue: sjf)")
    calibrate: CalibrateConfig = Field(default_factory=CalibrateConfig)
    min: int | None = Field(None, description="lowest value sent (None: unbounded)")
    max: int | None = Field(None, description="highest value sent (None: unbounded)")

    @model_validator(mode="before")
    @classmethod
    def _flat(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for k in ("gamma", "s_per_token"):  # null meant "the library's fixed number" here before (issue 39)
            if k in data and data[k] is None:
                raise FieldError(f"{k} null is not a setting (it was the library's fixed default)",
                                 f"give {k} as \"auto\" (measured) or pin it to a number > 0 "
                                 "(lenpred.sched.boost.GAMMA = 2.5, S_PER_TOKEN = 6.6e-05 were the fixed ones)")
        given = sorted(k for k in data if k in FLAT_KEYS)
        q = data.get("queue", ROUTER_DEFAULT["queue"])
        if given and isinstance(q, str) and q.strip().lower() == "auto":
            raise FieldError(f"{given[0]} is a parameter of a named queue policy, and queue 'auto' takes "
                             "none", f"name the policy: \"queue\": {{\"name\": \"gboost\", \"{given[0]}\": ...}}")
        return with_flat_keys(data, default=ROUTER_DEFAULT["queue"])

    @field_validator("queue", mode="before")
    @classmethod
    def _queue(cls, v: Any) -> Any:
        if isinstance(v, str) and v.strip().lower() == "auto":
            return "auto"
        name = v.get("name") if isinstance(v, dict) else v.name if isinstance(v, PolicyParams) else v
        if isinstance(name, str) and name in QUEUE_POLICIES and not QUEUE_POLICIES.get(name).routable:
            raise FieldError(f"queue policy {name!r} cannot order the router's queue: its key changes while a "
                             "request waits or runs (attained service, re-predictions, the time), and the router "
                             "orders a request once, before it starts", f"use one of: auto, {', '.join(router_queues())} "
                             "(the engine's own scheduler does the rest)")
        if isinstance(name, str) and name not in QUEUE_POLICIES:
            raise FieldError(f"unknown queue policy {name!r}", f"use one of: auto, {', '.join(router_queues())}")
        params = queue_params(v)
        if params.preempt:
            raise FieldError(f"policy {params.name!r}: preempt is preemption at a decode instance, which a router does "
                             "not run", "drop preempt (the backend's own scheduler preempts)")
        return params

    def resolve(self, estimator_kind: str) -> PolicyParams:
        """The queue policy (with its parameters) run after an estimator of ``estimator_kind`` (``auto``
        resolved: the policy's defaults)."""
        if isinstance(self.queue, PolicyParams):
            return self.queue
        return queue_params(ROUTER_DEFAULT["with_prediction" if estimator_kind in PREDICTING_ESTIMATORS
                                          else "without_prediction"])

    @property
    def sends(self) -> bool:
        """Whether the priority field is sent (``enabled``, or by default only for a queue set explicitly to a
        policy other than fcfs)."""
        if self.enabled is not None:
            return self.enabled
        return isinstance(self.queue, PolicyParams) and self.queue.name != "fcfs"

    @model_validator(mode="after")
    def _check(self) -> PriorityConfig:
        if not self.field.strip():
            raise ConfigError("priority.field is empty", "use the backend's field name, e.g. priority")
        _positive("priority", tokens_per_level=self.tokens_per_level)
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ConfigError(f"priority.min ({self.min}) is above priority.max ({self.max})", "swap them, or widen the range")
        return self


class TimeoutConfig(Config):
    """Timeouts (seconds): on the way to a backend, and the drain of a stop."""

    connect_s: float = Field(2.0, description="opening a connection")
    read_s: float = Field(60.0, description="waiting for the first byte or between two chunks")
    total_s: float = Field(600.0, description="a whole request, streamed or not")
    drain_s: float = Field(5.0, description="on SIGINT / SIGTERM: how long the requests in flight may still run; "
                                            "then the router ends them (a stream with an SSE error event and "
                                            "[DONE], any other with a 503 error)")

    @model_validator(mode="after")
    def _check(self) -> TimeoutConfig:
        _positive("timeouts", connect_s=self.connect_s, read_s=self.read_s, total_s=self.total_s)
        if not (math.isfinite(self.drain_s) and self.drain_s >= 0):
            raise ConfigError(f"timeouts.drain_s must be >= 0, got {self.drain_s!r}", "set it to 0 (no drain) or more seconds")
        return self


class HealthConfig(Config):
    """Active health checks: a backend that fails is taken out, one that answers again comes back."""

    interval_s: float = Field(2.0, description="seconds between two checks of a backend")
    path: str = Field("/v1/models", description="GET path checked (also refreshes the model list)")
    timeout_s: float = Field(2.0, description="a check slower than this fails")
    fail_after: int = Field(2, description="consecutive failed checks that take a backend out")
    recover_after: int = Field(1, description="consecutive good checks that bring it back")

    @model_validator(mode="after")
    def _check(self) -> HealthConfig:
        _positive("health", interval_s=self.interval_s, timeout_s=self.timeout_s)
        if not self.path.startswith("/"):
            raise ConfigError(f"health.path must start with '/', got {self.path!r}", "give a path on the backend, e.g. /health or /v1/models")
        if self.fail_after < 1 or self.recover_after < 1:
            raise ConfigError("health.fail_after and health.recover_after must be >= 1", "set both to 1 or more checks")
        return self


class LimitsConfig(Config):
    """Bounds that keep the router itself safe."""

    max_body_bytes: int = Field(4 * 1024 * 1024, description="larger request bodies get HTTP 413")
    max_queued: int = Field(1024, description="requests waiting for a free backend slot; more get HTTP 429")
    queue_timeout_s: float = Field(30.0, description="a request waiting longer for a slot gets HTTP 503")
    max_attempts: int = Field(3, description="backends tried for one request before it is not yet streaming")

    @model_validator(mode="after")
    def _check(self) -> LimitsConfig:
        if self.max_body_bytes < 1024:
            raise ConfigError(f"limits.max_body_bytes must be >= 1024, got {self.max_body_bytes}", "set it to 1024 bytes or more")
        if self.max_queued < 0:
            raise ConfigError(f"limits.max_queued must be >= 0, got {self.max_queued}", "set it to 0 (no queue) or more")
        if self.max_attempts < 1:
            raise ConfigError(f"limits.max_attempts must be >= 1, got {self.max_attempts}", "set it to 1 (no retry) or more")
        _positive("limits", queue_timeout_s=self.queue_timeout_s)
        return self


class HintsConfig(Config):
    """The prediction as request metadata for the serving layer behind the router (the
    ``x-lenpred-predicted-tokens`` header is always sent)."""

    osl: StrictBool = Field(False, description="set nvext.agent_hints.osl (NVIDIA Dynamo: expected output tokens, for "
                                         "its router's output-block tracking) unless the client set it")


class GcConfig(Config):
    """The garbage collector of the router's long-lived process: set once the router has started, put back
    as it was when it stops (docs/route.md, "The router's own loop", has the measurements)."""

    freeze: StrictBool = Field(True, description="after start-up, move every object then alive (FastAPI, pydantic, a "
                                           "head) out of the collector's sight (gc.freeze)")
    thresholds: tuple[int, int, int] | None = Field(
        GC_THRESHOLDS, description="gc.set_threshold while serving: allocations between two young collections, "
                                   "then young collections per middle one, middle per full; null keeps Python's "
                                   "(700, 10, 10)")

    @model_validator(mode="after")
    def _check(self) -> GcConfig:
        if self.thresholds is not None and (self.thresholds[0] < 100 or min(self.thresholds[1:]) < 1):
            raise ConfigError(f"gc.thresholds must be [>= 100, >= 1, >= 1], got {list(self.thresholds)}",
                              "use e.g. [700, 10, 10] (Python's default), or null to leave the collector as it is")
        return self


class RouterConfig(Config):
    """The whole router: ``lenpred route --config FILE``."""

    mode: Literal["route", "annotate"] = Field(
        "route", description="route: dispatch over the backends; annotate: predict, add the header and the "
                             "priority, forward to the single backend (a sidecar in front of llm-d or a gateway)")
    host: str = Field("127.0.0.1", description="address to listen on")
    port: int = Field(8200, description="port to listen on")
    policy: str = Field(ROUTER_DEFAULT["dispatch"], description="dispatch policy (lenpred.sched.dispatch.DISPATCHERS); "
                                                              "default: least-requests (issue 37: with late binding, the yardstick's best)")
    seed: int = Field(0, description="seed of the random choices (power-of-two)")
    default_tokens: float = Field(256.0, description="load counted for a request without a prediction")
    prompt_weight: float = Field(0.0, description="prompt tokens count this much each in a backend's outstanding "
                                                  "tokens until the first token comes back (prefill work; ~0.01 on "
                                                  "a GPU, ~0.5 for llama.cpp on a CPU)")
    backends: tuple[BackendConfig, ...] = Field((), description="the OpenAI-compatible servers (at least one)")
    estimator: EstimatorConfig = Field(default_factory=EstimatorConfig)
    priority: PriorityConfig = Field(default_factory=PriorityConfig)
    timeouts: TimeoutConfig = Field(default_factory=TimeoutConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    log_requests: StrictBool = Field(True, description="one log line per request (id, backend, prediction, outcome)")
    gc: GcConfig = Field(default_factory=GcConfig)
    hints: HintsConfig = Field(default_factory=HintsConfig)

    @field_validator("policy")
    @classmethod
    def _policy(cls, v: str) -> str:
        if v not in DISPATCHERS:
            raise FieldError(f"unknown policy {v!r}", f"use one of: {', '.join(DISPATCHERS.names())}")
        return v

    @model_validator(mode="after")
    def _check(self) -> RouterConfig:
        if not self.backends:
            raise ConfigError("backends is empty", "list at least one backend: [{\"url\": \"http://host:port\"}]")
        if self.mode == "annotate" and len(self.backends) != 1:
            raise ConfigError(f"mode 'annotate' forwards to one upstream, got {len(self.backends)} backends",
                              "list exactly one backend, or use mode 'route'")
        urls = [b.base for b in self.backends]
        same = sorted({u for u in urls if urls.count(u) > 1})
        if same:  # two names for one server would double its share of the traffic and its in-flight count
            raise ConfigError(f"backend url {same[0]!r} is listed {urls.count(same[0])} times",
                              "list each server once (give it one name), or fix the URL of the other one")
        labels = [b.label for b in self.backends]
        dup = sorted({x for x in labels if labels.count(x) > 1})
        if dup:
            raise ConfigError(f"backend name {dup[0]!r} is used twice", "give each backend its own name or URL")
        if not 0 < self.port < 65536:
            raise ConfigError(f"port must be 1..65535, got {self.port}", "pick a free port, e.g. 8080")
        _positive("router", default_tokens=self.default_tokens)
        if not (math.isfinite(self.prompt_weight) and self.prompt_weight >= 0):
            raise ConfigError(f"prompt_weight must be >= 0, got {self.prompt_weight!r}", "set it to 0 (ignore prompts) or more")
        q = QUEUE_POLICIES.get(self.queue_policy.name)
        if (q.needs_dist or q.needs_prediction) and self.estimator.kind == "none":
            needs = "a predictive distribution (a prediction and its spread)" if q.needs_dist else "a prediction"
            raise ConfigError(f"priority.queue {q.name!r} needs {needs}, and estimator kind 'none' gives none",
                              "set estimator.kind to inline, head, remote or chars, or priority.queue to fcfs")
        if q.needs_dist and self.estimator.kind == "chars" and self.estimator.spread == 0:
            raise ConfigError(f"priority.queue {q.name!r} needs a predictive distribution, and estimator kind "
                              "'chars' with spread 0 gives a point",
                              "set estimator.spread > 0 (sd / mean, e.g. 0.5), or use a head's prediction")
        # asked for by name only: the default dispatcher with no estimator sees default_tokens per request
        # (least requests, weighted by n), as before
        if "policy" in self.model_fields_set and DISPATCHERS.get(self.policy).needs_prediction \
                and self.estimator.kind == "none":
            raise ConfigError(f"policy {self.policy!r} dispatches by predicted tokens, and estimator kind 'none' "
                              "gives no prediction", "set estimator.kind to inline, head, remote or chars, or "
                              "policy to least-requests (or another dispatcher that reads no prediction)")
        return self

    @property
    def queue_policy(self) -> PolicyParams:
        """The queue policy the router runs, with its parameters: ``priority.queue``, with ``auto`` resolved by
        the estimator's kind (:data:`lenpred.sched.recommended.ROUTER_DEFAULT`: fcfs after either since issue 37)."""
        return self.priority.resolve(self.estimator.kind)
