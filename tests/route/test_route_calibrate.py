"""gboost calibrated online (lenpred.route.calibrate): known answers from synthetic completions and arrivals
(seconds per token, the arrival rate, solve_gamma's root and its overload rule, the defaults before it is
calibrated, the recomputation's cadence), the backend's in-flight integral, the default queue by estimator,
bad input, and a router in front of two stub backends that calibrates itself from its own traffic."""

from __future__ import annotations

import math
import re
import time

import httpx
import numpy as np
import pytest
from route_testing import RouterThread, Stub

from lenpred.errors import ConfigError
from lenpred.route.backends import Backend, Flight
from lenpred.route.calibrate import OnlineCalibrator
from lenpred.route.config import BackendConfig, CalibrateConfig, PriorityConfig, RouterConfig
from lenpred.route.priority import PriorityMapper
from lenpred.sched.boost import GAMMA, OVERLOAD_RHO, S_PER_TOKEN, boost, solve_gamma

CAL = CalibrateConfig(min_completions=16, every_n=32, every_s=5.0, window=256, rate_window_s=60.0)


def _arrivals(cal: OnlineCalibrator, every_s: float, until: float) -> None:
    t = every_s
    while t <= until + 1e-9:
        cal.arrival(t)
        t += every_s


# ---------------------------------------------------------------- the calibrator, on synthetic streams
def test_seconds_per_token_is_the_interval_over_the_requests_in_flight():
    cal = OnlineCalibrator(CAL, gamma=1.0, t0=0.0)  # gamma pinned: only s_per_token is measured
    # one server that makes a token every 12.5 ms: k requests in flight each see one every k x 12.5 ms
    for i in range(20):
        k = 1 + i % 4
        cal.completion(tokens=100, per_token_s=0.0125 * k, inflight=k, now=float(i))
    st = cal.recompute(20.0, n_servers=2)
    assert st.s_per_token == pytest.approx(0.0125, rel=1e-12) and st.s_per_token_source == "measured"
    assert st.gamma == 1.0 and st.gamma_source == "pinned" and st.calibrated
    # the median: a few outliers (a stalled stream) do not move it
    for v in (5.0, 7.0, 9.0):
        cal.completion(tokens=100, per_token_s=v, inflight=1.0, now=21.0)
    assert cal.recompute(22.0, 2).s_per_token == pytest.approx(0.0125, rel=1e-12)


def test_gamma_is_solve_gammas_root_for_the_measured_rate_and_service():
    cal = OnlineCalibrator(CAL, s_per_token=0.01, t0=0.0)  # s_per_token pinned: gamma is measured
    _arrivals(cal, 0.5, 30.0)  # 60 arrivals in 30 s over 2 servers: 1 request/s per server
    tokens = [10.0, 20.0, 40.0] * 6
    for i, n in enumerate(tokens):
        cal.completion(tokens=n, per_token_s=None, inflight=1.0, now=10.0 + i)
    st = cal.recompute(30.0, n_servers=2)
    assert st.rate == pytest.approx(1.0, rel=1e-12)
    s = np.array(tokens) * 0.01  # 0.1, 0.2, 0.4 s: rho = 0.233
    assert st.gamma == solve_gamma(1.0, s) and st.gamma_source == "measured" and st.calibrated
    # the root, checked by hand: gamma = rate * (E[e^{gamma S}] - 1), gamma > 0
    assert st.gamma > 0 and st.gamma == pytest.approx(1.0 * (np.exp(st.gamma * s).mean() - 1.0), rel=1e-9)


def test_overload_takes_the_root_at_rho_095():
    cal = OnlineCalibrator(CAL, s_per_token=0.01, t0=0.0)
    _arrivals(cal, 0.05, 30.0)  # 20 requests/s on one server, E[S] = 0.233 s: rho = 4.7
    tokens = [10.0, 20.0, 40.0] * 6
    for i, n in enumerate(tokens):
        cal.completion(tokens=n, per_token_s=None, inflight=1.0, now=10.0 + i)
    st = cal.recompute(30.0, n_servers=1)
    s = np.array(tokens) * 0.01
    assert st.rate == pytest.approx(20.0, rel=1e-9)
    assert st.gamma == pytest.approx(solve_gamma(OVERLOAD_RHO / s.mean(), s), rel=1e-12)


def test_uncalibrated_it_runs_the_defaults_or_the_pinned_numbers():
    cal = OnlineCalibrator(CAL, t0=0.0)
    _arrivals(cal, 1.0, 20.0)
    due = [cal.completion(tokens=50, per_token_s=0.02, inflight=1.0, now=float(i)) for i in range(15)]
    assert not any(due)  # nothing is recomputed before min_completions
    st = cal.recompute(20.0, 1)  # even when asked: 15 < 16 measured
    assert (st.gamma, st.s_per_token, st.gamma_source, st.s_per_token_source, st.calibrated) == (
        GAMMA, S_PER_TOKEN, "default", "default", False)
    pinned = OnlineCalibrator(CAL, gamma=0.07, s_per_token=0.0125)
    assert (pinned.state.gamma, pinned.state.s_per_token, pinned.active) == (0.07, 0.0125, False)
    assert cal.completion(tokens=50, per_token_s=0.02, inflight=1.0, now=15.0)  # the 16th: calibrate now
    st = cal.recompute(20.0, 1)
    assert st.calibrated and st.s_per_token == pytest.approx(0.02) and st.gamma == solve_gamma(
        st.rate, np.full(16, 50 * 0.02))


