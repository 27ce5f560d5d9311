"""Heterogeneous decode instances (``ClusterConfig.decode_speeds``, issue 37 part 3): known answers."""

from __future__ import annotations

import hashlib

import pytest

from lenpred.errors import ConfigError
from lenpred.sim.arm import ArmPolicy
from lenpred.sim.config import ClusterConfig
from lenpred.sim.engine import Simulator
from lenpred.sim.profiles import LatencyProfile
from lenpred.sim.request import Request


def _one(speed: float, profile: LatencyProfile) -> Request:
    r = Request(0, 0.0, 50, 40, 40.0)
    Simulator([r], ClusterConfig(mode="colocated", n_instances=1, decode_speeds=(speed,)), ArmPolicy(),
              profile=profile, check_invariants=True).run()
    return r


def test_a_twice_as_fast_instance_does_the_same_work_in_half_the_time(toy_profile: LatencyProfile) -> None:
    # colocated, one request at t = 0: every second of its life is compute (prefill, then decode steps)
    slow, fast = _one(1.0, toy_profile), _one(2.0, toy_profile)
    # by hand: prefill 0.1 + 0.001 x 50 = 0.15 s; 39 decode steps of batch 1 at context 51..89:
    # 0.01 + 1e-5 x ctx + 0.001 each
    by_hand = 0.15 + sum(0.011 + 1e-5 * c for c in range(51, 90))
    assert slow.t_finish == pytest.approx(by_hand, rel=1e-12)
    assert fast.t_finish == pytest.approx(by_hand / 2, rel=1e-12)
    assert fast.t_first == pytest.approx(slow.t_first / 2, rel=1e-12)


def test_disaggregated_decode_steps_take_half_as_long_on_the_fast_instance(toy_profile: LatencyProfile) -> None:
    # two equal requests, prefilled together, round robin: request 0 -> decode 0 (speed 1), 1 -> decode 1 (speed 2)
    reqs = [Request(0, 0.0, 50, 40, 40.0), Request(1, 0.0, 50, 40, 40.0)]
    Simulator(reqs, ClusterConfig(n_prefill=1, n_decode=2, decode_speeds=(1.0, 2.0)), ArmPolicy(dispatch="round-robin"),
              profile=toy_profile, check_invariants=True).run()
    slow, fast = reqs
    assert slow.decode_inst.index == 0 and fast.decode_inst.index == 1
    transfer = 50 * 1000 / 25e9
    # the decode phase: from the transfer's landing (joins at that step start) to the last token
    d_slow = slow.t_finish - slow.t_decode_admit - transfer
    d_fast = fast.t_finish - fast.t_decode_admit - transfer
    assert d_fast == pytest.approx(d_slow / 2, rel=1e-9)
    assert d_slow == pytest.approx(sum(0.011 + 1e-5 * c for c in range(51, 90)), rel=1e-9)


def _golden_requests() -> list[Request]:
    return [Request(i, i * 0.01, 20 + (i * 37) % 300, 5 + (i * 53) % 400, float(5 + (i * 53) % 400))
            for i in range(400)]


@pytest.mark.parametrize(("arm", "digest"), [
    (ArmPolicy(dispatch="least-requests"), "61ee3748da2a39aa"),
    (ArmPolicy(dispatch="round-robin", max_outstanding=4), "1c228f365f65ddf9"),
])
@pytest.mark.parametrize("speeds", [None, (1.0, 1.0, 1.0)])
def test_unset_or_equal_speeds_give_todays_results_bit_for_bit(toy_profile: LatencyProfile, arm: ArmPolicy,
                                                               digest: str, speeds: tuple[float, ...] | None) -> None:
    # the digests were taken from the simulator before decode_speeds existed (first and last token times)
    res = Simulator(_golden_requests(), ClusterConfig(n_prefill=1, n_decode=3, decode_speeds=speeds), arm,
                    profile=toy_profile).run()
    assert hashlib.sha256(res.t_finish.tobytes() + res.t_first.tobytes()).hexdigest()[:16] == digest


def test_unset_speeds_are_left_out_of_the_written_config() -> None:
    assert "decode_speeds" not in ClusterConfig().to_dict()
    assert ClusterConfig(n_decode=2, decode_speeds=(1, 2)).to_dict()["decode_speeds"] == [1.0, 2.0]
    assert ClusterConfig(n_decode=2).speeds == (1.0, 1.0)


@pytest.mark.parametrize(("kw", "says", "fix"), [
    ({"n_decode": 4, "decode_speeds": (1.0, 2.0)}, "has 2 value(s), the cluster has n_decode = 4", "[1, 1, 2, 2]"),
    ({"mode": "colocated", "n_instances": 3, "decode_speeds": (1.0,)}, "n_instances = 3", "one speed per instance"),
    ({"n_decode": 2, "decode_speeds": (1.0, 0.0)}, "must all be positive numbers, got 0.0", "speed > 0"),
    ({"n_decode": 2, "decode_speeds": (1.0, -2.0)}, "got -2.0", "speed > 0"),
    ({"n_decode": 1, "decode_speeds": (float("inf"),)}, "got inf", "speed > 0"),
])
def test_bad_speeds_are_refused_naming_the_fix(kw: dict, says: str, fix: str) -> None:
    with pytest.raises(ConfigError) as e:
        ClusterConfig(**kw)
    assert says in str(e.value) and fix in str(e.value)
