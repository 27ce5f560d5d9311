"""Frozen, validating configuration for the simulator (written as JSON beside every result).

A config file is JSON with these sections (every field has a default; unknown keys are errors)::

    {"name": ..., "seed": 0,
     "cluster":    {mode, n_prefill, n_decode, n_instances, profile, kv_capacity_tokens, ...},
     "workload":   {"n_requests": ..., "arrival": {process, rate, cv}, "lengths": {source, ...}},
     "prediction": {model, rel_mae, mae, repredict_every},       # default for every arm
     "policies":   [{name, queue, dispatch, prefill_queue, prefill_dispatch, aging, prediction}],
     "sweep":      {loads, load_unit, baseline, probe_requests},
     "metrics":    {short_threshold, slo_ttft_s, slo_tpot_s}}

Constructors only validate; nothing here touches files or registries' contents beyond names.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from lenpred.errors import ConfigError

MODES = ("disaggregated", "colocated")
PREEMPTION = ("recompute", "swap")
ARRIVALS = ("poisson", "gamma", "trace", "burst")
LENGTH_SOURCES = ("synthetic", "sharegpt", "rundir", "trace")
PREDICTION_MODELS = ("oracle", "lognormal", "additive", "input", "constant", "prompt-median")
LOAD_UNITS = ("req/s", "capacity")


def _positive(where: str, **values: float | None) -> None:
    for k, v in values.items():
        if v is not None and not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
            raise ConfigError(f"{where}.{k} must be a positive number, got {v!r}")


def _choice(where: str, key: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ConfigError(f"{where}.{key}: unknown value {value!r}", f"use one of: {', '.join(valid)}")


class _FromDict:
    """Mixin: build a frozen dataclass from a mapping, rejecting unknown keys with the valid list."""

    _nested: ClassVar[dict[str, type]] = {}
    _nested_list: ClassVar[dict[str, type]] = {}

    @classmethod
    def from_dict(cls, data: Any, where: str | None = None) -> Any:
        where = where or cls.__name__
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise ConfigError(f"{where} must be a JSON object, got {type(data).__name__}")
        names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {unknown}", f"valid keys: {', '.join(names)}")
        kw: dict[str, Any] = {}
        for k, v in data.items():
            if k in cls._nested and v is not None:
                kw[k] = cls._nested[k].from_dict(v, f"{where}.{k}")  # type: ignore[attr-defined]
            elif k in cls._nested_list:
                if not isinstance(v, list):
                    raise ConfigError(f"{where}.{k} must be a list")
                sub = cls._nested_list[k]
                kw[k] = tuple(sub.from_dict(x, f"{where}.{k}[{i}]") for i, x in enumerate(v))  # type: ignore[attr-defined]
            elif isinstance(v, list):
                kw[k] = tuple(v)
            else:
                kw[k] = v
        try:
            return cls(**kw)
        except TypeError as e:
            raise ConfigError(f"{where}: {e}") from e

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]


@dataclass(frozen=True)
class ClusterConfig(_FromDict):
    mode: str = "disaggregated"
    n_prefill: int = 1  # disaggregated: prefill instances
    n_decode: int = 1  # disaggregated: decode instances
    n_instances: int = 1  # colocated: instances doing both
    profile: str = "llama8b-h100"
    kv_capacity_tokens: int | None = None  # override the profile's KV slots per instance
    max_batch: int | None = None  # override: sequences per decode step
    max_prefill_tokens: int | None = None  # override: tokens per prefill batch
    preemption: str = "recompute"
    watermark: float = 0.01  # share of KV kept free when admitting (vLLM keeps 1%)
    link_gbps: float = 25.0  # KV transfer bandwidth into one decode instance, GB/s
    link_latency_s: float = 0.0  # fixed cost per KV transfer
    swap_gbps: float = 25.0  # device <-> host bandwidth for swap preemption, GB/s

    def __post_init__(self) -> None:
        w = "cluster"
        _choice(w, "mode", self.mode, MODES)
        _choice(w, "preemption", self.preemption, PREEMPTION)
        for k in ("n_prefill", "n_decode", "n_instances"):
            v = getattr(self, k)
            if not isinstance(v, int) or v < 1:
                raise ConfigError(f"{w}.{k} must be an integer >= 1, got {v!r}")
        _positive(w, kv_capacity_tokens=self.kv_capacity_tokens, max_batch=self.max_batch,
                  max_prefill_tokens=self.max_prefill_tokens, link_gbps=self.link_gbps,
                  swap_gbps=self.swap_gbps)
        if not 0.0 <= self.watermark < 0.5:
            raise ConfigError(f"{w}.watermark must be in [0, 0.5), got {self.watermark}")
        if self.link_latency_s < 0:
            raise ConfigError(f"{w}.link_latency_s must be >= 0")


@dataclass(frozen=True)
class PredictionConfig(_FromDict):
    """How predicted lengths are made when no trained predictor is plugged in.

    oracle: the true length. lognormal: true * exp(sigma Z) with sigma set so that
    MAE / mean(true) = rel_mae. additive: true + N(0, s) with E|err| = mae (or rel_mae * mean(true)),
    floored at 1. input: the ``predicted_tokens`` column of a trace. constant: the mean true length
    (a length-blind baseline). prompt-median: run-directory workloads only, the median length of the
    prompt's *other* samples (the per-prompt oracle of the bound).
    ``repredict_every``: re-predict the remaining length every k generated tokens with the same
    noise model applied to the true remaining length.
    """

    model: str = "lognormal"
    rel_mae: float | None = 0.30  # relative MAE (MAE / mean true length); 0.30 until measured
    mae: float | None = None  # absolute MAE in tokens; wins over rel_mae when set
    repredict_every: int | None = None

    def __post_init__(self) -> None:
        _choice("prediction", "model", self.model, PREDICTION_MODELS)
        if self.rel_mae is not None and not (math.isfinite(self.rel_mae) and self.rel_mae >= 0):
            raise ConfigError(f"prediction.rel_mae must be >= 0, got {self.rel_mae}")
        if self.mae is not None and not (math.isfinite(self.mae) and self.mae >= 0):
            raise ConfigError(f"prediction.mae must be >= 0, got {self.mae}")
        if self.model in ("lognormal", "additive") and self.rel_mae is None and self.mae is None:
            raise ConfigError(f"prediction model {self.model!r} needs rel_mae or mae")
        if self.model == "lognormal" and self.mae is not None:
            raise ConfigError("prediction model 'lognormal' takes rel_mae (multiplicative), not mae",
                              "use model 'additive' for an absolute MAE")
        if self.repredict_every is not None and (not isinstance(self.repredict_every, int)
                                                 or self.repredict_every < 1):
            raise ConfigError(f"prediction.repredict_every must be an integer >= 1, got {self.repredict_every!r}")


@dataclass(frozen=True)
class PolicyConfig(_FromDict):
    """One arm of an experiment: queue order + dispatch (+ its own predictions if given)."""

    name: str = "fcfs-rr"
    queue: str = "fcfs"  # at decode (and colocated) instances
    dispatch: str = "round-robin"  # to decode (and colocated) instances
    prefill_queue: str | None = None  # default: same as queue
    prefill_dispatch: str | None = None  # default: same as dispatch
    aging: float = 0.0  # tokens per second of waiting (size-based queues)
    quantile_z: float = 0.0  # sjf orders by pred + z * spread
    prediction: PredictionConfig | None = None  # default: the config's top-level prediction

    _nested: ClassVar[dict[str, type]] = {"prediction": PredictionConfig}

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ConfigError("every policy needs a non-empty name")
        if self.aging < 0:
            raise ConfigError(f"policy {self.name!r}: aging must be >= 0")


@dataclass(frozen=True)
class ArrivalConfig(_FromDict):
    process: str = "poisson"  # poisson | gamma (bursty, coefficient of variation cv) | trace | burst
    rate: float = 1.0  # requests per second (ignored by burst; rescales a trace)
    cv: float = 1.0  # gamma inter-arrival coefficient of variation (1 = Poisson)

    def __post_init__(self) -> None:
        _choice("workload.arrival", "process", self.process, ARRIVALS)
        if not (isinstance(self.rate, int | float) and math.isfinite(self.rate) and self.rate > 0):
            raise ConfigError(
                f"workload.arrival.rate must be > 0 requests/s, got {self.rate!r}",
                "an arrival rate of 0 never sends a request; use process 'burst' for all at t=0",
            )
        _positive("workload.arrival", cv=self.cv)


@dataclass(frozen=True)
class LengthConfig(_FromDict):
    source: str = "synthetic"
    path: str | None = None  # rundir / trace
    tokenizer: str = "smollm2-135m"  # sharegpt
    # synthetic: lognormal prompt and output lengths (median, log-sd)
    prompt_median: float = 200.0
    prompt_sigma: float = 0.8
    output_median: float = 200.0
    output_sigma: float = 0.9
    # filters (sharegpt follows vLLM's benchmark sampling: drop < 4 tokens, prompt <= 1024,
    # prompt + output <= 2048)
    min_tokens: int = 4
    max_prompt_tokens: int = 1024
    max_total_tokens: int = 2048
    include_truncated: bool = True  # rundir: keep samples stopped by max_new_tokens (a server stops there too)

    def __post_init__(self) -> None:
        w = "workload.lengths"
        _choice(w, "source", self.source, LENGTH_SOURCES)
        if self.source in ("rundir", "trace") and not self.path:
            raise ConfigError(f"{w}.path is required for source {self.source!r}")
        _positive(w, prompt_median=self.prompt_median, output_median=self.output_median,
                  prompt_sigma=self.prompt_sigma, output_sigma=self.output_sigma,
                  max_prompt_tokens=self.max_prompt_tokens, max_total_tokens=self.max_total_tokens)
        if self.min_tokens < 1:
            raise ConfigError(f"{w}.min_tokens must be >= 1")


@dataclass(frozen=True)
class WorkloadConfig(_FromDict):
    n_requests: int = 1000
    arrival: ArrivalConfig = field(default_factory=ArrivalConfig)
    lengths: LengthConfig = field(default_factory=LengthConfig)

    _nested: ClassVar[dict[str, type]] = {"arrival": ArrivalConfig, "lengths": LengthConfig}

    def __post_init__(self) -> None:
        if not isinstance(self.n_requests, int) or self.n_requests < 1:
            raise ConfigError(f"workload.n_requests must be an integer >= 1, got {self.n_requests!r}")


@dataclass(frozen=True)
class SweepConfig(_FromDict):
    loads: tuple[float, ...] = ()  # empty: one run at workload.arrival.rate
    load_unit: str = "req/s"  # or "capacity": multiples of the measured saturation throughput
    baseline: str | None = None  # arm the others are compared with (default: the first)
    probe_requests: int = 4000  # requests in the saturation probe (at least 5x the decode batch slots)

    def __post_init__(self) -> None:
        _choice("sweep", "load_unit", self.load_unit, LOAD_UNITS)
        for x in self.loads:
            if not (isinstance(x, int | float) and math.isfinite(x) and x > 0):
                raise ConfigError(f"sweep.loads must all be > 0, got {x!r}",
                                  "an arrival rate of 0 never sends a request")
        if self.probe_requests < 10:
            raise ConfigError("sweep.probe_requests must be >= 10")


@dataclass(frozen=True)
class MetricsConfig(_FromDict):
    short_threshold: float | None = None  # output tokens; None: the median true output length
    slo_ttft_s: float = 0.25  # DistServe's chatbot SLO for OPT-13B on ShareGPT
    slo_tpot_s: float = 0.10

    def __post_init__(self) -> None:
        _positive("metrics", short_threshold=self.short_threshold, slo_ttft_s=self.slo_ttft_s,
                  slo_tpot_s=self.slo_tpot_s)


@dataclass(frozen=True)
class SimConfig(_FromDict):
    name: str = "sim"
    seed: int = 0
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    prediction: PredictionConfig = field(default_factory=PredictionConfig)
    policies: tuple[PolicyConfig, ...] = (PolicyConfig(),)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    plots: bool = True

    _nested: ClassVar[dict[str, type]] = {
        "cluster": ClusterConfig, "workload": WorkloadConfig, "prediction": PredictionConfig,
        "sweep": SweepConfig, "metrics": MetricsConfig,
    }
    _nested_list: ClassVar[dict[str, type]] = {"policies": PolicyConfig}

    def __post_init__(self) -> None:
        if not self.policies:
            raise ConfigError("policies must list at least one arm")
        names = [p.name for p in self.policies]
        if len(set(names)) != len(names):
            raise ConfigError(f"policy names must be unique, got {names}")
        if self.sweep.baseline is not None and self.sweep.baseline not in names:
            raise ConfigError(f"sweep.baseline {self.sweep.baseline!r} is not a policy name",
                              f"use one of: {', '.join(names)}")
        if not isinstance(self.seed, int):
            raise ConfigError(f"seed must be an integer, got {self.seed!r}")

    def prediction_for(self, policy: PolicyConfig) -> PredictionConfig:
        return policy.prediction or self.prediction

    @classmethod
    def load(cls, path: str | Path) -> SimConfig:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {p} not found")
        try:
            data = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise ConfigError(f"{p} is not valid JSON ({e})") from e
        return cls.from_dict(data, "config")

    def replace(self, **kw: Any) -> SimConfig:
        return dataclasses.replace(self, **kw)
