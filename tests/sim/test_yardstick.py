"""The yardstick (issue 30): overload episodes that end, the convergence rule, SLO attainment per
class, the goodput search, and the bad inputs they refuse before anything runs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lenpred.errors import ConfigError, DataError
from lenpred.sim.arm import ArmPolicy
from lenpred.sim.arrivals import unit_arrivals
from lenpred.sim.config import (
    ArrivalConfig,
    ClusterConfig,
    MetricsConfig,
    PredictionConfig,
    SimConfig,
    SweepConfig,
    WorkloadConfig,
    parse_loads,
)
from lenpred.sim.engine import SimResult, Simulator
from lenpred.sim.episode import Episode
from lenpred.sim.workload import Workload
from lenpred.sim.yardstick import (
    batch_figures,
    batch_ratio,
    best_free,
    cell_figures,
    converge,
    diverging,
    drain_s,
    episode_arrival,
    episode_mask,
    goodput_search,
    steady_mask,
    tail_for,
)


# ---------------------------------------------------------------- episode arrivals
def _counts(t: np.ndarray, ep: Episode) -> list[float]:
    spans = ((0.0, ep.start), (ep.start, ep.burst_end), (ep.burst_end, ep.end))
    return [float(((t >= lo) & (t < hi)).sum()) for lo, hi in spans]


@pytest.mark.parametrize(("inner", "cv"), [("poisson", 1.0), ("gamma", 3.0)])
def test_episode_rates_before_during_after_the_burst(inner: str, cv: float) -> None:
    """Base 10 req/s, 3x burst: the count in each phase is its rate x its length within 5 standard
    deviations of a renewal process's count (sd ~ cv sqrt(mean))."""
    arr = ArrivalConfig(process="episode", inner=inner, cv=cv, burst_factor=3.0, burst_start_s=2000.0,
                        burst_s=1000.0, tail_s=2000.0)
    ep = Episode.of(arr)
    assert ep is not None and ep.end == 5000.0
    n = ep.requests_needed(10.0, cv)
    t = ep.times(unit_arrivals(n, arr, np.random.default_rng(7)), 10.0)
    got = _counts(t, ep)
    want = [10.0 * 2000, 30.0 * 1000, 10.0 * 2000]
    for g, w in zip(got, want, strict=True):
        assert abs(g - w) < 5 * cv * math.sqrt(w), (got, want)
    assert t[-1] >= ep.end  # requests_needed covers the episode


def test_episode_time_change_round_trips() -> None:
    """times() inverts the cumulative rate: expected(times(u)) == u, and a factor of 1 is no burst."""
    ep = Episode(factor=2.5, start=10.0, burst=4.0, tail=6.0)
    u = np.linspace(0.0, 400.0, 41)
    t = ep.times(u, 15.0)
    assert np.allclose([ep.expected(x, 15.0) for x in t], u)
    assert np.allclose(Episode(1.0, 10.0, 4.0, 6.0).times(u, 15.0), u / 15.0)
    assert ep.expected(ep.end, 15.0) == pytest.approx(15.0 * (20.0 + 1.5 * 4.0))


