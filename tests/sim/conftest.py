"""Shared fixtures for the simulator tests: a hand-checkable latency profile and random workloads."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from lenpred.sim.profiles import LatencyProfile
from lenpred.sim.request import Request
from lenpred.stats import portable


@pytest.fixture
def toy_profile() -> LatencyProfile:
    """Round numbers: prefill 0.1 s + 1 ms/token; decode 10 ms + 10 us/context token + 1 ms/request;
    1000 bytes of KV per token."""
    return LatencyProfile(
        name="toy",
        prefill=(0.1, 0.001, 0.0),
        decode=(0.01, 1e-5, 0.001),
        kv_bytes_per_token=1000,
        kv_capacity_tokens=100_000,
        max_batch=16,
        max_prefill_tokens=4096,
    )


MakeRequests = Callable[..., list[Request]]


@pytest.fixture
def make_requests() -> MakeRequests:
    def make(n: int = 300, rate: float = 50.0, seed: int = 0, noise: float = 0.3,
             prompt_median: float = 100.0, output_median: float = 80.0, max_len: int = 600) -> list[Request]:
        rng = np.random.default_rng(seed)
        t = np.cumsum(rng.exponential(1.0 / rate, n))
        p = np.clip(rng.lognormal(np.log(prompt_median), 0.7, n), 1, max_len).astype(int)
        o = np.clip(rng.lognormal(np.log(output_median), 0.9, n), 1, max_len).astype(int)
        pred = o * portable.exp(noise * rng.standard_normal(n))  # numpy's exp differs by CPU
        return [Request(i, t[i], p[i], o[i], pred[i]) for i in range(n)]

    return make
