"""KV victim choice and admission rules (issue 30 part 3): hand-checked victims and admissions, the
defaults unchanged, preemption statistics, one-line bad input."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from lenpred.errors import ConfigError
from lenpred.sched.queue import make_queue_policy
from lenpred.sim.arm import ArmPolicy
from lenpred.sim.config import ClusterConfig, PolicyConfig
from lenpred.sim.engine import Simulator, simulate
from lenpred.sim.instances import DecodeInstance
from lenpred.sim.kvstats import preemption_stats
from lenpred.sim.preemption import DecodeSetup
from lenpred.sim.profiles import LatencyProfile
from lenpred.sim.request import NEED_RECOMPUTE, Request
from lenpred.sim.summary import summarize

MakeRequests = Callable[..., list[Request]]


def _instance(profile: LatencyProfile, victim: str, cap: int = 1000) -> DecodeInstance:
    setup = DecodeSetup(colocated=True, link_bw=1e9, swap_bw=1e9, victim=victim)
    return DecodeInstance(0, profile, make_queue_policy("fcfs"), cap, setup)


def _running(d: DecodeInstance) -> list[Request]:
    """Three running requests, arrivals 0 < 1 < 2 s, each having generated 30 tokens:
    a: true 100 / predicted 35 (5 predicted left, 70 true left); b: true 32 / predicted 110 (80 / 2);
    c (the latest): true 60 / predicted 45 (15 / 30)."""
    reqs = [Request(0, 0.0, 10, 100, 35), Request(1, 1.0, 10, 32, 110), Request(2, 2.0, 10, 60, 45)]
    for r in reqs:
        r.gen = 30
        d._join(r, 3.0)
    return reqs


@pytest.mark.parametrize(("victim", "expected"), [("latest", 2), ("predicted-remaining", 1),
                                                  ("true-remaining", 0), ("policy", 2)])
def test_victim_rule_picks_by_hand(victim: str, expected: int, toy_profile: LatencyProfile) -> None:
    d = _instance(toy_profile, victim)
    _running(d)
    d._preempt_one(4.0)
    assert set(d.running) == {0, 1, 2} - {expected}
    out = d.waiting[0][2]
    assert out.rid == expected and out.n_preempt == 1 and out.need == NEED_RECOMPUTE
    assert d.ctx == 2 * (10 + 30)  # the victim's prompt + generated KV left the batch


def test_predicted_remaining_reads_the_latest_reprediction(toy_profile: LatencyProfile) -> None:
    # a re-prediction at 20 tokens says a has 200 tokens left: it becomes the most predicted remaining
    d = _instance(toy_profile, "predicted-remaining")
    a = Request(0, 0.0, 10, 100, 35, repred=[(20, 200.0)])
    b = Request(1, 1.0, 10, 32, 110)
    for r in (a, b):
        r.gen = 30
        d._join(r, 3.0)
    assert a.pred_remaining(30) == 190.0
    d._preempt_one(4.0)
    assert list(d.running) == [1]


def test_ties_go_to_the_latest_arrival(toy_profile: LatencyProfile) -> None:
    # every prediction overrun: predicted remaining 0 for all, so the latest arrival goes
    d = _instance(toy_profile, "predicted-remaining")
    for i in range(3):
        r = Request(i, float(i), 10, 100, 5)
        r.gen = 30
        d._join(r, 3.0)
    d._preempt_one(4.0)
    assert list(d.running) == [0, 1]


def _three_at_once(repred_a: bool = False) -> list[Request]:
    """Arrive together (ties: rid order, c latest); prompts 10; preemption first needed at 33 tokens
    generated (3 x (10 + 33) + 3 > 130): then a has 5 predicted / 77 true tokens left, b 77 / 2,
    c 12 / 27."""
    a = Request(0, 0.0, 10, 110, 38, repred=[(20, 200.0)] if repred_a else ())
    return [a, Request(1, 0.0, 10, 35, 110), Request(2, 0.0, 10, 60, 45)]


@pytest.mark.parametrize(("victim", "repred", "first"), [("latest", False, 2), ("policy", False, 2),
                                                         ("predicted-remaining", False, 1),
                                                         ("predicted-remaining", True, 0),
                                                         ("true-remaining", False, 0)])
def test_first_victim_end_to_end(victim: str, repred: bool, first: int, toy_profile: LatencyProfile,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int]] = []
    evict = DecodeInstance._evict

    def record(self: DecodeInstance, r: Request, t: float) -> float:
        seen.append((r.rid, self.gen_of(r)))
        return evict(self, r, t)

    monkeypatch.setattr(DecodeInstance, "_evict", record)
    cluster = ClusterConfig(mode="colocated", kv_capacity_tokens=130, watermark=0.0)
    res = Simulator(_three_at_once(repred), cluster, PolicyConfig(victim=victim).policy, profile=toy_profile,
                    check_invariants=True).run()
    assert np.isfinite(res.t_finish).all()
    assert seen[0] == (first, 33)


def test_horizon_peak_by_hand(toy_profile: LatencyProfile) -> None:
    # running a, b, c (prompt 10 + 30 generated each; predicted left 5 / 80 / 15, true 70 / 2 / 30) and a
    # fresh r (prompt 10, 1 token from prefill: KV 11; predicted left 39, true 49). Predicted, sorted down:
    # b (80, 40), r (39, 11), c (15, 40), a (5, 40): footprints 40 + 80, 51 + 2 x 39, 91 + 3 x 15,
    # 131 + 4 x 5 = 120, 129, 136, 151. True: a (70, 40), r (49, 11), c (30, 40), b (2, 40): 110, 149, 181, 139.
    d = _instance(toy_profile, "latest")
    _running(d)
    r = Request(3, 3.0, 10, 50, 40)
    r.gen = 1
    r.q_rem = r.pred_remaining(1)
    assert d._horizon_peak(r, truth=False) == 151.0
    assert d._horizon_peak(r, truth=True) == 181.0
    d.set_kv_rules("latest", "predicted-horizon")
    d.kv_rules.cap_eff = 150.0
    assert not d._admits(r, 131, empty=False)
    d.kv_rules.cap_eff = 151.0
    assert d._admits(r, 131, empty=False)


@pytest.mark.parametrize(("pred_b", "held"), [(30.0, False), (80.0, True)])
def test_horizon_admits_what_the_sum_of_peaks_holds_back(pred_b: float, held: bool,
                                                         toy_profile: LatencyProfile) -> None:
    # a (prompt 10, predicted 100) has ~35 tokens when b (prompt 10) arrives at 0.5 s. b predicted 30:
    # a leaves last, the footprint peaks at 45 + 65 = 110 or 56 + 2 x 30 = 116 <= 130: admitted (the sum
    # of peaks, 151, is not). b predicted 80: b leaves last, 56 + 2 x 65 = 186 > 130: held back.
    reqs = [Request(0, 0.0, 10, 50, 100), Request(1, 0.5, 10, 10, pred_b)]
    cluster = ClusterConfig(mode="colocated", kv_capacity_tokens=130, watermark=0.0)
    hor = simulate(reqs, cluster, PolicyConfig(admission="predicted-horizon").policy, profile=toy_profile,
                   check_invariants=True)
    now = simulate(reqs, cluster, ArmPolicy(), profile=toy_profile)
    if held:
        assert hor.t_prefill_start[1] >= hor.t_finish[0]
    else:
        assert hor.t_prefill_start[1] == now.t_prefill_start[1] < now.t_finish[0]


def test_predicted_peak_holds_back_what_fits_now(toy_profile: LatencyProfile) -> None:
    # a (predicted peak 10 + 100) runs; b arrives at 0.5 s (predicted peak 10 + 1 + 30): 151 > 130, so
    # predicted-peak keeps b waiting until a finishes; fits-now admits it at once (KV ~ 10 + gen + 11);
    # the true peaks (60 + 20) fit, so true-peak admits it too
    def reqs() -> list[Request]:
        return [Request(0, 0.0, 10, 50, 100), Request(1, 0.5, 10, 10, 30)]

    cluster = ClusterConfig(mode="colocated", kv_capacity_tokens=130, watermark=0.0)
    out = {}
    for rule in ("fits-now", "predicted-peak", "true-peak"):
        out[rule] = simulate(reqs(), cluster, PolicyConfig(admission=rule).policy, profile=toy_profile,
                             check_invariants=True)
    now, peak, true = out["fits-now"], out["predicted-peak"], out["true-peak"]
    assert now.t_prefill_start[1] < now.t_finish[0]
    assert peak.t_prefill_start[1] >= peak.t_finish[0]
    assert true.t_prefill_start[1] == now.t_prefill_start[1]
    assert now.t_finish[0] > peak.t_finish[0]  # a alone runs faster steps
    assert (now.n_preempt == 0).all() and (peak.n_preempt == 0).all()


@pytest.mark.parametrize("rule", ["true-peak", "true-horizon"])
def test_true_admission_never_preempts(rule: str, make_requests: MakeRequests, toy_profile: LatencyProfile) -> None:
    # admitted only while the true peaks (or the true future footprint) fit, a batch never outgrows its KV
    reqs = make_requests(n=200, rate=80.0)
    cluster = ClusterConfig(n_prefill=1, n_decode=2, kv_capacity_tokens=3000)
    base = simulate(reqs, cluster, ArmPolicy(), profile=toy_profile)
    peak = Simulator(reqs, cluster, PolicyConfig(admission=rule).policy, profile=toy_profile,
                     check_invariants=True).run()
    assert base.n_preempt.sum() > 0 and peak.n_preempt.sum() == 0
    assert np.isfinite(peak.t_finish).all()


# today's results (the code before the victim / admission rules), per cluster and policy: total
# preemptions, the exact sum of finish times
GOLDEN = {
    ("disaggregated", "fcfs-rr"): (87, 8507.922615839903), ("disaggregated", "sjf"): (46, 6291.231187239901),
    ("disaggregated", "las"): (440, 13267.871345839907), ("colocated", "fcfs-rr"): (89, 9976.155181510943),
    ("colocated", "sjf"): (52, 7849.091423869494), ("colocated", "las"): (538, 12316.651317270946),
}


@pytest.mark.parametrize("cluster", [ClusterConfig(n_prefill=1, n_decode=2, kv_capacity_tokens=3000),
                                     ClusterConfig(mode="colocated", n_instances=2, kv_capacity_tokens=3000,
                                                   preemption="swap")], ids=["disagg", "colocated-swap"])
def test_defaults_reproduce_todays_results(cluster: ClusterConfig, make_requests: MakeRequests,
                                           toy_profile: LatencyProfile) -> None:
    for pol in (PolicyConfig(), PolicyConfig(name="sjf", queue="sjf", dispatch="least-predicted-tokens"),
                PolicyConfig(name="las", queue="las")):
        res = simulate(make_requests(n=250, rate=80.0), cluster, pol.policy, profile=toy_profile)
        assert (int(res.n_preempt.sum()), float(res.t_finish.sum())) == GOLDEN[(cluster.mode, pol.name)]
    # under FCFS the queue key is the arrival: "policy" and "latest" are the same rule, time for time
    a = simulate(make_requests(n=250, rate=80.0), cluster, ArmPolicy(), profile=toy_profile)
    b = simulate(make_requests(n=250, rate=80.0), cluster, PolicyConfig(victim="latest").policy, profile=toy_profile)
    assert np.array_equal(a.t_finish, b.t_finish) and np.array_equal(a.n_preempt, b.n_preempt)


def test_preemption_stats_by_hand() -> None:
    s = preemption_stats(np.array([0, 0, 1, 3] + [0] * 96))
    assert s == {"mean": 0.04, "p99": pytest.approx(1.02), "max": 3, "share": 0.02, "total": 4}
    assert preemption_stats(np.array([], dtype=int))["mean"] == 0.0


def test_summary_carries_preemption_stats(make_requests: MakeRequests, toy_profile: LatencyProfile) -> None:
    res = simulate(make_requests(n=200, rate=80.0), ClusterConfig(kv_capacity_tokens=3000, n_decode=2),
                   ArmPolicy(), profile=toy_profile)
    s = summarize(res)["preemption"]
    assert s["total"] == int(res.n_preempt.sum()) > 0
    assert s["share"] == pytest.approx(float((res.n_preempt > 0).mean()))


@pytest.mark.parametrize(("field", "value"), [("victim", "newest"), ("admission", "s3")])
def test_bad_rule_is_one_line_listing_the_valid_ones(field: str, value: str) -> None:
    with pytest.raises(ConfigError) as e:
        PolicyConfig(**{field: value})
    msg = str(e.value)
    assert "\n" not in msg and value in msg and field in msg
    assert ("true-remaining" in msg) if field == "victim" else ("predicted-peak" in msg)