def _tiny_workload(arr: ArrivalConfig, n: int, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    prompt = np.clip(rng.lognormal(np.log(100), 0.5, n), 1, 400).astype(np.int64)
    output = np.clip(rng.lognormal(np.log(60), 0.8, n), 1, 400).astype(np.int64)
    return Workload.from_lengths(prompt, output, unit_arrivals(n, arr, rng), episode=Episode.of(arr))


def test_tiny_episode_runs_to_completion(toy_profile) -> None:
    """A 30 s episode (5 req/s, a 4x burst for 5 s) on one toy decode instance: nobody arrives after
    its end, every request finishes (the backlog drains), and the window starts at the burst."""
    arr = ArrivalConfig(process="episode", burst_factor=4.0, burst_start_s=5.0, burst_s=5.0, tail_s=20.0)
    ep = Episode.of(arr)
    assert ep is not None
    wl = _tiny_workload(arr, ep.requests_needed(5.0))
    reqs = wl.requests(5.0, wl.predictions(PredictionConfig(model="oracle")))
    assert reqs and max(r.arrival for r in reqs) <= ep.end < wl.arrival_times(5.0)[-1]
    res = Simulator(reqs, ClusterConfig(), ArmPolicy(), profile=toy_profile).run()
    assert np.isfinite(res.t_finish).all()
    mask = episode_mask(res, ep)
    assert mask.sum() == (res.arrival >= 5.0).sum() > 0
    assert 0.0 < drain_s(res, ep) < math.inf
    fig = cell_figures(res, 60.0, MetricsConfig(), mask)
    assert fig["n_window"] == int(mask.sum()) and fig["p99_s"] >= fig["p50_s"] > 0


def test_too_few_requests_for_the_episode_is_an_error() -> None:
    arr = ArrivalConfig(process="episode", burst_factor=2.0, burst_start_s=10.0, burst_s=10.0, tail_s=10.0)
    wl = _tiny_workload(arr, 50)
    with pytest.raises(DataError, match=r"episode ends at 30 s .* raise workload.n_requests"):
        wl.arrival_times(5.0)


def test_episode_arrival_in_capacity_units() -> None:
    """0.7 base, 1.5x burst for 120 s: factor 1.5/0.7, tail 2 x 0.5 x 120 / 0.3 = 400 s."""
    arr = episode_arrival(0.7, 1.5, 120.0, inner="gamma", cv=3.0)
    assert arr.burst_factor == pytest.approx(1.5 / 0.7) and arr.tail_s == pytest.approx(400.0)
    assert (arr.inner, arr.cv, arr.burst_start_s) == ("gamma", 3.0, 60.0)
    assert tail_for(0.7, 1.3, 30.0) == pytest.approx(60.0)


# ---------------------------------------------------------------- bad inputs
@pytest.mark.parametrize(("kw", "match"), [
    ({"process": "episode", "burst_factor": 0.8}, r"burst_factor must be >= 1 .* got 0.8"),
    ({"process": "episode", "burst_s": 0.0}, r"burst_s must be > 0 seconds, got 0"),
    ({"process": "episode", "inner": "trace"}, r"inner: unknown value 'trace'"),
    ({"process": "gamma", "cv": 0.0}, r"cv must be > 0 .* got 0"),
    ({"process": "episode", "inner": "gamma", "cv": -1.0}, r"cv must be > 0 .* got -1"),
    ({"process": "poisson", "burst_s": 30.0}, r"burst_s is read by process 'episode' only"),
])
def test_bad_arrival_configs(kw: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ArrivalConfig(**kw)


def test_episode_longer_than_the_run_is_refused_at_validation() -> None:
    """An episode ending at 390 s cannot be covered by 100 requests at 1 req/s: refused by the
    config itself, before a workload is built."""
    arr = {"process": "episode", "burst_factor": 2.0, "burst_start_s": 60.0, "burst_s": 30.0, "tail_s": 300.0}
    with pytest.raises(ConfigError, match=r"episode ends at 390 s .*n_requests 100 at .* raise workload.n_requests to >= 533"):
        SimConfig(workload={"n_requests": 100, "arrival": {**arr, "rate": 1.0}})
    with pytest.raises(ConfigError, match=r"n_requests 1000"):
        SimConfig(workload={"n_requests": 1000, "arrival": arr}, sweep={"loads": [5.0]})
    SimConfig(workload=WorkloadConfig(n_requests=1000, arrival=ArrivalConfig(**arr)))  # 420 expected: fits


@pytest.mark.parametrize(("text", "unit", "match"), [
    ("0.9x,30", "req/s", r"mixes multiples of capacity \('0.9x'\) and plain numbers \('30'\)"),
    ("0.9,30", "capacity", r"sweep.loads 30 is 30x .* \(0, 4\]"),
    ("0.9,abc", "capacity", r"comma-separated numbers"),
    ("", "capacity", r"--loads is empty"),
])
def test_bad_load_lists(text: str, unit: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_loads(text, unit)


def test_load_lists_and_units() -> None:
    assert parse_loads("0.9x, 0.95X") == ((0.9, 0.95), "capacity")
    assert parse_loads("30,40") == ((30.0, 40.0), "req/s")
    assert parse_loads("0.9,0.99", "capacity") == ((0.9, 0.99), "capacity")
    with pytest.raises(ConfigError, match=r"sweep.loads 12 is 12x"):
        SweepConfig(loads=(0.9, 12.0), load_unit="capacity")
    assert SweepConfig(loads=(12.0,)).loads == (12.0,)  # req/s: any positive rate


# ---------------------------------------------------------------- convergence rule
def _stub(table: dict[int, float]):  # a runner
    calls: list[int] = []

    def run(n: int) -> dict[str, float]:
        calls.append(n)
        return {"short_p99_s": table[n], "p99_s": 2 * table[n]}

    return run, calls


def test_converges_at_the_first_n_that_moves_less_than_5_percent() -> None:
    run, calls = _stub({1000: 10.0, 2000: 12.0, 4000: 12.3, 8000: 99.0})
    c = converge(run, 1000, 64000)
    assert (c.n, c.converged, calls) == (4000, True, [1000, 2000, 4000])
    assert c.figures == {"short_p99_s": 12.3, "p99_s": 24.6}
    assert c.moves() == pytest.approx([0.2, 0.025])


def test_stops_at_the_cap_and_says_not_converged() -> None:
    run, calls = _stub({1000: 10.0, 2000: 11.0, 4000: 12.1, 8000: 13.31, 16000: 14.641})
    c = converge(run, 1000, 15999)
    assert (c.n, c.converged, calls) == (8000, False, [1000, 2000, 4000, 8000])
    c = converge(_stub({1000: 10.0, 2000: 11.0, 4000: 12.1, 8000: 13.31})[0], 1000, 8000)
    assert (c.n, c.converged) == (8000, False)
    with pytest.raises(ConfigError, match=r"largest N must be an integer >= the first N \(1000\), got 500"):
        converge(run, 1000, 500)


def test_a_figure_that_moves_in_any_key_blocks_convergence() -> None:
    seq = {1000: {"a": 1.0, "b": 1.0}, 2000: {"a": 1.01, "b": 1.2}, 4000: {"a": 1.0, "b": 1.21}}
    c = converge(lambda n: seq[n], 1000, 4000)
    assert (c.n, c.converged) == (4000, True)


def test_a_diverging_figure_is_reported_and_left_out() -> None:
    """An arm whose P99 doubles with N (an unstable queue) does not hold the cell to the cap: after two
    doublings of >= 1.5x it is named diverging and the others converge without it."""
    seq = {1000: {"a": 1.0, "b": 10.0}, 2000: {"a": 1.2, "b": 20.0}, 4000: {"a": 1.21, "b": 40.0},
           8000: {"a": 1.22, "b": 80.0}}
    c = converge(lambda n: seq[n], 1000, 64000)
    assert (c.n, c.converged, c.diverging) == (4000, True, ["b"])
    assert c.moves() == pytest.approx([0.2, 1.0 / 120.0])  # over "a" only
    # growth of 1.4x is slow but not divergence by the rule: it blocks convergence up to the cap
    slow = {n: {"a": 1.0, "b": 1.4 ** k} for k, n in enumerate((1000, 2000, 4000, 8000))}
    c = converge(lambda n: slow[n], 1000, 8000)
    assert (c.n, c.converged, c.diverging) == (8000, False, [])
    # a figure that grew once and then settled is not diverging
    assert diverging([(1, {"x": 1.0}), (2, {"x": 2.0}), (4, {"x": 2.1})]) == []


# ---------------------------------------------------------------- goodput search
def test_goodput_bisection_finds_the_known_rate() -> None:
    """Attainment 1 - 5 (load - 0.8)+ is >= 0.9 up to load 0.82."""
    calls: list[float] = []

    def attain(x: float) -> float:
        calls.append(x)
        return 1.0 - 5.0 * max(0.0, x - 0.8)

    g = goodput_search(attain, 0.5, 1.2, tol=0.01, max_probes=12)
    assert g.resolved and g.lo <= 0.82 < g.hi and g.hi - g.lo <= 0.01 and g.load == g.lo
    assert len(calls) == len(g.probes) <= 12 and calls[:2] == [0.5, 1.2]
    short = goodput_search(attain, 0.5, 1.2, tol=0.01, max_probes=4)
    assert not short.resolved and len(short.probes) == 4 and short.lo <= 0.82 < short.hi
    assert goodput_search(attain, 0.9, 1.2).load is None  # even the lowest probe fails
    high = goodput_search(attain, 0.3, 0.6)
    assert high.load == 0.6 and high.hi == math.inf  # at least the highest probe


# ---------------------------------------------------------------- attainment on a hand trace
def _trace() -> SimResult:
    """Four requests (SLO TTFT <= 0.25 s, TPOT <= 0.1 s; short = output < 10 tokens):
    0: short, TTFT 0.1, TPOT (1.0 - 0.1) / 4 = 0.225 -> fails TPOT
    1: short, TTFT 0.2, one token (no TPOT)     -> attains
    2: long,  TTFT 0.3                           -> fails TTFT
    3: long,  TTFT 0.25 (bound inclusive), TPOT (1.5 - 0.25) / 20 = 0.0625 -> attains"""
    n = 4
    arrival = np.array([0.0, 1.0, 2.0, 3.0])
    first = arrival + np.array([0.1, 0.2, 0.3, 0.25])
    finish = arrival + np.array([1.0, 0.2, 3.0, 1.5])
    z = np.zeros(n)
    return SimResult(rid=np.arange(n), arrival=arrival, prompt=np.full(n, 10), output=np.array([5, 1, 50, 21]),
                     pred=z, t_prefill_start=arrival, t_first=first, t_decode_admit=first, t_finish=finish,
                     n_preempt=np.zeros(n, dtype=np.int64), rejected=np.zeros(n, dtype=bool), mode="disaggregated")


def test_attainment_per_class_on_a_hand_trace() -> None:
    res = _trace()
    fig = cell_figures(res, 10.0, MetricsConfig(), np.ones(4, dtype=bool))
    assert (fig["attain_all"], fig["attain_short"], fig["attain_long"]) == (0.5, 0.5, 0.5)
    assert fig["n_short"] == 2 and fig["short_p50_s"] == pytest.approx(0.6)
    only = cell_figures(res, 10.0, MetricsConfig(), np.array([False, True, True, True]))
    assert (only["attain_all"], only["attain_short"], only["attain_long"]) == (2 / 3, 1.0, 0.5)
    loose = cell_figures(res, 10.0, MetricsConfig(slo_ttft_s=0.3, slo_tpot_s=0.25), np.ones(4, dtype=bool))
    assert loose["attain_all"] == 1.0


def test_steady_window_trims_the_first_and_last_tenth() -> None:
    res = _trace()
    res.arrival = np.arange(20, dtype=float)[::-1][:4]  # unsorted arrival times
    assert steady_mask(res, 0.25).tolist() == [False, True, True, False]
    with pytest.raises(ConfigError, match="slo_target must be in"):
        MetricsConfig(slo_target=1.5)


def test_best_free_is_the_lowest_short_p99_within_5_percent_of_the_best_overall() -> None:
    arms = {"rr": {"short_p99_s": 9.0, "p99_s": 10.0}, "jsq": {"short_p99_s": 4.0, "p99_s": 10.4},
            "las": {"short_p99_s": 1.0, "p99_s": 20.0},  # buys its short P99 with the tail: not eligible
            "late": {"short_p99_s": 3.0, "p99_s": 10.5}, "sjf/mlp": {"short_p99_s": 0.5, "p99_s": 10.0}}
    free = ["rr", "jsq", "las", "late", "p2"]  # p2 absent from the cell: skipped
    assert best_free(arms, free) == "late"  # 10.5 <= 1.05 x 10.0
    arms["late"]["p99_s"] = 10.51  # > 1.05 x 10.0: out
    assert best_free(arms, free) == "jsq"
    arms["jsq"]["short_p99_s"] = 9.0  # a tie with rr: the first in free's order
    assert best_free(arms, free) == "rr"
    with pytest.raises(ConfigError, match="no prediction-free arm"):
        best_free({"sjf/mlp": arms["sjf/mlp"]}, free)


def test_batch_means_cut_the_window_by_arrival_and_give_a_t_interval() -> None:
    n = 40
    arrival = np.arange(n, dtype=float)[::-1].copy()  # arrival order is the reverse of the index
    lat = np.where(np.arange(n) >= 20, 2.0, 1.0)  # the first 20 arrivals (indices 20-39) take 2 s
    z = np.zeros(n)
    res = SimResult(rid=np.arange(n), arrival=arrival, prompt=np.full(n, 10), output=np.full(n, 5), pred=z,
                    t_prefill_start=arrival, t_first=arrival, t_decode_admit=arrival, t_finish=arrival + lat,
                    n_preempt=np.zeros(n, dtype=np.int64), rejected=np.zeros(n, dtype=bool), mode="disaggregated")
    b = batch_figures(res, 10.0, np.ones(n, dtype=bool), k=4)
    assert b["p99_s"] == pytest.approx([2.0, 2.0, 1.0, 1.0]) and b["short_p99_s"] == b["p99_s"]
    r = batch_ratio([2.0, 2.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0])
    assert r is not None and r.mean == pytest.approx(1.5) and r.k == 4
    half = 3.182446305284263 * math.sqrt(1 / 3) / 2  # t(0.975, 3) x sd / sqrt(4)
    assert (r.lo, r.hi) == pytest.approx((1.5 - half, 1.5 + half))
    assert batch_ratio([1.0, None], [1.0, 2.0]) is None  # one usable batch
    with pytest.raises(ConfigError, match="same k"):
        batch_ratio([1.0], [1.0, 2.0])
    with pytest.raises(ConfigError, match="k >= 2"):
        batch_figures(res, 10.0, np.ones(n, dtype=bool), k=1)


def test_sweep_runs_an_episode_in_capacity_units_and_refuses_one_too_long() -> None:
    """run_sweep: the base load in capacity units after the probe; nobody arrives after the episode's
    end and every request finishes. Too few requests for the episode at the probed rate: refused
    after the probe, before any arm runs."""
    from lenpred.sim.sweep import run_sweep

    arr = {"process": "episode", "burst_factor": 2.0, "burst_start_s": 2.0, "burst_s": 2.0, "tail_s": 4.0}
    cfg = SimConfig(workload={"n_requests": 4000, "arrival": arr}, prediction={"model": "oracle"},
                    sweep={"loads": [0.5], "load_unit": "capacity", "probe_requests": 200}, plots=False)
    res = run_sweep(cfg)
    (run,) = res.runs
    s = run.summary
    expected = Episode.of(cfg.workload.arrival).expected(8.0, run.rate_rps)  # type: ignore[union-attr]
    assert s["n_completed"] == s["n_requests"] < 4000
    assert abs(s["n_requests"] - expected) < 5 * math.sqrt(expected)
    short = cfg.nested("workload", n_requests=int(expected / 3))
    with pytest.raises(ConfigError, match=r"the episode ends at 8 s"):
        run_sweep(short)
