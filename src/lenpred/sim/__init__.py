"""Serving simulator: what length predictions are worth to a scheduler.

Entities (:mod:`~lenpred.sim.request`, :mod:`~lenpred.sim.instances`), the event vocabulary
(:mod:`~lenpred.sim.events`) and the simulator that owns the heap (:mod:`~lenpred.sim.engine`),
latency profiles (:mod:`~lenpred.sim.profiles`), workloads (:mod:`~lenpred.sim.workload`: arrivals,
length sources, predictions), a run's figures (:mod:`~lenpred.sim.summary`), sweeps (:mod:`~lenpred.sim.sweep`;
their plots are :mod:`lenpred.report.sim_plots`). The queue policies and dispatchers it runs are
:mod:`lenpred.sched`'s. ``lenpred simulate --config FILE --out DIR`` runs a config.
"""

from lenpred.sim.arm import ArmPolicy
from lenpred.sim.config import (
    ArrivalConfig,
    ClusterConfig,
    LengthConfig,
    MetricsConfig,
    PolicyConfig,
    PredictionConfig,
    SimConfig,
    SweepConfig,
    WorkloadConfig,
)
from lenpred.sim.engine import SimResult, SimulationError, Simulator, simulate
from lenpred.sim.profiles import PROFILES, LatencyProfile, Timing, derive_profile, fit_profile, get_profile
from lenpred.sim.request import Request
from lenpred.sim.summary import summarize
from lenpred.sim.sweep import SweepResult, run_sweep
from lenpred.sim.workload import (
    Workload,
    build_workload,
    read_requests,
    requests_to_frame,
    workload_from_table,
)

__all__ = [
    "ArmPolicy", "ArrivalConfig", "ClusterConfig", "LatencyProfile", "LengthConfig", "MetricsConfig", "PROFILES",
    "PolicyConfig", "PredictionConfig", "Request", "SimConfig", "SimResult", "SimulationError", "Simulator",
    "SweepConfig", "SweepResult", "Timing", "Workload", "WorkloadConfig", "build_workload", "derive_profile", "fit_profile",
    "get_profile", "read_requests", "requests_to_frame", "run_sweep", "simulate", "summarize",
    "workload_from_table",
]