def test_recomputation_every_n_completions_or_t_seconds():
    cal = OnlineCalibrator(CalibrateConfig(min_completions=4, every_n=8, every_s=5.0), t0=0.0)
    due = [cal.completion(10, 0.01, 1.0, now=0.1 * i) for i in range(4)]
    assert due == [False, False, False, True]  # the first calibration, as soon as 4 are measured
    cal.recompute(0.4, 1)
    due = [cal.completion(10, 0.01, 1.0, now=0.5 + 0.1 * i) for i in range(8)]
    assert due == [False] * 7 + [True]  # 8 completions later
    cal.recompute(1.2, 1)
    assert not cal.completion(10, 0.01, 1.0, now=6.0) and cal.completion(10, 0.01, 1.0, now=6.2)  # or 5 s later


def test_the_rate_window_forgets_old_arrivals():
    cal = OnlineCalibrator(CalibrateConfig(rate_window_s=10.0), t0=0.0)
    _arrivals(cal, 0.1, 20.0)  # 10/s for 20 s, then nothing
    assert cal.rate(20.0, 1) == pytest.approx(10.0, rel=1e-9)
    assert cal.rate(25.0, 1) == pytest.approx(5.0, rel=1e-2)  # half the window is empty
    assert cal.rate(31.0, 1) is None and cal.rate(20.0, 0) is None
    young = OnlineCalibrator(CalibrateConfig(rate_window_s=60.0), t0=0.0)
    _arrivals(young, 1.0, 4.0)
    assert young.rate(4.0, 2) == pytest.approx(0.5)  # a router 4 s old: over its 4 s, not the 60 s window


def test_backend_busy_area_is_the_in_flight_integral():
    b = Backend(BackendConfig(url="http://x:1"), 0)
    t = [0.0]
    b.clock = lambda: t[0]
    b._t_area = 0.0
    b.admit(Flight("a", 10, 0, 0.0))
    t[0] = 1.0
    b.admit(Flight("b", 10, 0, 0.0))
    at_1 = b.busy_area(1.0)  # a reading taken at t = 1 (as the router takes one at a first token)
    t[0] = 3.0
    b.finish("a")
    assert at_1 == 1.0 and b.busy_area(4.0) == pytest.approx(1 * 1 + 2 * 2 + 1 * 1)
    assert (b.busy_area(4.0) - at_1) / 3.0 == pytest.approx(5 / 3)  # the mean in flight over [1, 4]


def test_a_recalibration_keys_later_arrivals_only():
    m = PriorityMapper(PriorityConfig(queue="gboost", calibrate={"min_completions": 2}), 256, t0=0.0)
    before = m.key(100, None, now=5.0)
    assert before == pytest.approx(5.0 - boost([100 * S_PER_TOKEN], GAMMA))  # the defaults until calibrated
    for i in range(2):
        m.calib.arrival(float(i))
        m.calib.completion(100, 0.5, 1.0, now=float(i))
    st = m.recalibrate(4.0, 1)
    assert st.calibrated and st.s_per_token == 0.5
    assert m.key(100, None, now=5.0) == pytest.approx(5.0 - boost([100 * 0.5], st.gamma))
    assert before == pytest.approx(5.0 - boost([100 * S_PER_TOKEN], GAMMA))  # a key given out is a time


# ---------------------------------------------------------------- config: the default queue, bad input
@pytest.mark.parametrize("estimator", [{"kind": "inline", "head": "h"}, {"kind": "head", "head": "h"},
                                       {"kind": "remote", "url": "http://s:1"}, {"kind": "chars"}, {"kind": "none"}])
def test_the_default_queue_is_fcfs_with_or_without_a_prediction(estimator):
    """Issue 37: no prediction-ordered queue was within 1.02x of late-binding FCFS in every steady pair, so
    'auto' is FCFS whatever the estimator; gboost stays one name away, calibrated online."""
    cfg = RouterConfig.from_dict({"backends": [{"url": "http://a:1"}], "estimator": estimator})
    assert cfg.priority.queue == "auto" and cfg.queue_policy.name == "fcfs"
    assert cfg.priority.sends is False  # a vLLM without --scheduling-policy priority gets no field by default
    if estimator["kind"] != "none":  # gboost needs a prediction: estimator none is refused (test_route_units)
        explicit = cfg.replace(priority={"queue": "gboost"})
        assert explicit.queue_policy.name == "gboost" and explicit.priority.sends  # set explicitly: sent, as before
        assert (explicit.queue_policy.gamma, explicit.queue_policy.s_per_token) == ("auto", "auto")


