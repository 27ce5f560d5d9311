"""Synthetic decode-length generators with exact ground truth, and synthetic run directories.

Two mechanisms from the theory, each with an exact per-prompt length distribution (pmf), so that the
bound, the affine law, the segment CV and the hazard of a synthetic run are known to the token:

:class:`RampingHazard`
    a stopped process: no stop during an onset of d_i steps, then a per-step stopping probability
    that ramps like a Weibull hazard of shape k (P(L > t) = exp(-((t - d_i) / lambda_i)^k)). The pair
    (d_i, lambda_i) is set so that sd_i = alpha * mu_i + b exactly. k = 3.6 gives near-normal lengths;
    k = 1 is a *constant* hazard, i.e. geometric lengths (sd ~ mu, skew 2): the counter-example.
:class:`SegmentSum`
    a response of N_i segments, N_i = max(1, round(Normal(nbar_i, (cv * nbar_i)^2))), each segment
    1 + NegBin tokens with a given mean and sd. Then sd(L) ~ cv * mu + const: alpha is the segment
    count's CV, the claim the analysis tests on real runs.

:func:`write_synthetic_run` samples K lengths per prompt (stepping the hazard, or adding segments),
truncates at ``max_new_tokens`` like an engine would, renders text whose paragraphs are the segments
(one word per token), writes a normal run directory and returns the :class:`Truth`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from os import PathLike
from typing import Any

import numpy as np
import pandas as pd
from scipy import special, stats

from lenpred.data.rundir import RunDir

# Lengths beyond the grid of an exact pmf have probability below this.
_TAIL = 1e-12


def synthetic_card(generator: dict[str, Any], max_new_tokens: int, seed: int, k: int) -> dict[str, Any]:
    """A minimal run card for a synthetic run; the generator's parameters are part of its identity."""
    return {
        "model": {"id": "synthetic"},
        "prompts": {"source": "synthetic", "generator": generator},
        "sampling": {
            "temperature": 1.0,
            "top_p": 1.0,
            "top_k": 0,
            "max_new_tokens": int(max_new_tokens),
            "seed": int(seed),
            "samples_per_prompt": int(k),
        },
        "engine": {"name": "synthetic", "version": "0"},
    }


