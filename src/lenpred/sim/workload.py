"""Workloads: arrival processes, length sources, prediction-noise models, request tables.

Lengths come from a synthetic lognormal, ShareGPT (prompt and reference-answer token counts, cached
under ``lenpred.paths.home()``), a lenpred run directory (sampled response lengths), or a trace
file. Arrivals are Poisson, gamma (bursty, coefficient of variation ``cv``), all at once ("burst"),
or a trace's own timestamps (rescaled to the requested rate).

A :class:`Workload` keeps arrivals at unit rate, so every load of a sweep uses the same requests
and the same arrival pattern, only compressed in time (common random numbers: policy and load
differences are not drowned by sampling noise).

Predictions for experiments without a trained predictor (:func:`predict_lengths`):

* ``lognormal``: ``true * exp(sigma * Z)``, sigma chosen so that ``E|pred - true| / E[true]``
  equals ``rel_mae`` exactly (``E|e^{sigma Z} - 1| = e^{sigma^2/2} (2 Phi(sigma) - 1)``);
* ``additive``: ``true + N(0, s)``, ``s = mae * sqrt(pi / 2)`` so that ``E|err| = mae``, floored at 1;
* ``oracle`` (the truth), ``constant`` (the mean), ``input`` (a trace's own predictions),
  ``prompt-median`` (run directories: the median of the prompt's other samples).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lenpred.errors import ConfigError, DataError
from lenpred.sim.config import ArrivalConfig, LengthConfig, PredictionConfig, WorkloadConfig
from lenpred.sim.request import Request

TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens", "predicted_tokens", "predicted_spread",
                 "repredictions")


# ---------------------------------------------------------------- arrivals
def unit_arrivals(n: int, arrival: ArrivalConfig, rng: np.random.Generator) -> np.ndarray:
    """(n,) arrival times in seconds at a mean rate of 1 request/s, starting at 0."""
    if arrival.process == "burst":
        return np.zeros(n)
    if arrival.process == "poisson":
        gaps = rng.exponential(1.0, n)
    elif arrival.process == "gamma":
        shape = 1.0 / arrival.cv**2  # gamma gaps with mean 1 and coefficient of variation cv
        gaps = rng.gamma(shape, 1.0 / shape, n)
    else:
        raise ConfigError(f"arrival process {arrival.process!r} needs a trace's arrival times")
    out = np.empty(n)
    out[0] = 0.0
    np.cumsum(gaps[:-1], out=out[1:])
    return out


# ---------------------------------------------------------------- length sources
def synthetic_lengths(n: int, cfg: LengthConfig, rng: np.random.Generator) -> pd.DataFrame:
    """Lognormal prompt and output lengths, clipped to the configured limits."""
    p = rng.lognormal(math.log(cfg.prompt_median), cfg.prompt_sigma, n)
    o = rng.lognormal(math.log(cfg.output_median), cfg.output_sigma, n)
    p = np.clip(np.rint(p), cfg.min_tokens, cfg.max_prompt_tokens).astype(np.int64)
    o = np.clip(np.rint(o), cfg.min_tokens, None).astype(np.int64)
    o = np.minimum(o, np.maximum(cfg.max_total_tokens - p, cfg.min_tokens))
    return pd.DataFrame({"prompt_tokens": p, "output_tokens": o})


def sharegpt_token_table(tokenizer: str = "smollm2-135m", batch: int = 512) -> pd.DataFrame:
    """Token counts of every ShareGPT record's first prompt and reference answer (raw text, no chat
    template, as vLLM's serving benchmark counts them). Cached as Parquet under ``home()/sim``."""
    from lenpred.data.sharegpt import load_sharegpt
    from lenpred.paths import home

    df = load_sharegpt()
    digest = hashlib.sha256(("\n".join(df["id"].astype(str))).encode()).hexdigest()[:12]
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in tokenizer)
    cache = home() / "sim" / f"sharegpt-lengths-{slug}-{digest}.parquet"
    if cache.is_file():
        return pd.read_parquet(cache)
    from lenpred.models import load_tokenizer

    tok = load_tokenizer(tokenizer)

    def count(texts: list[str]) -> np.ndarray:
        out = np.empty(len(texts), dtype=np.int64)
        for i in range(0, len(texts), batch):
            ids = tok(texts[i : i + batch], add_special_tokens=False)["input_ids"]
            out[i : i + len(ids)] = [len(x) for x in ids]
        return out

    table = pd.DataFrame({
        "id": df["id"].astype(str).to_numpy(),
        "prompt_tokens": count(df["prompt"].fillna("").astype(str).tolist()),
        "output_tokens": count(df["answer"].fillna("").astype(str).tolist()),
    })
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp")
    table.to_parquet(tmp, index=False)
    tmp.replace(cache)
    return table