@pytest.mark.parametrize(("bad", "shown"), [
    ({"gamma": 0}, "got 0"), ({"gamma": -1.5}, "got -1.5"), ({"s_per_token": 0.0}, "got 0.0"),
    ({"s_per_token": -2}, "got -2"), ({"gamma": "fast"}, "got 'fast'"), ({"s_per_token": "1e-3s"}, "got '1e-3s'"),
    ({"gamma": float("inf")}, "got inf"), ({"gamma": True}, "got True")])
def test_bad_gboost_numbers_are_one_line(bad, shown):
    with pytest.raises(ConfigError) as e:
        RouterConfig.from_dict({"backends": [{"url": "http://a:1"}], "priority": {"queue": "gboost", **bad}}, "config")
    msg, name = str(e.value), next(iter(bad))
    assert "\n" not in msg and f"config.priority.queue: policy 'gboost': {name}" in msg and shown in msg
    assert 'must be "auto" or a number in (0, inf)' in msg


def test_pinned_numbers_still_work_and_null_is_refused():
    m = PriorityMapper(PriorityConfig(queue="gboost", gamma=0.07, s_per_token=0.0125), 256, t0=0.0)
    assert (m.policy.gamma, m.policy.s_per_token, m.calib.active) == (0.07, 0.0125, False)
    m = PriorityMapper(PriorityConfig(queue="gboost", gamma=GAMMA, s_per_token=S_PER_TOKEN), 256, t0=0.0)
    assert (m.policy.gamma, m.policy.s_per_token, m.calib.active) == (GAMMA, S_PER_TOKEN, False)
    m = PriorityMapper(PriorityConfig(queue="gboost", gamma="AUTO"), 256, t0=0.0)
    assert (m.params.gamma, m.params.s_per_token, m.calib.active) == ("auto", "auto", True)
    assert PriorityConfig(queue="gboost", gamma=1).queue.gamma == 1.0
    # null meant "the library's fixed number" in the router and "measured" in the simulator: one meaning now
    with pytest.raises(ConfigError, match=r"s_per_token null is not a setting.*S_PER_TOKEN = 6.6e-05"):
        RouterConfig.from_dict({"backends": [{"url": "http://a:1"}], "priority": {"queue": "gboost",
                                                                                  "s_per_token": None}})


# ---------------------------------------------------------------- end to end: a router calibrates itself
@pytest.fixture(scope="module")
def slow_stubs():
    a, b = Stub("ca", tokens_per_s=100).start(), Stub("cb", tokens_per_s=100).start()
    yield a, b
    a.stop()
    b.stop()


def _metric(text: str, name: str) -> tuple[str, float] | None:
    m = re.search(rf"^{name}(\{{[^}}]*\}})? (\S+)$", text, re.M)
    return None if m is None else (m.group(1) or "", float(m.group(2)))


def test_the_router_calibrates_gboost_from_its_own_traffic(slow_stubs):
    cfg = RouterConfig.from_dict({
        "backends": [{"url": s.url, "name": s.name} for s in slow_stubs], "log_requests": False,
        "priority": {"queue": "gboost", "calibrate": {"min_completions": 6, "every_n": 1}},
        "timeouts": {"connect_s": 5.0, "read_s": 10.0, "total_s": 30.0}})
    body = {"model": "stub", "messages": [{"role": "user", "content": "count"}], "max_tokens": 8}
    with RouterThread(cfg) as r:
        metrics = httpx.get(r.url + "/metrics", timeout=10).text
        assert _metric(metrics, "lenpred_route_gboost_calibrated")[1] == 0.0
        assert _metric(metrics, "lenpred_route_gboost_gamma") == ('{source="default"}', GAMMA)
        for i in range(8):  # one at a time: one request in flight, streamed and not
            resp = httpx.post(r.url + "/v1/chat/completions", json={**body, "stream": i % 2 == 0}, timeout=15)
            assert resp.status_code == 200
        deadline = time.monotonic() + 30  # the recomputation runs in the router's next loop turn: wait for it
        while _metric(metrics, "lenpred_route_gboost_completions")[1] != 8 and time.monotonic() < deadline:
            metrics = httpx.get(r.url + "/metrics", timeout=10).text
        assert _metric(metrics, "lenpred_route_gboost_calibrated")[1] == 1.0, metrics[-1500:]
        src, s = _metric(metrics, "lenpred_route_gboost_s_per_token_seconds")
        assert src == '{source="measured"}' and 0.002 < s < 5.0  # the stubs pace 10 ms per token
        cal = r.router.prio.calib
        assert list(cal.tokens) == [8.0] * 8 and cal.completions == 8
        src, g = _metric(metrics, "lenpred_route_gboost_gamma")
        rate = _metric(metrics, "lenpred_route_gboost_rate_per_server")[1]
        st = r.router.prio.gboost
        assert src == '{source="measured"}' and g == st.gamma and rate == st.rate
        assert math.isclose(st.gamma, solve_gamma(st.rate, np.full(8, 8.0) * st.s_per_token), rel_tol=1e-12)
        health = httpx.get(r.url + "/healthz", timeout=10).json()
        assert health["queue"] == "gboost" and health["gboost"]["calibrated"] is True
        assert health["gboost"]["s_per_token"] == st.s_per_token
