"""Frozen, validating configuration for the simulator (written as JSON beside every result).

A config file is JSON with these sections (every field has a default; unknown keys are errors that
list the valid ones)::

    {"name": ..., "seed": 0,
     "cluster":    {mode, n_prefill, n_decode, n_instances, profile, kv_capacity_tokens, ...},
     "workload":   {"n_requests": ..., "arrival": {process, rate, cv}, "lengths": {source, ...}},
     "prediction": {model, rel_mae, mae, repredict_every, path},     # default for every arm
     "policies":   [{name, queue: {name, ...its parameters}, dispatch, prefill_queue, prefill_dispatch,
                     victim, admission, prediction}],
     "sweep":      {loads, load_unit, baseline, probe_requests},
     "metrics":    {short_threshold, slo_ttft_s, slo_tpot_s}}

An arm (a ``policies`` entry, and the ``prediction`` sections) is :mod:`lenpred.sim.arm`'s; its ``queue`` is
:data:`lenpred.sched.params.QueueParams` (flat keys beside it are read too). Every section is
a :class:`lenpred.config.Config` (pydantic v2: frozen, unknown keys refused, one-line errors naming the field,
``json_schema()``). Validation only: nothing here reads files or looks inside registries beyond their names.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator

from lenpred.checks import check_limit
from lenpred.config import Config
from lenpred.errors import ConfigError
from lenpred.sim.arm import (
    ADMISSIONS,
    TABLE_MODELS,
    VICTIMS,
    ArmPolicy,
    PolicyConfig,
    PredictionConfig,
    policies_for,
    prediction_models,
    recommended_policy,
)

MODES = ("disaggregated", "colocated")
PREEMPTION = ("recompute", "swap")
ARRIVALS = ("poisson", "gamma", "trace", "burst", "episode")
EPISODE_INNER = ("poisson", "gamma")  # the stationary process inside an episode
EPISODE_FIELDS = ("inner", "burst_factor", "burst_start_s", "burst_s", "tail_s")
# a load in capacity units above this is almost surely a rate in requests/s (at 4x capacity the
# backlog already grows three times faster than the cluster serves)
MAX_CAPACITY_LOAD = 4.0
LENGTH_SOURCES = ("synthetic", "sharegpt", "rundir", "trace")
SPLIT_ROLES = ("train", "val", "test")  # lenpred.data.split.ROLES (not imported: config reads no data)
LOAD_UNITS = ("req/s", "capacity")
MIX_FIELDS = ("mix_short_share", "mix_short_below", "mix_long_above")
MIX_SOURCES = ("rundir", "sharegpt")  # the sources drawn from a pool of samples


def _positive(where: str, **values: float | None) -> None:
    for k, v in values.items():
        if v is not None and not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
            raise ConfigError(f"{where}.{k} must be a positive number, got {v!r}", f"set {where}.{k} to a number > 0")


def _choice(where: str, key: str, value: str, valid: tuple[str, ...] | list[str]) -> None:
    if value not in valid:
        raise ConfigError(f"{where}.{key}: unknown value {value!r}", f"use one of: {', '.join(valid)}")


class ClusterConfig(Config):
    mode: str = Field("disaggregated", description="disaggregated (prefill + decode pools) or colocated")
    n_prefill: int = Field(1, description="disaggregated: prefill instances")
    n_decode: int = Field(1, description="disaggregated: decode instances")
    n_instances: int = Field(1, description="colocated: instances doing both")
    profile: str = Field("llama8b-h100", description="latency profile name, or a profile .json file")
    kv_capacity_tokens: int | None = Field(None, description="override the profile's KV slots per instance")
    max_batch: int | None = Field(None, description="override: sequences per decode step")
    max_prefill_tokens: int | None = Field(None, description="override: tokens per prefill batch")
    preemption: str = Field("recompute", description="recompute or swap")
    watermark: float = Field(0.01, description="share of KV kept free when admitting (vLLM keeps 1%)")
    link_gbps: float = Field(25.0, description="KV transfer bandwidth into one decode instance, GB/s")
    link_latency_s: float = Field(0.0, description="fixed cost per KV transfer, s")
    swap_gbps: float = Field(25.0, description="device <-> host bandwidth for swap preemption, GB/s")
    decode_speeds: tuple[float, ...] | None = Field(
        None, description="heterogeneous decode instances: one speed per decode (colocated: per) instance, e.g. "
        "[1, 1, 2, 2]; a step's compute time is divided by it (2 = twice as fast). Unset: all equal (1)")

    @model_serializer(mode="wrap")
    def _unset_left_out(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``decode_speeds`` is written only when set: a cluster without it reads and writes as before."""
        d = handler(self)
        if d.get("decode_speeds", 0) is None:
            del d["decode_speeds"]
        return d

    @property
    def speeds(self) -> tuple[float, ...]:
        """Each decode (colocated: each) instance's speed, 1.0 where ``decode_speeds`` is unset."""
        n = self.n_instances if self.mode == "colocated" else self.n_decode
        return self.decode_speeds if self.decode_speeds is not None else (1.0,) * n

    @model_validator(mode="after")
    def _check(self) -> ClusterConfig:
        w = "cluster"
        _choice(w, "mode", self.mode, MODES)
        _choice(w, "preemption", self.preemption, PREEMPTION)
        for k in ("n_prefill", "n_decode", "n_instances"):
            if getattr(self, k) < 1:
                raise ConfigError(f"{w}.{k} must be an integer >= 1, got {getattr(self, k)!r}", f"set {w}.{k} to 1 or more")
        _positive(w, kv_capacity_tokens=self.kv_capacity_tokens, max_batch=self.max_batch,
                  max_prefill_tokens=self.max_prefill_tokens, link_gbps=self.link_gbps,
                  swap_gbps=self.swap_gbps)
        if not 0.0 <= self.watermark < 0.5:
            raise ConfigError(f"{w}.watermark must be in [0, 0.5), got {self.watermark}",
                              f"set {w}.watermark to a fraction of the KV cache from 0 to below 0.5, e.g. 0.01")
        if not (math.isfinite(self.link_latency_s) and self.link_latency_s >= 0):
            raise ConfigError(f"{w}.link_latency_s must be >= 0, got {self.link_latency_s}",
                              f"set {w}.link_latency_s to 0 or more seconds")
        self._check_speeds(w)
        return self

    def _check_speeds(self, w: str) -> None:
        if self.decode_speeds is None:
            return
        key, n = ("n_instances", self.n_instances) if self.mode == "colocated" else ("n_decode", self.n_decode)
        if len(self.decode_speeds) != n:
            raise ConfigError(
                f"{w}.decode_speeds has {len(self.decode_speeds)} value(s), the cluster has {key} = {n}",
                f"give one speed per {'instance' if key == 'n_instances' else 'decode instance'} ({n} numbers, "
                f"e.g. [{', '.join(['1'] * (n - n // 2) + ['2'] * (n // 2))}]), or leave {w}.decode_speeds unset")
        bad = [x for x in self.decode_speeds if not (math.isfinite(x) and x > 0)]
        if bad:
            raise ConfigError(f"{w}.decode_speeds must all be positive numbers, got {bad[0]!r}",
                              "give each instance a speed > 0 (1 = the profile's speed, 2 = twice as fast)")