# --------------------------------------------------------------------------------------------- generators
@dataclass(frozen=True)
class RampingHazard:
    """Onset d_i, then a Weibull-shaped ramp of the per-step stopping probability (see module doc)."""

    mu: np.ndarray  # (P,) per-prompt mean of the continuous law
    alpha: float = 0.15
    b: float = 12.0
    shape: float = 3.6
    name: str = field(default="ramping_hazard", init=False)

    def __post_init__(self) -> None:
        if np.any(self.onset < -1e-9):
            raise ValueError(
                "sd = alpha*mu + b is too large for this Weibull shape at the smallest mu (negative onset); "
                "raise mu or lower alpha / b"
            )

    @property
    def sigma(self) -> np.ndarray:
        return self.alpha * np.asarray(self.mu) + self.b

    @property
    def scale(self) -> np.ndarray:
        g1, g2 = special.gamma(1 + 1 / self.shape), special.gamma(1 + 2 / self.shape)
        return self.sigma / np.sqrt(g2 - g1**2)

    @property
    def onset(self) -> np.ndarray:
        return np.asarray(self.mu) - self.scale * special.gamma(1 + 1 / self.shape)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "n_prompts": len(self.mu),
            "mu_range": [float(np.min(self.mu)), float(np.max(self.mu))],
            "alpha": self.alpha,
            "b": self.b,
            "shape": self.shape,
        }

    def grid(self) -> int:
        return (
            int(
                np.ceil(np.max(np.maximum(self.onset, 0) + self.scale * (-np.log(_TAIL)) ** (1 / self.shape)))
            )
            + 2
        )

    def survival(self, t_max: int) -> np.ndarray:
        """(P, t_max + 1): P(L > t) for t = 0..t_max."""
        t = np.arange(t_max + 1)[None, :]
        z = np.clip(t - np.maximum(self.onset, 0)[:, None], 0, None) / self.scale[:, None]
        return np.exp(-(z**self.shape))

    def pmf(self, t_max: int | None = None) -> np.ndarray:
        t_max = t_max or self.grid()
        s = self.survival(t_max)
        p = np.zeros_like(s)
        p[:, 1:] = s[:, :-1] - s[:, 1:]
        p[:, -1] += s[:, -1]  # what is left beyond the grid (< _TAIL) stops at its last step
        return p

    def hazard(self, t_max: int) -> np.ndarray:
        """(P, t_max + 1): h_t = P(L = t | L >= t); h_0 = 0."""
        s = self.survival(t_max)
        h = np.zeros_like(s)
        with np.errstate(divide="ignore", invalid="ignore"):
            h[:, 1:] = np.where(s[:, :-1] > 0, 1.0 - s[:, 1:] / s[:, :-1], 1.0)
        return h

    def sample(self, k: int, rng: np.random.Generator, cap: int) -> tuple[np.ndarray, list[list[int]]]:
        """(P, K) lengths, stepping the process: at each step every running sample stops w.p. h_t.

        Returns latent lengths clipped at cap + 1 (a value > cap means 'did not stop by the cap') and
        paragraph lengths for the text (segments of ~30 tokens; no role in this mechanism).
        """
        p_n = len(self.mu)
        t_max = min(cap + 1, self.grid())
        h = self.hazard(t_max)
        length = np.full(p_n * k, t_max, dtype=np.int64)
        prompt = np.repeat(np.arange(p_n), k)
        alive = np.arange(p_n * k)
        for t in range(1, t_max + 1):
            if alive.size == 0:
                break
            stop = rng.random(alive.size) < h[prompt[alive], t]
            length[alive[stop]] = t
            alive = alive[~stop]
        if t_max < cap + 1:  # grid ended before the cap: the (< _TAIL) remainder stops at the last step
            length[alive] = t_max
        segs = [_random_paragraphs(int(n), rng, 30.0) for n in length]
        return length.reshape(p_n, k), segs


