"""Workloads: the requests of an experiment before a load and a predictor are chosen.

A :class:`Workload` combines a length source (:mod:`~lenpred.sim.length_sources`) with an
arrival process (:mod:`~lenpred.sim.arrivals`) and keeps arrivals at unit rate, so every load of a
sweep uses the same requests and the same arrival pattern, only compressed in time (common random
numbers: policy and load differences are not drowned by sampling noise). Predictions are attached
when requests are built (:mod:`~lenpred.sim.predictions`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lenpred.errors import ConfigError, DataError
from lenpred.sim.arrivals import require_rate, trace_arrivals, unit_arrivals
from lenpred.sim.config import PredictionConfig, WorkloadConfig
from lenpred.sim.length_sources import (
    filter_lengths,
    read_trace,
    rundir_lengths,
    sharegpt_token_table,
    synthetic_lengths,
)
from lenpred.sim.predictions import make_repredictions, predict_lengths
from lenpred.sim.request import Request


def parse_repredictions(x: Any) -> tuple[tuple[int, float], ...]:
    """A trace cell of re-predictions (a JSON string or a list of pairs) as a tuple of pairs."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ()
    if isinstance(x, str):
        x = json.loads(x) if x.strip() else []
    return tuple((int(g), float(r)) for g, r in x)


@dataclass
class Workload:
    """Requests before a load and a predictor are chosen. Arrays are (n,)."""

    prompt: np.ndarray  # prompt tokens
    output: np.ndarray  # true output tokens
    arrivals: np.ndarray  # seconds at 1 request/s (or a trace's own times: see trace_rate)
    trace_rate: float | None = None  # mean rate of trace arrivals (None: unit-rate arrivals)
    given_pred: np.ndarray | None = None
    given_spread: np.ndarray | None = None
    given_repred: list[tuple[tuple[int, float], ...]] | None = None
    prompt_median: np.ndarray | None = None
    source: str = "synthetic"

    @property
    def n(self) -> int:
        return int(self.prompt.size)

    def arrival_times(self, rate: float | None) -> np.ndarray:
        """Arrival times (s) at ``rate`` requests/s (None: as stored)."""
        if rate is None:
            return self.arrivals.copy()
        if not (rate > 0 and math.isfinite(rate)):
            raise ConfigError(f"arrival rate must be > 0 requests/s, got {rate!r}")
        base = self.trace_rate or 1.0
        return self.arrivals * (base / rate)

    def requests(self, rate: float | None, prediction: PredictionConfig, seed: int = 0) -> list[Request]:
        """Build :class:`Request` objects; the prediction noise depends only on ``seed``."""
        rng = np.random.default_rng([seed, 3])
        pred, spread = predict_lengths(self.output, prediction, rng, given=self.given_pred,
                                       given_spread=self.given_spread, prompt_median=self.prompt_median)
        if prediction.model == "input" and self.given_repred is not None:
            repred = self.given_repred
        else:
            repred = make_repredictions(self.output, prediction, np.random.default_rng([seed, 4]))
        t = self.arrival_times(rate)
        sp = [None] * self.n if spread is None else [None if x != x else x for x in spread.tolist()]
        return [
            Request(i, a, p, o, pr, s, rp)
            for i, (a, p, o, pr, s, rp) in enumerate(
                zip(t.tolist(), self.prompt.tolist(), self.output.tolist(), pred.tolist(), sp, repred,
                    strict=True)
            )
        ]


def _sample_rows(df: pd.DataFrame, n: int, rng: np.random.Generator) -> pd.DataFrame:
    idx = rng.integers(0, len(df), n)
    return df.iloc[idx].reset_index(drop=True)