class ArrivalConfig(Config):
    """When requests arrive. A trace keeps its own timestamps unless a rate (or a sweep load) is
    asked for explicitly; then they are compressed or stretched to that mean rate.

    ``episode``: an overload episode that ends. The run's rate (or sweep load) is the *base* rate;
    from ``burst_start_s`` for ``burst_s`` seconds arrivals come ``burst_factor`` times faster, then
    at the base rate again for ``tail_s`` seconds; no request arrives after that (the simulation
    still runs until every request finished: the backlog drains). Inside, arrivals are ``inner``
    (poisson, or gamma with ``cv``) in the time of the cumulative rate (:mod:`lenpred.sim.arrivals`).
    """

    process: str = Field("poisson", description="poisson | gamma (bursty, cv) | trace | burst | episode")
    rate: float | None = Field(
        None, description="requests/s (default 1 for poisson/gamma/episode: the base rate; a trace keeps its "
                          "own times unless set; ignored by burst)")
    cv: float = Field(1.0, description="gamma (also an episode's inner gamma) inter-arrival coefficient of variation")
    inner: str | None = Field(None, description="episode: poisson (default) or gamma (with cv) inside the episode")
    burst_factor: float | None = Field(None, description="episode: burst rate / base rate, >= 1 (default 2)")
    burst_start_s: float | None = Field(None, description="episode: seconds at the base rate before the burst (60)")
    burst_s: float | None = Field(None, description="episode: the burst's length in seconds (30)")
    tail_s: float | None = Field(None, description="episode: seconds at the base rate after the burst, then no "
                                 "more arrivals (300)")

    @property
    def effective_rate(self) -> float | None:
        """The rate a single run uses: None keeps the arrival times as generated or given."""
        if self.process == "burst" or (self.process == "trace" and self.rate is None):
            return None
        return 1.0 if self.rate is None else self.rate

    @property
    def episode(self) -> tuple[str, float, float, float, float] | None:
        """An episode's (inner, burst_factor, burst_start_s, burst_s, tail_s), defaults filled in;
        None for the other processes."""
        if self.process != "episode":
            return None
        return (self.inner or "poisson", 2.0 if self.burst_factor is None else self.burst_factor,
                60.0 if self.burst_start_s is None else self.burst_start_s,
                30.0 if self.burst_s is None else self.burst_s, 300.0 if self.tail_s is None else self.tail_s)

    @model_validator(mode="after")
    def _check(self) -> ArrivalConfig:
        w = "workload.arrival"
        _choice(w, "process", self.process, ARRIVALS)
        if self.rate is not None and not (math.isfinite(self.rate) and self.rate > 0):
            raise ConfigError(
                f"{w}.rate must be > 0 requests/s, got {self.rate!r}",
                "an arrival rate of 0 never sends a request; use process 'burst' for all at t=0",
            )
        if not (isinstance(self.cv, int | float) and math.isfinite(self.cv) and self.cv > 0):
            raise ConfigError(f"{w}.cv must be > 0 (1 = Poisson, 3 = bursty), got {self.cv!r}",
                              "give the gaps' coefficient of variation as a positive number")
        if self.process != "episode":
            given = [k for k in EPISODE_FIELDS if getattr(self, k) is not None]
            if given:
                raise ConfigError(f"{w}.{given[0]} is read by process 'episode' only, not {self.process!r}",
                                  "drop it, or set process to 'episode'")
            return self
        self._check_episode(w)
        return self

    def _check_episode(self, w: str) -> None:
        inner, factor, start, burst, tail = self.episode  # type: ignore[misc]
        _choice(w, "inner", inner, EPISODE_INNER)
        if not (math.isfinite(factor) and factor >= 1.0):
            raise ConfigError(f"{w}.burst_factor must be >= 1 (the burst rate over the base rate), got {factor!r}",
                              "a burst below the base is not a burst: give the burst's rate / the base rate")
        if not (math.isfinite(start) and start >= 0):
            raise ConfigError(f"{w}.burst_start_s must be >= 0 seconds, got {start!r}",
                              "give the episode's burst start as 0 or more seconds after the run starts")
        if not (math.isfinite(burst) and burst > 0):
            raise ConfigError(f"{w}.burst_s must be > 0 seconds, got {burst!r}", "give the episode's burst a positive length in seconds")
        if not (math.isfinite(tail) and tail >= 0):
            raise ConfigError(f"{w}.tail_s must be >= 0 seconds, got {tail!r}", "give the episode's tail as 0 or more seconds")