@dataclass(frozen=True)
class SegmentSum:
    """L = sum of N segment lengths; N near-normal with CV ``count_cv``; segments 1 + NegBin."""

    mean_segments: np.ndarray  # (P,) nbar_i
    count_cv: float = 0.3
    seg_mean: float = 25.0
    seg_sd: float = 10.0
    name: str = field(default="segment_sum", init=False)

    def __post_init__(self) -> None:
        if self.seg_sd**2 <= self.seg_mean - 1:
            raise ValueError("segment lengths are 1 + NegBin: seg_sd^2 must exceed seg_mean - 1")

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "n_prompts": len(self.mean_segments),
            "mean_segments_range": [float(np.min(self.mean_segments)), float(np.max(self.mean_segments))],
            "count_cv": self.count_cv,
            "seg_mean": self.seg_mean,
            "seg_sd": self.seg_sd,
        }

    def _nb(self) -> tuple[float, float]:
        m, v = self.seg_mean - 1.0, self.seg_sd**2
        p = m / v
        return m * p / (1 - p), p  # (r, p) of numpy / scipy's negative binomial

    def n_max(self) -> int:
        s = self.count_cv * np.max(self.mean_segments)
        return int(np.ceil(np.max(self.mean_segments) + 8 * s)) + 1

    def count_pmf(self) -> np.ndarray:
        """(P, n_max + 1): P(N = n); N = max(1, round(Normal(nbar, (cv * nbar)^2)))."""
        n = np.arange(self.n_max() + 1)[None, :]
        nbar = np.asarray(self.mean_segments, float)[:, None]
        s = self.count_cv * nbar
        upper = stats.norm.cdf((n + 0.5 - nbar) / s)
        lower = np.where(n <= 1, 0.0, stats.norm.cdf((n - 0.5 - nbar) / s))
        p = np.where(n >= 1, upper - lower, 0.0)
        return p / p.sum(1, keepdims=True)

    def segment_pmf(self) -> np.ndarray:
        r, p = self._nb()
        x_max = int(stats.nbinom.ppf(1 - _TAIL, r, p)) + 2
        pmf = np.zeros(x_max + 1)
        pmf[1:] = stats.nbinom.pmf(np.arange(x_max), r, p)
        return pmf / pmf.sum()

    def pmf(self) -> np.ndarray:
        """(P, T + 1) exact pmf of L = sum of N segments, by the characteristic function (FFT)."""
        pn, px = self.count_pmf(), self.segment_pmf()
        support = (pn.shape[1] - 1) * (len(px) - 1)
        size = 1 << int(np.ceil(np.log2(support + 1)))  # no wrap-around: the grid holds the full support
        phi = np.fft.rfft(px, size)  # (F,)
        powers = phi[None, :] ** np.arange(pn.shape[1])[:, None]  # (n_max + 1, F)
        pl = np.fft.irfft(pn.astype(complex) @ powers, size)  # (P, size)
        pl = np.clip(pl, 0.0, None)
        last = int(np.max(np.nonzero(pl.max(0) > _TAIL)[0])) + 1
        pl = pl[:, : last + 1]
        return pl / pl.sum(1, keepdims=True)

    def count_cv_exact(self) -> np.ndarray:
        pn = self.count_pmf()
        n = np.arange(pn.shape[1])
        m = pn @ n
        return np.sqrt(pn @ n**2 - m**2) / m

    def sample(self, k: int, rng: np.random.Generator, cap: int) -> tuple[np.ndarray, list[list[int]]]:
        p_n = len(self.mean_segments)
        nbar = np.repeat(np.asarray(self.mean_segments, float), k)
        count = np.maximum(1, np.rint(rng.normal(nbar, self.count_cv * nbar))).astype(int)
        r, p = self._nb()
        seg = 1 + rng.negative_binomial(r, p, size=int(count.sum()))
        segs = [s.tolist() for s in np.split(seg, np.cumsum(count)[:-1])]
        length = np.array([sum(s) for s in segs])
        return length.reshape(p_n, k), segs


# --------------------------------------------------------------------------------------------- factories
def ramping_hazard(
    n_prompts: int,
    alpha: float = 0.15,
    b: float = 12.0,
    shape: float = 3.6,
    mu_range: tuple[float, float] = (150.0, 450.0),
    seed: int = 0,
) -> RampingHazard:
    """Prompts with means spread uniformly over ``mu_range`` (drawn with ``seed``)."""
    mu = np.random.default_rng(seed).uniform(*mu_range, n_prompts)
    return RampingHazard(mu=mu, alpha=alpha, b=b, shape=shape)


def constant_hazard(
    n_prompts: int, mu_range: tuple[float, float] = (150.0, 450.0), seed: int = 0
) -> RampingHazard:
    """Memoryless stopping: geometric lengths with per-prompt means in ``mu_range`` (sd = mu)."""
    return ramping_hazard(n_prompts, alpha=1.0, b=0.0, shape=1.0, mu_range=mu_range, seed=seed)


def segment_sum(
    n_prompts: int,
    count_cv: float = 0.3,
    mean_segments: tuple[float, float] = (5.0, 18.0),
    seg_mean: float = 25.0,
    seg_sd: float = 10.0,
    seed: int = 0,
) -> SegmentSum:
    nbar = np.random.default_rng(seed).uniform(*mean_segments, n_prompts)
    return SegmentSum(mean_segments=nbar, count_cv=count_cv, seg_mean=seg_mean, seg_sd=seg_sd)


Generator = RampingHazard | SegmentSum


