"""OUTLETS: remaining-length prediction from the EAGLE-3 draft backbone (docs/outlets.md).

One package, in the order data flows through it:

* :mod:`~lenpred.outlets.features` -- what a trajectory row is (positions, the state rule, the blocks)
  and :class:`~lenpred.outlets.features.RowBuilder`, which makes rows offline and online alike;
* :mod:`~lenpred.outlets.inputs` -- the samples a computation reads and the state cache they come from;
* :mod:`~lenpred.outlets.extract` -- ``lenpred outlets features``: a run's rows, resumably, in shards;
* :mod:`~lenpred.outlets.store` -- the trajectory artifact (save, load, merge shards);
* :mod:`~lenpred.outlets.spec` -- the head variants, the trajectory-spec check, row weights;
* :mod:`~lenpred.outlets.head` -- the ``outlets`` head (registry name ``outlets``);
* :mod:`~lenpred.outlets.rownet` -- its inference one row at a time (the one forward pass, offline and
  online) and TRAIL's refinement;
* :mod:`~lenpred.outlets.online` -- the head at every speculative cycle, its checks and its cost;
* :mod:`~lenpred.outlets.live` -- a live generation with re-predictions (``lenpred generate``, the demo);
* :mod:`~lenpred.outlets.baselines`, :mod:`~lenpred.outlets.evaluate` -- carried prefill heads, the
  carried oracle, and the bench along the trajectory; :mod:`~lenpred.outlets.bench_files` -- that bench
  from the files ``lenpred outlets bench`` names;
* :mod:`~lenpred.outlets.schedule` -- re-predictions for the simulator and the scheduling experiment;
* :mod:`~lenpred.outlets.pipeline` -- what each ``lenpred outlets`` subcommand does.

Presentation (tables, plots) is in :mod:`lenpred.report.outlets`. The names below are imported lazily,
so importing this package imports neither torch nor pandas.
"""

from __future__ import annotations

from lenpred.lazy import lazy_exports

_LAZY = {
    "Trajectory": "store", "load_trajectory": "store", "save_trajectory": "store", "merge_trajectories": "store",
    "TrajectoryConfig": "features", "RowBuilder": "features", "positions": "features", "sample_rows": "features",
    "compute_trajectory": "extract", "TrajectoryRequest": "extract", "TrajectoryRun": "extract", "draft_identity": "extract",
    "OutletsHead": "head", "VARIANTS": "spec", "check_trajectory_spec": "spec", "row_weights": "spec",
    "RowNet": "rownet",
    "OnlineOutlets": "rownet", "OnlineLengthHead": "online", "LengthEvent": "online", "open_heads": "online",
    "check_head_spec": "online", "measure_cost": "online", "CostReport": "online", "CostRun": "online",
    "Generation": "live", "GenerationSpec": "live", "open_generation": "live", "live_generation": "live", "LiveResult": "live",
    "Remaining": "baselines", "CarriedConstant": "baselines", "carried_oracle": "baselines",
    "carry_prefill": "baselines", "transition_matrix": "baselines",
    "OutletsBench": "evaluate", "run_bench": "bench_files", "BenchRequest": "bench_files", "score_methods": "evaluate",
    "outlets_predictions": "schedule", "run_schedule": "schedule", "ScheduleRequest": "schedule",
    "train_variant": "pipeline", "predict_table": "pipeline",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, {name: f"{__name__}.{mod}" for name, mod in _LAZY.items()})