class LengthConfig(Config):
    source: str = Field("synthetic", description="synthetic | sharegpt | rundir | trace")
    path: str | None = Field(None, description="rundir / trace: the run directory or request table")
    tokenizer: str = Field("smollm2-135m", description="sharegpt: tokenizer that counts tokens")
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
    include_truncated: bool = Field(
        True, description="rundir: keep samples stopped by max_new_tokens (a server stops there too)")
    roles: tuple[str, ...] | None = Field(
        None, description="rundir: only the prompts with these roles in the run's split (e.g. [\"test\"]: "
        "prompts no head was trained on); unset: every prompt")
    split: str | None = Field(None, description="rundir with roles: the split file (default RUN/split.json)")
    # a bimodal mix (rundir, sharegpt): short chat + long generation, both drawn from the source's own samples
    mix_short_share: float | None = Field(
        None, description="bimodal mix: this share of the requests is drawn from the samples whose true output is "
        "<= the mix_short_below quantile, the rest from those >= the mix_long_above quantile (e.g. 0.8); unset: "
        "every sample alike")
    mix_short_below: float | None = Field(None, description="bimodal mix: the short class's quantile of true output "
                                          "(default 0.5)")
    mix_long_above: float | None = Field(None, description="bimodal mix: the long class's quantile of true output "
                                         "(default 0.85)")

    @model_serializer(mode="wrap")
    def _unset_left_out(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The mix is written only when set: lengths without it read and write as before."""
        d = handler(self)
        for k in MIX_FIELDS:
            if d.get(k, 0) is None:
                del d[k]
        return d

    @property
    def mix(self) -> tuple[float, float, float] | None:
        """(short share, short class's quantile, long class's quantile), defaults filled in; None: no mix."""
        if self.mix_short_share is None:
            return None
        return (self.mix_short_share, 0.5 if self.mix_short_below is None else self.mix_short_below,
                0.85 if self.mix_long_above is None else self.mix_long_above)

    def _check_mix(self, w: str) -> None:
        if self.mix_short_share is None:
            given = [k for k in MIX_FIELDS[1:] if getattr(self, k) is not None]
            if given:
                raise ConfigError(f"{w}.{given[0]} is read only with {w}.mix_short_share",
                                  f"set {w}.mix_short_share (e.g. 0.8), or drop {given[0]}")
            return
        if self.source not in MIX_SOURCES:
            raise ConfigError(f"{w}.mix_short_share is read by sources {', '.join(MIX_SOURCES)} only, not "
                              f"{self.source!r}", "drop the mix, or draw from a run directory or ShareGPT")
        share, below, above = self.mix  # type: ignore[misc]
        if not (math.isfinite(share) and 0 < share < 1):
            raise ConfigError(f"{w}.mix_short_share must be in (0, 1), got {share!r}",
                              "give the short class's share of the requests, e.g. 0.8")
        if not (math.isfinite(below) and math.isfinite(above) and 0 < below <= above < 1):
            raise ConfigError(f"{w}.mix_short_below ({below!r}) and mix_long_above ({above!r}) must be quantiles "
                              "with 0 < mix_short_below <= mix_long_above < 1",
                              "e.g. mix_short_below 0.5 and mix_long_above 0.85")

    @model_validator(mode="after")
    def _check(self) -> LengthConfig:
        w = "workload.lengths"
        _choice(w, "source", self.source, LENGTH_SOURCES)
        self._check_mix(w)
        if self.source in ("rundir", "trace") and not self.path:
            raise ConfigError(f"{w}.path is required for source {self.source!r}",
                              f"set {w}.path to the {'run directory' if self.source == 'rundir' else 'request file'}")
        if (self.roles is not None or self.split is not None) and self.source != "rundir":
            raise ConfigError(f"{w}.roles and {w}.split are read by source 'rundir' only, not {self.source!r}",
                              "drop them, or use source 'rundir'")
        if self.roles is not None:
            bad = sorted(set(self.roles) - set(SPLIT_ROLES))
            if bad or not self.roles:
                raise ConfigError(f"{w}.roles must be a non-empty list of split roles, got {list(self.roles)}",
                                  f"roles are {', '.join(SPLIT_ROLES)}")
        _positive(w, prompt_median=self.prompt_median, output_median=self.output_median,
                  prompt_sigma=self.prompt_sigma, output_sigma=self.output_sigma,
                  max_prompt_tokens=self.max_prompt_tokens, max_total_tokens=self.max_total_tokens)
        if self.min_tokens < 1:
            raise ConfigError(f"{w}.min_tokens must be >= 1, got {self.min_tokens!r}", f"set {w}.min_tokens to 1 or more")
        return self


class WorkloadConfig(Config):
    n_requests: int = Field(1000, description="requests in the workload")
    arrival: ArrivalConfig = Field(default_factory=ArrivalConfig)
    lengths: LengthConfig = Field(default_factory=LengthConfig)

    @field_validator("n_requests")
    @classmethod
    def _n(cls, v: int) -> int:
        if v < 1:
            raise ConfigError(f"workload.n_requests must be an integer >= 1, got {v!r}",
                              "set workload.n_requests (or --n-requests) to 1 or more")
        check_limit("--n-requests", v, "simulate 10,000,000 requests or fewer (100,000 take seconds)",
                    label="workload.n_requests")
        return v


class SweepConfig(Config):
    loads: tuple[float, ...] = Field((), description="empty: one run at workload.arrival.rate")
    load_unit: str = Field("req/s", description="req/s, or capacity: multiples of the saturation throughput")
    baseline: str | None = Field(None, description="arm the others are compared with (default: the first)")
    probe_requests: int = Field(4000, description="requests in the saturation probe")

    @model_validator(mode="after")
    def _check(self) -> SweepConfig:
        _choice("sweep", "load_unit", self.load_unit, LOAD_UNITS)
        for x in self.loads:
            if not math.isfinite(x):
                raise ConfigError(f"sweep.loads must be finite numbers, got {x!r}", "pass loads such as 0.5,1,2")
            if not x > 0:
                raise ConfigError(f"sweep.loads must all be > 0, got {x!r}", "an arrival rate of 0 never sends a request")
            if self.load_unit == "capacity" and x > MAX_CAPACITY_LOAD:
                raise ConfigError(
                    f"sweep.loads {x:g} is {x:g}x the saturation throughput; capacity loads must lie in "
                    f"(0, {MAX_CAPACITY_LOAD:g}]",
                    "a rate in requests/s needs sweep.load_unit 'req/s'; a multiple of capacity is e.g. 0.9")
        if self.probe_requests < 10:
            raise ConfigError(f"sweep.probe_requests must be >= 10, got {self.probe_requests!r}",
                              "set sweep.probe_requests to 10 or more")
        return self


def parse_loads(text: str, default_unit: str = "req/s") -> tuple[tuple[float, ...], str]:
    """A comma-separated load list -> (loads, load_unit): ``0.9x`` is a multiple of capacity, a plain
    number is in ``default_unit`` (:func:`lenpred.checks.parse_loads` refuses a list mixing both), and
    the loads are checked as :class:`SweepConfig` checks them (capacity loads in (0, 4])."""
    from lenpred.checks import parse_loads as parse

    _choice("--loads", "unit", default_unit, LOAD_UNITS)
    loads, marked = parse(text)
    unit = "capacity" if marked else default_unit
    SweepConfig(loads=loads, load_unit=unit)  # the same ranges as a config's sweep.loads
    return loads, unit


class MetricsConfig(Config):
    short_threshold: float | None = Field(None, description="output tokens; None: the median true output length")
    slo_ttft_s: float = Field(0.25, description="TTFT SLO (DistServe's chatbot SLO for OPT-13B on ShareGPT)")
    slo_tpot_s: float = Field(0.10, description="TPOT SLO")
    slo_target: float = Field(0.90, description="goodput: the share of requests that must attain the SLO")

    @model_validator(mode="after")
    def _check(self) -> MetricsConfig:
        _positive("metrics", short_threshold=self.short_threshold, slo_ttft_s=self.slo_ttft_s,
                  slo_tpot_s=self.slo_tpot_s)
        if not (math.isfinite(self.slo_target) and 0 < self.slo_target <= 1):
            raise ConfigError(f"metrics.slo_target must be in (0, 1], got {self.slo_target!r}",
                              "DistServe's goodput asks 90% of requests to attain: 0.9")
        return self


class SimConfig(Config):
    name: str = Field("sim", description="experiment name (default output folder out/sim/<name>)")
    seed: int = Field(0, description="seed of lengths, arrivals, prediction noise and dispatch draws")
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    workload: WorkloadConfig = Field(default_factory=WorkloadConfig)
    prediction: PredictionConfig = Field(default_factory=PredictionConfig)
    policies: tuple[PolicyConfig, ...] = (PolicyConfig(),)
    sweep: SweepConfig = Field(default_factory=SweepConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    plots: bool = Field(True, description="write the PNG plots")

    @model_validator(mode="after")
    def _check(self) -> SimConfig:
        if not self.policies:
            raise ConfigError("policies must list at least one arm", 'add an arm, e.g. "policies": [{"name": "fcfs"}]')
        names = [p.name for p in self.policies]
        if len(set(names)) != len(names):
            raise ConfigError(f"policy names must be unique, got {names}", "give each arm its own name")
        if self.workload.arrival.process == "episode" and self.sweep.load_unit == "req/s":
            from lenpred.sim.episode import check_episode_length

            for rate in self.sweep.loads or (self.workload.arrival.effective_rate,):
                check_episode_length(self.workload.arrival, self.workload.n_requests, float(rate or 1.0))
        if self.sweep.baseline is not None and self.sweep.baseline not in names:
            raise ConfigError(f"sweep.baseline {self.sweep.baseline!r} is not a policy name",
                              f"use one of: {', '.join(names)}")
        return self

    def prediction_for(self, policy: PolicyConfig) -> PredictionConfig:
        return policy.prediction or self.prediction

    def nested(self, section: str, **changes: Any) -> SimConfig:
        """A copy with fields of one section changed, e.g. ``cfg.nested("sweep", loads=(1.0,))``."""
        return self.replace(**{section: getattr(self, section).replace(**changes)})


__all__ = [
    "ADMISSIONS", "TABLE_MODELS", "VICTIMS", "ArmPolicy", "ArrivalConfig", "ClusterConfig",
    "LengthConfig", "MetricsConfig", "PolicyConfig", "PredictionConfig", "SimConfig", "SweepConfig", "WorkloadConfig",
    "parse_loads", "policies_for", "prediction_models", "recommended_policy",
]