# --------------------------------------------------------------------------------------------- ground truth
def _stats_from_pmf(p: np.ndarray) -> dict[str, np.ndarray]:
    t = np.arange(p.shape[1], dtype=float)
    mean = p @ t
    var = p @ t**2 - mean**2
    median = np.argmax(p.cumsum(1) >= 0.5, axis=1).astype(float)
    dev = np.abs(t[None, :] - median[:, None])
    return {
        "mean": mean,
        "sd": np.sqrt(var),
        "var": var,
        "median": median,
        "mae": (p * dev).sum(1),
        "rel": (p * dev / np.maximum(t, 1.0)[None, :]).sum(1),
    }


def _cap_pmf(p: np.ndarray, cap: int) -> np.ndarray:
    """The pmf of min(L, cap): the mass beyond the cap piles up at the cap."""
    if p.shape[1] <= cap + 1:
        return p
    q = p[:, : cap + 1].copy()
    q[:, cap] += p[:, cap + 1 :].sum(1)
    return q


@dataclass(frozen=True)
class Truth:
    """Exact per-prompt quantities of a synthetic run (latent and capped) and their aggregates."""

    per_prompt: pd.DataFrame
    pmf: np.ndarray  # (P, T + 1) latent pmf
    cap: int
    k: int

    def summary(self) -> dict[str, float]:
        pp = self.per_prompt
        slope, intercept = np.polyfit(pp["mean"], pp["sd"], 1)
        out = {
            "oracle_mae": float(pp["mae"].mean()),
            "relative_mae": float(pp["mae"].sum() / pp["mean"].sum()),
            "mean_relative_error": float(pp["rel"].mean()),
            "oracle_mse": float(pp["var"].mean()),
            "mean_length": float(pp["mean"].mean()),
            "alpha": float(slope),
            "b": float(intercept),
            "capped_oracle_mae": float(pp["capped_mae"].mean()),
            "capped_oracle_mse": float(pp["capped_var"].mean()),
            "truncated_share": float(pp["p_truncated"].mean()),
        }
        if "count_cv" in pp:
            out["segment_cv"] = float(pp["count_cv"].mean())
        return out

    def pooled_hazard(self) -> np.ndarray:
        """Exact h_t of the pooled run (every prompt weighs K samples): sum_i p_i(t) / sum_i P_i(L >= t)."""
        p = self.pmf.sum(0)
        at_risk = p[::-1].cumsum()[::-1]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(at_risk > 0, p / at_risk, np.nan)


def truth(gen: Generator, cap: int, k: int, prompt_ids: list[str], runaway: float = 0.0) -> Truth:
    """Exact truth; with ``runaway`` the latent figures describe the responses that end, the capped
    ones the served lengths (runaway samples served at the cap)."""
    p = gen.pmf()
    latent = _stats_from_pmf(p)
    served = _cap_pmf(p, cap) * (1.0 - runaway)
    if runaway > 0:
        served = np.pad(served, ((0, 0), (0, max(0, cap + 1 - served.shape[1]))))
        served[:, cap] += runaway
    capped = _stats_from_pmf(served)
    pp = pd.DataFrame({"prompt_id": prompt_ids, **latent})
    for key, v in capped.items():
        pp[f"capped_{key}"] = v
    ends_late = p[:, cap + 1 :].sum(1) if p.shape[1] > cap + 1 else np.zeros(len(p))
    pp["p_truncated"] = runaway + (1.0 - runaway) * ends_late
    if isinstance(gen, SegmentSum):
        pp["count_cv"] = gen.count_cv_exact()
    return Truth(per_prompt=pp, pmf=p, cap=cap, k=k)


# --------------------------------------------------------------------------------------------- run writing
def _random_paragraphs(n_tokens: int, rng: np.random.Generator, mean: float) -> list[int]:
    """Split n tokens into paragraphs of geometric length (text filler for the hazard generator)."""
    out, left = [], n_tokens
    while left > 0:
        x = min(int(rng.geometric(1.0 / mean)), left)
        out.append(x)
        left -= x
    return out


