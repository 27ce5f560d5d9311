"""Hand-checkable traces: one instance (or one prefill + one decode), two requests, exact times."""

from __future__ import annotations

import pytest

from lenpred.sim.arm import ArmPolicy
from lenpred.sim.config import ClusterConfig
from lenpred.sim.engine import simulate
from lenpred.sim.profiles import LatencyProfile
from lenpred.sim.request import Request


def two_requests() -> list[Request]:
    # A: 100 prompt tokens, 3 output tokens; B: 200 prompt tokens, 2 output tokens; both at t = 0.
    return [Request(0, 0.0, 100, 3, 3), Request(1, 0.0, 200, 2, 2)]


def test_colocated_two_requests_exact(toy_profile: LatencyProfile) -> None:
    res = simulate(two_requests(), ClusterConfig(mode="colocated", n_instances=1), ArmPolicy(),
                   profile=toy_profile, check_invariants=True)
    # step 1: prefill both: 0.1 + 0.001 * (100 + 200) = 0.4 s -> both first tokens at 0.4
    assert res.t_first == pytest.approx([0.4, 0.4])
    # step 2: decode both, context (100+1)+(200+1) = 302: 0.01 + 302e-5 + 2 * 0.001 = 0.01502
    #   -> B has its 2 tokens at 0.41502
    # step 3: decode A, context 102: 0.01 + 102e-5 + 0.001 = 0.01202 -> A done at 0.42704
    assert res.t_finish == pytest.approx([0.42704, 0.41502])
    ttft = res.t_first - res.arrival
    assert ttft == pytest.approx([0.4, 0.4])
    assert res.t_prefill_start == pytest.approx([0.0, 0.0])


def test_disaggregated_two_requests_exact(toy_profile: LatencyProfile) -> None:
    cluster = ClusterConfig(mode="disaggregated", n_prefill=1, n_decode=1, link_gbps=0.001)  # 1e6 B/s
    res = simulate(two_requests(), cluster, ArmPolicy(), profile=toy_profile, check_invariants=True)
    # prefill batch of both: 0.4 s; both first tokens at 0.4
    assert res.t_first == pytest.approx([0.4, 0.4])
    # the idle decode instance admits both at 0.4; the link carries A (100 tok * 1000 B / 1e6 B/s =
    # 0.1 s: lands 0.5) then B (0.2 s: lands 0.7)
    assert res.t_decode_admit == pytest.approx([0.4, 0.4])
    # A: steps at 0.5 (ctx 101: 0.01 + 0.00101 + 0.001 = 0.01201) and 0.51201 (ctx 102: 0.01202)
    #   -> done at 0.52403
    # B: joins at 0.7, one step (ctx 201: 0.01301) -> done at 0.71301
    assert res.t_finish == pytest.approx([0.52403, 0.71301])


def test_single_token_request_finishes_at_prefill(toy_profile: LatencyProfile) -> None:
    reqs = [Request(0, 0.5, 50, 1, 1)]
    for cluster in (ClusterConfig(mode="colocated"), ClusterConfig(mode="disaggregated")):
        res = simulate(reqs, cluster, ArmPolicy(), profile=toy_profile)
        assert res.t_first[0] == pytest.approx(0.5 + 0.1 + 0.05)
        assert res.t_finish[0] == pytest.approx(res.t_first[0])


def test_later_arrival_waits_for_running_step(toy_profile: LatencyProfile) -> None:
    # A arrives at 0 and is prefilled alone (0.2 s); B arrives at 0.05 and waits for that step.
    reqs = [Request(0, 0.0, 100, 2, 2), Request(1, 0.05, 100, 2, 2)]
    res = simulate(reqs, ClusterConfig(mode="colocated"), ArmPolicy(), profile=toy_profile)
    assert res.t_first[0] == pytest.approx(0.2)
    # at 0.2: B is prefilled while A decodes one step: 0.2 (prefill) + 0.01 + 101e-5 + 0.001
    step2 = 0.2 + 0.01 + 101e-5 + 0.001
    assert res.t_first[1] == pytest.approx(0.2 + step2)
    assert res.t_finish[0] == pytest.approx(0.2 + step2)  # A's 2nd token came from that step


def test_request_handed_to_a_busy_decode_instance_joins_at_the_next_boundary() -> None:
    # Step times: prefill 0.1 s + 1 ms/token; decode 20 ms + 5 ms per request (no context term);
    # KV 1000 B/token over a 1 GB/s link: a 100-token prompt transfers in 0.1 ms.
    prof = LatencyProfile(name="hand", prefill=(0.1, 0.001, 0.0), decode=(0.02, 0.0, 0.005),
                          kv_bytes_per_token=1000, kv_capacity_tokens=100_000, max_batch=16,
                          max_prefill_tokens=4096)
    reqs = [Request(0, 0.0, 100, 20, 20),  # A: prefilled 0 -> 0.2, lands 0.2001, 19 decode steps
            Request(1, 0.05, 110, 3, 3)]  # B: waits for A's prefill; prefilled 0.2 -> 0.41
    res = simulate(reqs, ClusterConfig(n_prefill=1, n_decode=1, link_gbps=1.0), ArmPolicy(),
                   profile=prof, check_invariants=True)
    assert res.t_first == pytest.approx([0.2, 0.41])
    # A decodes alone in 25 ms steps from 0.2001: boundaries 0.4001, 0.4251, ... B is handed over at
    # 0.41, mid-step: admitted at once, its transfer (0.11 ms) lands at 0.41011, and it joins at the
    # next boundary, 0.4251. (Admitting it only at 0.4251 would make it join one step later, 0.4501.)
    assert res.t_decode_admit == pytest.approx([0.2, 0.41])
    # B's 2 decode steps at batch 2 (30 ms each): 0.4251 -> 0.4551 -> 0.4851
    assert res.t_finish[1] == pytest.approx(0.4851)
    # A: 9 steps done by 0.4251, 2 at batch 2, then 8 alone: 0.4851 + 8 * 0.025 = 0.6851
    assert res.t_finish[0] == pytest.approx(0.6851)