def filter_lengths(df: pd.DataFrame, cfg: LengthConfig) -> pd.DataFrame:
    p, o = df["prompt_tokens"], df["output_tokens"]
    keep = (p >= cfg.min_tokens) & (o >= cfg.min_tokens) & (p <= cfg.max_prompt_tokens)
    keep &= (p + o) <= cfg.max_total_tokens
    out = df[keep].reset_index(drop=True)
    if out.empty:
        raise DataError(f"no request left after the length filters ({len(df)} before)",
                        "loosen min_tokens / max_prompt_tokens / max_total_tokens")
    return out


def rundir_lengths(path: str, cfg: LengthConfig) -> pd.DataFrame:
    """One row per sample of a run directory: prompt tokens, sampled length, and the leave-one-out
    median length of the same prompt's other samples (the per-prompt oracle predictor)."""
    from lenpred.data.rundir import RunDir

    run = RunDir.open(path)
    prompts = run.prompts()[["prompt_id", "n_prompt_tokens"]]
    samples = run.samples(columns=["prompt_id", "sample_idx", "n_tokens", "stop_reason"])
    if not cfg.include_truncated:
        samples = samples[samples["stop_reason"] == "eos"]
    df = samples.merge(prompts, on="prompt_id", how="inner")
    if df.empty:
        raise DataError(f"run directory {path} has no samples to build a workload from")
    df = df.rename(columns={"n_prompt_tokens": "prompt_tokens", "n_tokens": "output_tokens"})
    global_median = float(df["output_tokens"].median())
    loo = np.full(len(df), global_median)
    pos = 0
    df = df.sort_values(["prompt_id"], kind="stable").reset_index(drop=True)
    for _, g in df.groupby("prompt_id", sort=False):
        v = g["output_tokens"].to_numpy(dtype=float)
        if len(v) > 1:
            for i in range(len(v)):
                loo[pos + i] = float(np.median(np.delete(v, i)))
        pos += len(v)
    df["loo_median"] = loo
    return df[["prompt_id", "prompt_tokens", "output_tokens", "loo_median"]]


def _parse_repred(x: Any) -> tuple[tuple[int, float], ...]:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ()
    if isinstance(x, str):
        x = json.loads(x) if x.strip() else []
    return tuple((int(g), float(r)) for g, r in x)


def read_trace(path: str | Path) -> pd.DataFrame:
    """A request table from CSV, Parquet or JSONL. Columns: ``prompt_tokens``, ``output_tokens``
    (required); ``arrival_s``, ``predicted_tokens``, ``predicted_spread``, ``repredictions`` (a JSON
    list of [tokens_generated, predicted_remaining] pairs), ``id`` (optional)."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"request file {p} not found")
    suffix = p.suffix.lower()
    try:
        if suffix == ".parquet":
            df = pd.read_parquet(p)
        elif suffix == ".csv":
            df = pd.read_csv(p)
        elif suffix in (".jsonl", ".json"):
            df = pd.read_json(p, lines=suffix == ".jsonl")
        else:
            raise DataError(f"{p}: unknown request file type {suffix!r}", "use .csv, .parquet or .jsonl")
    except (ValueError, OSError) as e:
        raise DataError(f"cannot read {p} ({e})".splitlines()[0]) from e
    if "arrival" in df.columns and "arrival_s" not in df.columns:
        df = df.rename(columns={"arrival": "arrival_s"})
    missing = [c for c in ("prompt_tokens", "output_tokens") if c not in df.columns]
    if missing:
        raise DataError(f"{p} lacks column(s) {missing}", f"columns: {', '.join(TRACE_COLUMNS)}")
    for c in ("prompt_tokens", "output_tokens"):
        if df[c].isna().any():
            raise DataError(f"{p}: column {c} has missing values")
    return df.reset_index(drop=True)


# ---------------------------------------------------------------- prediction noise
def lognormal_sigma(rel_mae: float) -> float:
    """sigma such that E|exp(sigma Z) - 1| = rel_mae (Z standard normal)."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    if rel_mae <= 0:
        return 0.0

    def f(s: float) -> float:
        return math.exp(s * s / 2) * (2 * norm.cdf(s) - 1) - rel_mae

    return float(brentq(f, 1e-9, 20.0))