def render(segments: list[int], limit: int | None = None) -> str:
    """Text of one response: one word per token, a segment = a one-sentence paragraph.

    With ``limit`` the text stops after that many tokens (a truncated response: its last segment is cut
    and has no full stop).
    """
    paras, used = [], 0
    for x in segments:
        if limit is not None and used + x > limit:
            rest = limit - used
            if rest > 0:
                paras.append(" ".join(["w"] * rest))
            break
        paras.append(" ".join(["w"] * (x - 1) + ["w."]))
        used += x
    return "\n\n".join(paras)


@dataclass(frozen=True)
class Sampling:
    """How a synthetic run is sampled (all of it recorded in the run's card): ``k`` samples per prompt,
    the cap ``max_new_tokens``, the ``seed``, and ``runaway``: the probability that a sample never stops
    (a repetition loop), a second mode that always runs into the cap, whatever the prompt."""

    k: int = 8
    max_new_tokens: int = 4096
    seed: int = 0
    runaway: float = 0.0


def write_synthetic_run(
    path: str | PathLike[str],
    gen: Generator,
    sampling: Sampling | None = None,
    *,
    shard_prompts: int = 100,
    text: bool = True,
) -> Truth:
    """Sample a run from ``gen`` under ``sampling`` (default ``Sampling()``) into a new run directory at
    ``path``; return its exact ground truth.

    Lengths beyond ``max_new_tokens`` are written as the engine would write them: n_tokens equal to the
    cap, stop_reason 'length' and the text cut there. ``shard_prompts`` prompts go into each samples
    shard; ``text=False`` writes empty response texts.
    """
    sampling = sampling or Sampling()
    k, max_new_tokens, seed, runaway = sampling.k, sampling.max_new_tokens, sampling.seed, sampling.runaway
    rng = np.random.default_rng(seed)
    n = len(gen.mu) if isinstance(gen, RampingHazard) else len(gen.mean_segments)
    width = max(5, math.ceil(math.log10(n + 1)))
    pids = [f"p{i:0{width}d}" for i in range(n)]
    desc = {**gen.describe(), "runaway": runaway} if runaway else gen.describe()  # part of the card identity
    rd = RunDir.create(path, synthetic_card(desc, max_new_tokens, seed, k))
    rd.write_prompts(
        pd.DataFrame(
            {
                "prompt_id": pids,
                "idx": np.arange(n),
                "text": [f"synthetic prompt {i}" for i in range(n)],
                "n_prompt_tokens": 0,
            }
        )
    )
    length, segs = gen.sample(k, rng, max_new_tokens)  # (P, K), P*K segment lists
    flat = length.reshape(-1)
    if runaway > 0:
        loops = rng.random(flat.size) < runaway
        flat = np.where(loops, max_new_tokens + 1, flat)
        for i in np.flatnonzero(loops):  # a loop repeats its first paragraph until the cap
            segs[i] = [segs[i][0]] * (max_new_tokens // max(segs[i][0], 1) + 1)
    truncated = flat > max_new_tokens
    rows = pd.DataFrame(
        {
            "prompt_id": np.repeat(pids, k),
            "sample_idx": np.tile(np.arange(k), n).astype(np.int32),
            "n_tokens": np.minimum(flat, max_new_tokens).astype(np.int32),
            "stop_reason": np.where(truncated, "length", "eos"),
            "text": [render(s, max_new_tokens) if text else "" for s in segs],
            "seed": seed,
        }
    )
    for start in range(0, n, shard_prompts):  # one shard per block of prompts, as a collector writes them
        rd.append_samples(rows.iloc[start * k : (start + shard_prompts) * k].reset_index(drop=True))
    return truth(gen, max_new_tokens, k, pids, runaway)
