"""Synthetic runs with exact ground truth, made once per test session and shared by the stats tests.

Sizes are chosen so that the whole stats suite stays well under a minute on two slow cores while
every estimator is still within a few percent of its known answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from lenpred.stats import BoundAnalysis, BoundConfig, BoundSummary, analyse_run
from lenpred.stats import synthetic as sim

# small bootstrap / reference sizes: the tests check point estimates and coverage, not CI precision
FAST = BoundConfig(n_boot=300, n_boot_robust=30, n_normal_reference=1500, n_imputations=10)


@dataclass
class SynthRun:
    path: Path
    truth: sim.Truth
    analysis: BoundAnalysis

    @property
    def summary(self) -> BoundSummary:
        return self.analysis.summary


def _make(tmp_path_factory: pytest.TempPathFactory, name: str, gen: sim.Generator, **kw: int) -> SynthRun:
    path = tmp_path_factory.mktemp("runs") / name
    truth = sim.write_synthetic_run(path, gen, sim.Sampling(**kw))
    return SynthRun(path, truth, analyse_run(path, FAST))


@pytest.fixture(scope="session")
def ramp_run(tmp_path_factory: pytest.TempPathFactory) -> SynthRun:
    """Ramping hazard, near-normal lengths, sd = 0.15 mu + 12, K = 8, no truncation."""
    return _make(tmp_path_factory, "ramp", sim.ramping_hazard(300, seed=1), k=8, max_new_tokens=4096, seed=11)


@pytest.fixture(scope="session")
def segment_run(tmp_path_factory: pytest.TempPathFactory) -> SynthRun:
    """Sum of N ~ near-normal(nbar, (0.3 nbar)^2) segments: alpha should be the count CV 0.3."""
    return _make(tmp_path_factory, "seg", sim.segment_sum(300, seed=2), k=8, max_new_tokens=4096, seed=12)


@pytest.fixture(scope="session")
def geometric_run(tmp_path_factory: pytest.TempPathFactory) -> SynthRun:
    """Constant hazard (geometric lengths): the theory's normal law must *not* show up. K = 24."""
    gen = sim.constant_hazard(150, mu_range=(150.0, 300.0), seed=3)
    return _make(tmp_path_factory, "geom", gen, k=24, max_new_tokens=100_000, seed=13)


@pytest.fixture(scope="session")
def censored_run(tmp_path_factory: pytest.TempPathFactory) -> SynthRun:
    """The ramp run's law with max_new_tokens = 450: ~9% of samples truncated, mostly on long prompts."""
    return _make(tmp_path_factory, "cens", sim.ramping_hazard(300, seed=1), k=8, max_new_tokens=450, seed=14)
