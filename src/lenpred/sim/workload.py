"""Workloads: the requests of an experiment before a load and a predictor are chosen.

A :class:`Workload` combines a length source (:mod:`~lenpred.sim.length_sources`) with an
arrival process (:mod:`~lenpred.sim.arrivals`) and keeps arrivals at unit rate, so every load of a
sweep uses the same requests and the same arrival pattern, only compressed in time (common random
numbers: policy and load differences are not drowned by sampling noise).

Every request carries a key ``(prompt_id, sample_idx)`` that predictions are joined on
(:mod:`~lenpred.sim.predictions`): the sample's own key for a run-directory workload (a sample
drawn twice gets the same prediction, as from any real predictor), and ``(str(request id), 0)``
otherwise. Request ids count from 0: in generation order, or a request table's row order.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lenpred.errors import ConfigError, DataError
from lenpred.predictions import Predictions
from lenpred.sched.dists import repredicted, rescaled, row_dist
from lenpred.sim.arrivals import require_rate, trace_arrivals, unit_arrivals
from lenpred.sim.config import PredictionConfig, WorkloadConfig
from lenpred.sim.episode import Episode
from lenpred.sim.length_sources import (
    filter_lengths,
    read_trace,
    rundir_lengths,
    sharegpt_token_table,
    synthetic_lengths,
)
from lenpred.sim.predictions import aligned, predictions_for
from lenpred.sim.request import Request


def request_keys(rid: np.ndarray) -> pd.DataFrame:
    """Join keys of requests that are not run samples: ``(str(request id), 0)``."""
    return pd.DataFrame({"prompt_id": rid.astype(str), "sample_idx": np.zeros(rid.size, dtype=np.int64)})


@dataclass
class Workload:
    """Requests before a load and a predictor are chosen. Arrays are (n,), in arrival order."""

    prompt: np.ndarray  # prompt tokens
    output: np.ndarray  # true output tokens
    arrivals: np.ndarray  # seconds at 1 request/s (or a trace's own times: see trace_rate)
    rid: np.ndarray  # request ids
    keys: pd.DataFrame  # (n,) prompt_id, sample_idx: what predictions are joined on
    population: pd.DataFrame  # what synthetic predictors predict on: prompt_id, sample_idx, n_tokens
    trace_rate: float | None = None  # mean rate of a trace's own times (None: all at once, or unit-rate)
    own_times: bool = False  # arrivals are a trace's own timestamps (else generated at 1 request/s)
    table: pd.DataFrame | None = None  # a request table's rows, in workload order (model 'input')
    card: dict[str, Any] | None = None  # the run card of a run-directory workload
    source: str = "synthetic"
    episode: Episode | None = None  # an overload episode: arrivals are mapped through it and cut at its end
    mix_bounds: tuple[float, float] | None = None  # a bimodal mix: true output <= [0] is short, >= [1] long
    _dists: dict[int, tuple[Predictions, list[Any], list[tuple[Any, ...]]]] = field(default_factory=dict, repr=False)

    @classmethod
    def from_lengths(cls, prompt: np.ndarray, output: np.ndarray, arrivals: np.ndarray, *,
                     rid: np.ndarray | None = None, **kw: Any) -> Workload:
        """A workload whose requests are not run samples (keyed by request id)."""
        rid = np.arange(prompt.size, dtype=np.int64) if rid is None else rid
        keys = request_keys(rid)
        population = keys.assign(n_tokens=output)
        return cls(prompt=prompt, output=output, arrivals=arrivals, rid=rid, keys=keys, population=population, **kw)

    @property
    def n(self) -> int:
        return int(self.prompt.size)

    def mean_rate(self) -> float | None:
        """Mean arrival rate of the stored times (requests/s), None when they all coincide."""
        span = float(self.arrivals.max() - self.arrivals.min()) if self.n else 0.0
        return (self.n - 1) / span if span > 0 else None

    @property
    def has_given_predictions(self) -> bool:
        """Whether the request table brings its own predictions (``predicted_tokens``)."""
        return self.table is not None and "predicted_tokens" in self.table

    def arrival_times(self, rate: float | None) -> np.ndarray:
        """Arrival times (s) at a mean rate of ``rate`` requests/s (None: as stored). A trace's
        times are rescaled by its own mean rate; synthetic ones are stored at 1 request/s."""
        if rate is None:
            return self.arrivals.copy()
        if not (rate > 0 and math.isfinite(rate)):
            raise ConfigError(f"arrival rate must be > 0 requests/s, got {rate!r}", "pass loads above 0")
        if self.episode is not None:
            return self._episode_times(rate)
        if not self.own_times:
            return self.arrivals * (1.0 / rate)
        require_rate(self.trace_rate)
        assert self.trace_rate is not None
        return self.arrivals * (self.trace_rate / rate)

    def _episode_times(self, rate: float) -> np.ndarray:
        """An episode's real arrival times at base ``rate`` (every one of the n, including those past
        its end, which :meth:`requests` drops); too few requests to reach its end is an error."""
        ep = self.episode
        assert ep is not None
        t = ep.times(self.arrivals, rate)
        if self.n and t[-1] < ep.end:
            raise DataError(
                f"the episode ends at {ep.end:g} s but the workload's {self.n} requests at a base rate of {rate:.3g} "
                f"req/s have all arrived by {t[-1]:.0f} s",
                f"raise workload.n_requests to >= {ep.requests_needed(rate, 3.0)} or shorten the episode")
        return t

    def predictions(self, prediction: PredictionConfig, seed: int = 0) -> Predictions:
        """The predictions table of an arm (synthetic noise depends only on ``seed``)."""
        return predictions_for(prediction, population=self.population, keys=self.keys, card=self.card,
                               table=self.table, source=self.source, seed=seed)

    @property
    def cap(self) -> float | None:
        """The longest output a request can have (the run card's max_new_tokens), if known."""
        if self.card is None:
            return None
        cap = (self.card.get("sampling") or {}).get("max_new_tokens")
        return None if cap is None else float(cap)

    def requests(self, rate: float | None, predictions: Predictions, with_dist: bool = False) -> list[Request]:
        """:class:`Request` objects at ``rate`` requests/s, with predictions from the table (every
        request must have one); ``with_dist``: also each request's predictive distribution
        (:mod:`lenpred.sched.dists`; None where the table carries none)."""
        a = aligned(predictions, self.keys, what=f"predictions for the {self.source} workload")
        spread = [None if x != x else x for x in a["spread"].tolist()]
        repred = [tuple(zip(g, r, strict=True)) for g, r in zip(a["repred_gen"], a["repred_remaining"], strict=True)]
        t = self.arrival_times(rate)
        n = len(t)
        dists, rdists = self._request_dists(predictions, a) if with_dist else ([None] * n, [()] * n)
        out = [
            Request(i, at, p, o, pr, s, rp, d, rd)
            for i, at, p, o, pr, s, rp, d, rd in zip(self.rid.tolist(), t.tolist(), self.prompt.tolist(),
                                                     self.output.tolist(), a["pred_tokens"].tolist(), spread,
                                                     repred, dists, rdists, strict=True)
        ]
        if self.episode is not None:  # an episode ends: nobody arrives after it
            out = [r for r in out if r.arrival <= self.episode.end]
        return out

    def _request_dists(self, predictions: Predictions, a: pd.DataFrame) -> tuple[list[Any], list[tuple[Any, ...]]]:
        """Per request: the predictive distribution and one per re-prediction, built once per distinct
        sample and predictions table (every load of a sweep shares them)."""
        hit = self._dists.get(id(predictions))
        if hit is not None and hit[0] is predictions:
            return hit[1], hit[2]
        cap = self.cap
        made: dict[tuple[str, int], tuple[Any, tuple[Any, ...]]] = {}
        dists, rdists = [], []
        keys = zip(self.keys["prompt_id"].tolist(), self.keys["sample_idx"].tolist(), strict=True)
        for k, row in zip(keys, a.to_dict("records"), strict=True):
            got = made.get(k)
            if got is None:
                base = row_dist(row, cap)
                reps: tuple[Any, ...] = ()
                if len(row["repred_gen"]) and len(row.get("repred_q10") or ()):
                    # the re-predictions carry their own quantiles: each its own distribution
                    reps = tuple(repredicted(int(g), float(lo), float(r), float(hi), cap)
                                 for g, lo, r, hi in zip(row["repred_gen"], row["repred_q10"], row["repred_remaining"],
                                                         row["repred_q90"], strict=True))
                elif base is not None and len(row["repred_gen"]):
                    reps = tuple(rescaled(base, int(g), float(r))
                                 for g, r in zip(row["repred_gen"], row["repred_remaining"], strict=True))
                got = made[k] = (base, reps)
            dists.append(got[0])
            rdists.append(got[1])
        self._dists[id(predictions)] = (predictions, dists, rdists)
        return dists, rdists


def _sample_rows(df: pd.DataFrame, n: int, rng: np.random.Generator,
                 mix: tuple[float, float, float] | None = None) -> pd.DataFrame:
    """``n`` rows drawn with replacement; with a ``mix`` (:attr:`LengthConfig.mix`), the bimodal mix."""
    if mix is not None:
        return mixed_rows(df, n, rng, *mix)
    idx = rng.integers(0, len(df), n)
    return df.iloc[idx].reset_index(drop=True)


def mixed_rows(df: pd.DataFrame, n: int, rng: np.random.Generator, share: float, below: float, above: float
               ) -> pd.DataFrame:
    """A bimodal mix of ``n`` rows drawn with replacement from ``df`` (``output_tokens``): exactly
    ``round(share x n)`` from the short class (true output <= its ``below`` quantile over ``df``), the rest
    from the long class (>= its ``above`` quantile), in a random order. The mix is chosen by the true
    output: it makes a workload, it is not an evaluation of any predictor. Deterministic in ``rng``."""
    out = df["output_tokens"].to_numpy(dtype=np.float64)
    lo, hi = float(np.quantile(out, below)), float(np.quantile(out, above))
    short, long_ = np.flatnonzero(out <= lo), np.flatnonzero(out >= hi)
    if short.size == 0 or long_.size == 0:  # pragma: no cover - a quantile always holds a sample
        raise DataError(f"the bimodal mix found no sample in a class ({short.size} short, {long_.size} long)",
                        "use a source with more samples, or other quantiles")
    n_short = int(round(share * n))
    is_short = rng.permutation(n) < n_short
    idx = np.empty(n, dtype=np.int64)
    idx[is_short] = short[rng.integers(0, short.size, n_short)]
    idx[~is_short] = long_[rng.integers(0, long_.size, n - n_short)]
    out = df.iloc[idx].reset_index(drop=True)
    out.attrs["mix_bounds"] = (lo, hi)
    return out


def _check_lengths(prompt: np.ndarray, output: np.ndarray) -> None:
    if (prompt <= 0).any() or (output <= 0).any():
        bad = int(((prompt <= 0) | (output <= 0)).sum())
        raise DataError(f"{bad} request(s) with zero or negative prompt/output length",
                        "drop them from the source (every request needs >= 1 prompt and output token)")


def build_workload(cfg: WorkloadConfig, seed: int = 0) -> Workload:
    """Lengths and unit-rate arrivals for ``cfg.n_requests`` requests (deterministic in ``seed``)."""
    n = cfg.n_requests
    lc = cfg.lengths
    rng_len = np.random.default_rng([seed, 1])
    rng_arr = np.random.default_rng([seed, 2])
    if lc.source == "rundir":
        return _rundir_workload(cfg, rng_len, rng_arr)
    trace: pd.DataFrame | None = None
    if lc.source == "synthetic":
        df = synthetic_lengths(n, lc, rng_len)
    elif lc.source == "sharegpt":
        df = _sample_rows(filter_lengths(sharegpt_token_table(lc.tokenizer), lc), n, rng_len, lc.mix)
    else:  # trace: used in file order, first n rows
        df = read_trace(str(lc.path))
        if len(df) < n:
            raise DataError(f"trace {lc.path} has {len(df)} requests, the workload asks for {n}",
                            "lower workload.n_requests")
        df = trace = df.iloc[:n].reset_index(drop=True)
    prompt = df["prompt_tokens"].to_numpy(dtype=np.int64)
    output = df["output_tokens"].to_numpy(dtype=np.int64)
    _check_lengths(prompt, output)
    rid = np.arange(n, dtype=np.int64)
    trace_rate = None
    if cfg.arrival.process == "trace":
        if trace is None or "arrival_s" not in trace:
            raise ConfigError("arrival process 'trace' needs a trace file with an arrival_s column",
                              "set workload.lengths.source to 'trace'")
        order, arrivals, trace_rate = trace_arrivals(trace["arrival_s"].to_numpy(dtype=float))
        prompt, output, rid = prompt[order], output[order], rid[order]
        trace = trace.iloc[order].reset_index(drop=True)
    else:
        arrivals = unit_arrivals(n, cfg.arrival, rng_arr)
    return Workload.from_lengths(prompt, output, arrivals, rid=rid, trace_rate=trace_rate, source=lc.source,
                                 table=trace, own_times=cfg.arrival.process == "trace",
                                 episode=Episode.of(cfg.arrival))


def _rundir_workload(cfg: WorkloadConfig, rng_len: np.random.Generator, rng_arr: np.random.Generator
                     ) -> Workload:
    from lenpred.data.rundir import RunDir

    lc = cfg.lengths
    if cfg.arrival.process == "trace":
        raise ConfigError("arrival process 'trace' needs a trace file with an arrival_s column",
                          "set workload.lengths.source to 'trace'")
    run = rundir_lengths(str(lc.path), lc)
    df = _sample_rows(filter_lengths(run, lc), cfg.n_requests, rng_len, lc.mix)
    prompt = df["prompt_tokens"].to_numpy(dtype=np.int64)
    output = df["output_tokens"].to_numpy(dtype=np.int64)
    _check_lengths(prompt, output)
    # Synthetic predictors see every sample of the run (before the length filters, as a predictor
    # run on the run would): the prompt-median oracle uses all of a prompt's other samples.
    population = run[["prompt_id", "sample_idx"]].assign(n_tokens=run["output_tokens"].to_numpy())
    return Workload(
        prompt=prompt, output=output, arrivals=unit_arrivals(cfg.n_requests, cfg.arrival, rng_arr),
        rid=np.arange(cfg.n_requests, dtype=np.int64), keys=df[["prompt_id", "sample_idx"]].copy(),
        population=population, card=RunDir.open(str(lc.path)).card, source="rundir",
        episode=Episode.of(cfg.arrival), mix_bounds=df.attrs.get("mix_bounds"),
    )


def workload_from_table(path: str | Path) -> Workload:
    """A workload whose requests arrive exactly as a request table says (``arrival_s`` required),
    with the table's predictions when it has them (prediction model ``input``). Request ids are
    the table's rows, counted from 0."""
    df = read_trace(path)
    if "arrival_s" not in df:
        raise DataError(f"{path} lacks an arrival_s column", "add arrival times (seconds) or use a config")
    order = np.argsort(df["arrival_s"].to_numpy(dtype=float), kind="stable")
    df = df.iloc[order].reset_index(drop=True)
    prompt = df["prompt_tokens"].to_numpy(dtype=np.int64)
    output = df["output_tokens"].to_numpy(dtype=np.int64)
    arrivals = df["arrival_s"].to_numpy(dtype=float)
    # times are kept as given (not shifted to start at 0); the mean rate rescales them on request
    span = float(arrivals[-1] - arrivals[0]) if len(arrivals) else 0.0
    trace_rate = (len(arrivals) - 1) / span if span > 0 else None
    return Workload.from_lengths(prompt, output, arrivals, rid=order.astype(np.int64), source="trace",
                                 table=df, trace_rate=trace_rate, own_times=True)


def read_requests(path: str | Path, prediction: PredictionConfig | None = None, seed: int = 0
                  ) -> list[Request]:
    """Requests straight from a table with ``arrival_s`` (and optionally predictions): the input
    format for predictors evaluated outside lenpred. Without ``predicted_tokens`` (or with an
    explicit ``prediction``), predictions come from that prediction config."""
    wl = workload_from_table(path)
    if prediction is None:
        prediction = PredictionConfig(model="input") if wl.has_given_predictions else PredictionConfig()
    return wl.requests(None, wl.predictions(prediction, seed))


def requests_to_frame(requests: Sequence[Request]) -> pd.DataFrame:
    """The inverse of :func:`read_requests` (repredictions as JSON strings)."""
    return pd.DataFrame({
        "id": [r.rid for r in requests],
        "arrival_s": [r.arrival for r in requests],
        "prompt_tokens": [r.prompt for r in requests],
        "output_tokens": [r.output for r in requests],
        "predicted_tokens": [r.pred for r in requests],
        "predicted_spread": [np.nan if r.spread is None else r.spread for r in requests],
        "repredictions": [json.dumps([list(x) for x in r.repred]) for r in requests],
    })
