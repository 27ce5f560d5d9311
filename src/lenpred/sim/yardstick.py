"""A yardstick that measures a policy, not the length of a run (issue 30).

Above capacity nothing is stationary: the backlog, and with it every P99, grows with the number of
requests simulated, so a percentage measured there describes the run as much as the policy. The
yardstick measures where a figure has a limit:

* **steady loads below capacity** (0.90-0.99x), with the number of requests doubled until the
  short-request and overall P99 stop moving (:func:`converge`); the figures are taken over the
  requests arriving between the 10% and 90% points of the run (:func:`steady_mask`: the empty
  start and the final drain, where nobody arrives behind a request, are left out);
* **overload episodes that end** (:class:`lenpred.sim.arrivals.Episode`): a base load below
  capacity, a burst above it, the base again for long enough to drain the backlog, and the run
  simulated until every request finished. The figures are taken over every request arriving from
  the burst's start to the episode's end (:func:`episode_mask`): the warm-up before it is a
  stationary 0.7x load where no order matters (only dilution), and every later request is one the
  backlog can delay. The window is fixed in seconds, the same for every arm;
* **SLO attainment** (DistServe: TTFT and TPOT both within their bounds) per output-length class
  beside the P99s, and **goodput**: the highest load at which >= 90% attain, found by bisection
  (:func:`goodput_search`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lenpred.errors import ConfigError
from lenpred.sim.config import ArrivalConfig, MetricsConfig
from lenpred.sim.engine import SimResult
from lenpred.sim.episode import Episode
from lenpred.sim.summary import attainment_by_class, latency_arrays

TOL = 0.05  # the convergence rule: every checked P99 moved less than 5% between successive N
GROW = 1.5  # a figure that grew by >= 1.5x at each of two successive doublings of N diverges (no steady value)
STEADY_TRIM = 0.1  # steady runs: figures over the arrivals between the 10% and 90% points
EPISODE_WARMUP_S = 60.0  # seconds at the base load before a burst
CONVERGE_KEYS = ("short_p99_s", "p99_s")


# ---------------------------------------------------------------- convergence rule
@dataclass
class Convergence:
    """The N a cell settled on: ``n`` is the last N run (its figures are the cell's), ``converged``
    whether the checked figures moved < ``tol`` from the N before it; ``history`` every (N, figures);
    ``diverging`` the figures left out of the check because they grow with N (:func:`diverging`)."""

    n: int
    converged: bool
    tol: float
    history: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    diverging: list[str] = field(default_factory=list)

    @property
    def figures(self) -> dict[str, float]:
        return self.history[-1][1]

    def moves(self) -> list[float]:
        """The largest relative move between each N and the one before it, over the figures checked at
        the end (the diverging ones left out)."""
        keep = [k for k in self.figures if k not in self.diverging]
        sub = [{k: f.get(k, math.nan) for k in keep} for _, f in self.history]
        return [largest_move(a, b) for a, b in zip(sub, sub[1:], strict=False)]


def largest_move(before: Mapping[str, float], after: Mapping[str, float]) -> float:
    """max over the keys of |after - before| / |before| (inf where a figure is missing, zero or not
    finite in ``before``, unless both are exactly equal)."""
    worst = 0.0
    for k in before:
        a, b = before.get(k), after.get(k)
        if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
            return math.inf
        if a == b:
            continue
        worst = max(worst, abs(b - a) / abs(a) if a != 0 else math.inf)
    return worst


def diverging(history: list[tuple[int, dict[str, float]]], grow: float = GROW) -> list[str]:
    """The figures that grew by at least ``grow`` x at each of the last two doublings of N: a queue that
    is not stable at this load (its P99 is the run's backlog, which grows with the run). They have no
    steady value to converge to; the rule reports them and checks the rest."""
    if len(history) < 3:
        return []
    (_, a), (_, b), (_, c) = history[-3:]
    return sorted(k for k in c if a.get(k, 0) > 0 and b.get(k, 0) >= grow * a[k] and c[k] >= grow * b[k])


def converge(run: Callable[[int], Mapping[str, float]], n0: int, n_max: int, tol: float = TOL) -> Convergence:
    """Run at N = n0, 2 n0, 4 n0, ... until every figure ``run(N)`` returns moved < ``tol``
    (relative) from the N before; stop at the largest N <= ``n_max`` and say it did not converge.
    ``run`` returns the figures to check (e.g. each arm's short and overall P99). A figure that grows
    by >= :data:`GROW` x at two successive doublings is diverging (:func:`diverging`): it is recorded and
    left out of the check from then on, so one unstable arm does not hold every other arm's cell to
    the cap."""
    if not (isinstance(n0, int) and n0 >= 1):
        raise ConfigError(f"the first N must be an integer >= 1, got {n0!r}", "pass --n0 1 or more")
    if not (isinstance(n_max, int) and n_max >= n0):
        raise ConfigError(f"the largest N must be an integer >= the first N ({n0}), got {n_max!r}",
                          "raise --n-max")
    if not (math.isfinite(tol) and 0 < tol < 1):
        raise ConfigError(f"the convergence tolerance must be in (0, 1), got {tol!r}", "use a fraction such as 0.05")
    out = Convergence(n=n0, converged=False, tol=tol)
    n = n0
    while True:
        out.history.append((n, dict(run(n))))
        out.n = n
        out.diverging = sorted(set(out.diverging) | set(diverging(out.history)))
        if len(out.history) > 1:
            (_, a), (_, b) = out.history[-2:]
            keep = [k for k in b if k not in out.diverging]
            if largest_move({k: a.get(k, math.nan) for k in keep}, {k: b[k] for k in keep}) < tol:
                out.converged = True
                return out
        if 2 * n > n_max:
            return out
        n *= 2


# ---------------------------------------------------------------- goodput
@dataclass
class Goodput:
    """The highest load (multiple of capacity) at which >= ``target`` of the requests attained the
    SLO. ``load`` lies in ``[lo, hi)``: None when even the lowest probe failed (goodput < lo), the
    highest probe when it passed (goodput >= hi, ``hi`` inf). ``resolved``: hi - lo <= tol."""

    load: float | None
    lo: float
    hi: float
    resolved: bool
    target: float
    tol: float
    probes: list[tuple[float, float]] = field(default_factory=list)


def goodput_search(attain_at: Callable[[float], float], lo: float, hi: float, *, target: float = 0.9,
                   tol: float = 0.01, max_probes: int = 10) -> Goodput:
    """Bisection over the load for the highest one whose attainment is >= ``target``: probe ``lo``
    and ``hi`` (each probe is one run), then halve the bracket until it is narrower than ``tol``
    or ``max_probes`` runs were made. Assumes attainment falls with load (a noisy probe can break
    that; the probes are returned to check)."""
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo < hi):
        raise ConfigError(f"the goodput search needs 0 < lo < hi, got lo={lo!r}, hi={hi!r}",
                          "give a positive lower load below the upper one")
    if not (math.isfinite(tol) and tol > 0):
        raise ConfigError(f"the goodput tolerance must be > 0, got {tol!r}", "use a positive tolerance such as 0.02")
    if not (isinstance(max_probes, int) and max_probes >= 2):
        raise ConfigError(f"the goodput search needs max_probes >= 2 (lo and hi), got {max_probes!r}",
                          "allow 2 or more probes")
    if not 0 < target <= 1:
        raise ConfigError(f"the attainment target must be in (0, 1], got {target!r}", "use a fraction such as 0.9")
    probes: list[tuple[float, float]] = []

    def probe(x: float) -> bool:
        a = float(attain_at(x))
        probes.append((x, a))
        return a >= target

    if not probe(lo):
        return Goodput(None, 0.0, lo, False, target, tol, probes)
    if probe(hi):
        return Goodput(hi, hi, math.inf, False, target, tol, probes)
    while hi - lo > tol and len(probes) < max_probes:
        mid = 0.5 * (lo + hi)
        if probe(mid):
            lo = mid
        else:
            hi = mid
    return Goodput(lo, lo, hi, hi - lo <= tol + 1e-12, target, tol, probes)


# ---------------------------------------------------------------- windows and figures
def steady_mask(res: SimResult, trim: float = STEADY_TRIM) -> np.ndarray:
    """(n,) bool: the requests arriving between the ``trim`` and ``1 - trim`` points of the run."""
    order = np.argsort(res.arrival, kind="stable")
    rank = np.empty(res.n, dtype=np.int64)
    rank[order] = np.arange(res.n)
    return (rank >= int(trim * res.n)) & (rank < res.n - int(trim * res.n))


def episode_mask(res: SimResult, ep: Episode) -> np.ndarray:
    """(n,) bool: the requests arriving from the burst's start on (the run ends at the episode's end)."""
    return res.arrival >= ep.start


def drain_s(res: SimResult, ep: Episode) -> float:
    """Seconds after the burst's end until every request that arrived up to it had finished."""
    m = res.arrival <= ep.burst_end
    return float(np.nanmax(res.t_finish[m]) - ep.burst_end) if m.any() else 0.0


def _q(x: np.ndarray, p: float) -> float | None:
    return float(np.percentile(x, p)) if x.size else None


def cell_figures(res: SimResult, short_threshold: float, metrics: MetricsConfig, mask: np.ndarray
                 ) -> dict[str, Any]:
    """The yardstick's figures over the requests in ``mask`` (seconds): short-request P99 and P50,
    overall P99 and P50, TTFT P99, SLO attainment of all / short / long requests."""
    e2e = latency_arrays(res)["e2e"]
    done = mask & np.isfinite(res.t_finish)
    short = res.output < short_threshold
    att = attainment_by_class(res, short_threshold, metrics.slo_ttft_s, metrics.slo_tpot_s, mask)
    ttft = (res.t_first - res.arrival)[done]
    return {
        "n_window": int(mask.sum()), "n_short": int((mask & short).sum()),
        "short_p99_s": _q(e2e[done & short], 99), "short_p50_s": _q(e2e[done & short], 50),
        "p99_s": _q(e2e[done], 99), "p50_s": _q(e2e[done], 50), "ttft_p99_s": _q(ttft, 99),
        "attain_all": att["all"], "attain_short": att["short"], "attain_long": att["long"],
        "preemptions_per_req": float(res.n_preempt[mask].sum()) / max(int(mask.sum()), 1),
    }


# ---------------------------------------------------------------- the best prediction-free arm; batch means
FREE_OVERALL = 1.05  # best_free: an arm's overall P99 within this x the lowest of the prediction-free arms
BATCHES = 10  # batch_figures: contiguous batches of the steady window, by arrival


def best_free(arms: Mapping[str, Mapping[str, Any]], free: Sequence[str], *, key: str = "short_p99_s",
              overall: str = "p99_s", slack: float = FREE_OVERALL) -> str:
    """The reference of a cell and seed (issue 37): among the prediction-free arms ``free`` present in
    ``arms`` (arm -> figures), those whose overall P99 is within ``slack`` x the lowest overall P99 of any of
    them; of those, the lowest short-request P99 (ties: the first in ``free``'s order). One rule, the
    same in every cell: the strongest scheduler a router can run without a prediction, never one that
    buys its short P99 with the long requests' tail."""
    have = [f for f in free if f in arms and arms[f].get(overall) is not None and arms[f].get(key) is not None]
    if not have:
        raise ConfigError(f"no prediction-free arm with {key} and {overall} among {sorted(arms)}",
                          f"run at least one of {', '.join(free)} in the cell")
    floor = min(float(arms[f][overall]) for f in have)
    ok = [f for f in have if float(arms[f][overall]) <= slack * floor]
    return min(ok, key=lambda f: (float(arms[f][key]), ok.index(f)))


def batch_figures(res: SimResult, short_threshold: float, mask: np.ndarray, k: int = BATCHES
                  ) -> dict[str, list[float | None]]:
    """Batch means' raw material: the requests in ``mask`` in arrival order, cut into ``k`` contiguous
    batches of (nearly) equal size, and each batch's short-request P99, overall P99 and short P50 (s).
    The same cut for every arm of a cell (same requests, same arrivals), so a ratio of two arms can be
    taken batch by batch (:func:`batch_ratio`)."""
    if not (isinstance(k, int) and k >= 2):
        raise ConfigError(f"batch means need k >= 2 batches, got {k!r}", "use k = 10")
    e2e = latency_arrays(res)["e2e"]
    idx = np.flatnonzero(mask)
    idx = idx[np.argsort(res.arrival[idx], kind="stable")]
    short = res.output < short_threshold
    out: dict[str, list[float | None]] = {"short_p99_s": [], "p99_s": [], "short_p50_s": []}
    for part in np.array_split(idx, k):
        done = part[np.isfinite(e2e[part])]
        sh = done[short[done]]
        out["short_p99_s"].append(_q(e2e[sh], 99))
        out["p99_s"].append(_q(e2e[done], 99))
        out["short_p50_s"].append(_q(e2e[sh], 50))
    return out


@dataclass(frozen=True)
class BatchRatio:
    """The ratio of two arms' figure by batch means: ``mean`` of the k per-batch ratios, its two-sided
    ``level`` Student-t interval [``lo``, ``hi``], and ``k``."""

    mean: float
    lo: float
    hi: float
    k: int
    level: float = 0.95


def batch_ratio(num: Sequence[float | None], den: Sequence[float | None], level: float = 0.95) -> BatchRatio | None:
    """Batch means of num / den (two arms' per-batch figures from :func:`batch_figures`); None with fewer
    than two batches where both are defined and den > 0."""
    from scipy import stats

    if len(num) != len(den):
        raise ConfigError(f"batch figures of different lengths ({len(num)} and {len(den)})",
                          "cut both arms' windows with the same k (batch_figures)")
    r = np.array([a / b for a, b in zip(num, den, strict=True) if a is not None and b is not None and b > 0])
    if r.size < 2:
        return None
    m, se = float(r.mean()), float(r.std(ddof=1) / math.sqrt(r.size))
    h = float(stats.t.ppf(0.5 + level / 2, r.size - 1)) * se
    return BatchRatio(m, m - h, m + h, int(r.size), level)


# ---------------------------------------------------------------- episodes in capacity units
def tail_for(base: float, peak: float, burst_s: float) -> float:
    """Seconds at the base load after a burst: twice the time the base load's spare capacity needs
    to serve the burst's excess work ((peak - 1) x burst_s capacity-seconds at 1 - base), >= 60 s."""
    return max(60.0, 2.0 * max(peak - 1.0, 0.0) * burst_s / (1.0 - base))


def episode_arrival(base: float, peak: float, burst_s: float, *, inner: str = "poisson", cv: float = 1.0,
                    start_s: float = EPISODE_WARMUP_S, tail_s: float | None = None) -> ArrivalConfig:
    """The arrival config of an episode given in capacity units: ``base`` (the run's load, < 1) and a
    burst at ``peak`` (>= base) for ``burst_s`` seconds; the tail from :func:`tail_for` unless given."""
    if not (math.isfinite(base) and 0 < base < 1):
        raise ConfigError(f"an episode's base load must be in (0, 1) x capacity (it must drain), got {base!r}",
                          "give the episode a base load below capacity, e.g. 0.7")
    if not (math.isfinite(peak) and peak >= base):
        raise ConfigError(f"an episode's burst load must be >= its base load {base:g}, got {peak!r}",
                          "a burst below the base is not a burst")
    tail = round(tail_for(base, peak, burst_s), 6) if tail_s is None else tail_s
    return ArrivalConfig(process="episode", inner=inner, cv=cv, burst_factor=peak / base, burst_start_s=start_s,
                         burst_s=burst_s, tail_s=tail)


__all__ = [
    "BATCHES", "FREE_OVERALL", "BatchRatio", "Convergence", "Goodput", "batch_figures", "batch_ratio", "best_free",
    "cell_figures", "converge", "diverging", "drain_s", "episode_arrival", "episode_mask",
    "goodput_search", "largest_move", "steady_mask", "tail_for",
]