def build_workload(cfg: WorkloadConfig, seed: int = 0) -> Workload:
    """Lengths and unit-rate arrivals for ``cfg.n_requests`` requests (deterministic in ``seed``)."""
    n = cfg.n_requests
    lc = cfg.lengths
    rng_len = np.random.default_rng([seed, 1])
    rng_arr = np.random.default_rng([seed, 2])
    extra: dict[str, Any] = {}
    trace_times: np.ndarray | None = None
    if lc.source == "synthetic":
        df = synthetic_lengths(n, lc, rng_len)
    elif lc.source == "sharegpt":
        df = _sample_rows(filter_lengths(sharegpt_token_table(lc.tokenizer), lc), n, rng_len)
    elif lc.source == "rundir":
        from lenpred.data.lengths import loo_median

        run = rundir_lengths(str(lc.path), lc)
        # the per-prompt oracle: the median of the prompt's other samples (before the length filters)
        run["loo_median"] = loo_median(run["output_tokens"], run["prompt_id"],
                                       fill=float(run["output_tokens"].median()))
        df = _sample_rows(filter_lengths(run, lc), n, rng_len)
        extra["prompt_median"] = df["loo_median"].to_numpy(dtype=float)
    else:  # trace: used in file order, first n rows
        df = read_trace(str(lc.path))
        if len(df) < n:
            raise DataError(f"trace {lc.path} has {len(df)} requests, the workload asks for {n}",
                            "lower workload.n_requests")
        df = df.iloc[:n].reset_index(drop=True)
        if "predicted_tokens" in df:
            extra["given_pred"] = df["predicted_tokens"].to_numpy(dtype=float)
        if "predicted_spread" in df:
            extra["given_spread"] = df["predicted_spread"].to_numpy(dtype=float)
        if "repredictions" in df:
            extra["given_repred"] = [parse_repredictions(x) for x in df["repredictions"]]
        if "arrival_s" in df:
            trace_times = df["arrival_s"].to_numpy(dtype=float)
    prompt = df["prompt_tokens"].to_numpy(dtype=np.int64)
    output = df["output_tokens"].to_numpy(dtype=np.int64)
    if (prompt <= 0).any() or (output <= 0).any():
        bad = int(((prompt <= 0) | (output <= 0)).sum())
        raise DataError(f"{bad} request(s) with zero or negative prompt/output length",
                        "drop them from the source (every request needs >= 1 prompt and output token)")
    trace_rate = None
    if cfg.arrival.process == "trace":
        if trace_times is None:
            raise ConfigError("arrival process 'trace' needs a trace file with an arrival_s column",
                              "set workload.lengths.source to 'trace'")
        order, arrivals, trace_rate = trace_arrivals(trace_times)
        require_rate(trace_rate)
        prompt, output = prompt[order], output[order]
        for k in ("given_pred", "given_spread"):
            if k in extra:
                extra[k] = extra[k][order]
        if "given_repred" in extra:
            extra["given_repred"] = [extra["given_repred"][i] for i in order]
    else:
        arrivals = unit_arrivals(n, cfg.arrival, rng_arr)
    return Workload(prompt=prompt, output=output, arrivals=arrivals, trace_rate=trace_rate,
                    source=lc.source, **extra)


def workload_from_table(path: str | Path) -> Workload:
    """A workload whose requests arrive exactly as a request table says (``arrival_s`` required),
    with the table's predictions when it has them (prediction model ``input``)."""
    df = read_trace(path)
    if "arrival_s" not in df:
        raise DataError(f"{path} lacks an arrival_s column", "add arrival times (seconds) or use a config")
    df = df.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    return Workload(
        prompt=df["prompt_tokens"].to_numpy(dtype=np.int64),
        output=df["output_tokens"].to_numpy(dtype=np.int64),
        arrivals=df["arrival_s"].to_numpy(dtype=float),
        given_pred=df["predicted_tokens"].to_numpy(dtype=float) if "predicted_tokens" in df else None,
        given_spread=df["predicted_spread"].to_numpy(dtype=float) if "predicted_spread" in df else None,
        given_repred=[parse_repredictions(x) for x in df["repredictions"]] if "repredictions" in df else None,
        source="trace",
    )


def read_requests(path: str | Path, prediction: PredictionConfig | None = None, seed: int = 0
                  ) -> list[Request]:
    """Requests straight from a table with ``arrival_s`` (and optionally predictions): the input
    format for predictors evaluated outside lenpred. Without ``predicted_tokens`` (or with an
    explicit ``prediction``), predictions come from the noise model."""
    wl = workload_from_table(path)
    if prediction is None:
        prediction = PredictionConfig(model="input") if wl.given_pred is not None else PredictionConfig()
    return wl.requests(None, prediction, seed)


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