def _noisy(true: np.ndarray, cfg: PredictionConfig, rng: np.random.Generator, mean_true: float
           ) -> tuple[np.ndarray, np.ndarray]:
    """(pred, spread) for the lognormal / additive models applied to ``true`` (tokens)."""
    if cfg.model == "lognormal":
        sigma = lognormal_sigma(float(cfg.rel_mae or 0.0))
        pred = true * np.exp(sigma * rng.standard_normal(true.shape))
        spread = pred * math.sqrt(math.expm1(sigma * sigma))
        return pred, spread
    mae = cfg.mae if cfg.mae is not None else float(cfg.rel_mae or 0.0) * mean_true
    s = mae * math.sqrt(math.pi / 2)
    pred = np.maximum(true + s * rng.standard_normal(true.shape), 1.0)
    return pred, np.full(true.shape, s)


def predict_lengths(
    output: np.ndarray,
    cfg: PredictionConfig,
    rng: np.random.Generator,
    *,
    given: np.ndarray | None = None,
    given_spread: np.ndarray | None = None,
    prompt_median: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Predicted output tokens (and a spread, or None) for true lengths ``output`` (n,)."""
    true = output.astype(np.float64)
    if cfg.model == "oracle":
        return true.copy(), None
    if cfg.model == "constant":
        return np.full_like(true, true.mean()), np.full_like(true, true.std())
    if cfg.model == "input":
        if given is None or np.isnan(given).any():
            raise DataError("prediction model 'input' needs a predicted_tokens value for every request",
                            "add the column to the trace, or pick a noise model")
        return given.astype(np.float64), given_spread
    if cfg.model == "prompt-median":
        if prompt_median is None:
            raise ConfigError("prediction model 'prompt-median' needs a run-directory workload",
                              "set workload.lengths.source to 'rundir'")
        return prompt_median.astype(np.float64), None
    return _noisy(true, cfg, rng, float(true.mean()))


def make_repredictions(output: np.ndarray, cfg: PredictionConfig, rng: np.random.Generator
                       ) -> list[tuple[tuple[int, float], ...]]:
    """Every ``repredict_every`` generated tokens, a fresh prediction of the remaining length
    (the same noise model applied to the true remaining length)."""
    k = cfg.repredict_every
    out: list[tuple[tuple[int, float], ...]] = []
    if k is None:
        return [()] * len(output)
    mean_true = float(np.mean(output))
    for n in output.tolist():
        gs = np.arange(k, n, k)
        if gs.size == 0:
            out.append(())
            continue
        rem = (n - gs).astype(np.float64)
        if cfg.model in ("lognormal", "additive"):
            pr, _ = _noisy(rem, cfg, rng, mean_true)
        else:
            pr = rem
        out.append(tuple(zip(gs.tolist(), pr.tolist(), strict=True)))
    return out


# ---------------------------------------------------------------- the workload
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
        df = _sample_rows(filter_lengths(rundir_lengths(str(lc.path), lc), lc), n, rng_len)
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
            extra["given_repred"] = [_parse_repred(x) for x in df["repredictions"]]
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
        order = np.argsort(trace_times, kind="stable")
        prompt, output, trace_times = prompt[order], output[order], trace_times[order]
        for k in ("given_pred", "given_spread"):
            if k in extra:
                extra[k] = extra[k][order]
        if "given_repred" in extra:
            extra["given_repred"] = [extra["given_repred"][i] for i in order]
        arrivals = trace_times - trace_times[0]
        span = float(arrivals[-1])
        trace_rate = (n - 1) / span if span > 0 else None
        if trace_rate is None:
            raise DataError("a trace whose requests all arrive at once has no rate to rescale",
                            "use arrival process 'burst'")
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
        given_repred=[_parse_repred(x) for x in df["repredictions"]] if "repredictions" in df else None,
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
