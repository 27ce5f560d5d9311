"""lenpred: decode-length prediction for LLM serving.

How many tokens will a request generate, how well can that be known from the prompt alone, and
what is a prediction worth to a scheduler. See README.md ("Python API") and the design notes.

The main objects are importable from the top level; they load lazily (``import lenpred`` stays
cheap: torch and transformers load only when a model is used)::

    from lenpred import RunDir, analyse_run, BoundConfig, Predictions, load_split, run_sweep, SimConfig
"""

from __future__ import annotations

from lenpred.lazy import lazy_exports

__version__ = "0.1.0"

# public name -> module that defines it (one explicit table)
_EXPORTS: dict[str, str] = {
    # errors
    "LenpredError": "lenpred.errors",
    "ConfigError": "lenpred.errors",
    "DataError": "lenpred.errors",
    "CardMismatchError": "lenpred.errors",
    "ModelError": "lenpred.errors",
    "EngineError": "lenpred.errors",
    "NotFittedError": "lenpred.errors",
    # configs, artifacts, registries
    "Config": "lenpred.config",
    "Registry": "lenpred.registry",
    "Artifact": "lenpred.io.artifacts",
    "write_artifact": "lenpred.io.artifacts",
    "load_artifact": "lenpred.io.artifacts",
    "check_card": "lenpred.io.artifacts",
    # data: run directories, lengths, the split
    "RunDir": "lenpred.data.rundir",
    "card_hash": "lenpred.data.rundir",
    "sample_lengths": "lenpred.data.lengths",
    "loo_median": "lenpred.data.lengths",
    "Split": "lenpred.data.split",
    "SplitConfig": "lenpred.data.split",
    "build_split": "lenpred.data.split",
    "load_split": "lenpred.data.split",
    "write_split": "lenpred.data.split",
    "PromptConfig": "lenpred.data.sources",
    "SOURCES": "lenpred.data.sources",
    # collection
    "collect": "lenpred.collect.runner",
    "CollectConfig": "lenpred.collect.runner",
    "SamplingConfig": "lenpred.collect.base",
    "ENGINES": "lenpred.collect.runner",
    # the bound
    "BoundConfig": "lenpred.stats",
    "analyse_run": "lenpred.stats",
    "analyse_lengths": "lenpred.stats",
    "load_bound": "lenpred.stats",
    # predictions and features
    "Predictions": "lenpred.predictions",
    "read_predictions": "lenpred.predictions",
    "Features": "lenpred.features.store",
    "load_features": "lenpred.features.store",
    "save_features": "lenpred.features.store",
    # the simulator
    "SimConfig": "lenpred.sim",
    "run_sweep": "lenpred.sim",
    "simulate": "lenpred.sim",
    "PROFILES": "lenpred.sim",
    # scheduling: the policies the simulator and the router share
    "QUEUE_POLICIES": "lenpred.sched",
    "DISPATCHERS": "lenpred.sched",
}

__all__ = ["__version__", *sorted(_EXPORTS)]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
