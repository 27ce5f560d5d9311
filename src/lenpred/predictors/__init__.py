"""Length predictors: estimators on features (see base.py). The synthetic noise models the simulator
uses as yardsticks live in :mod:`lenpred.sim.noise`.

Every predictor writes the same predictions table (:mod:`lenpred.predictions`).

The trained heads (one file each: constant, prompt_length, ridge, mlp, softlabel, egtp, film, moe,
proxy, probe, and the router-side text heads ngram and gbdt; the torch heads on
:mod:`lenpred.predictors.torch_head`) follow the estimator contract of :mod:`lenpred.predictors.base`,
are listed in :mod:`lenpred.predictors.registry`, and are saved / loaded by :mod:`lenpred.predictors.io`;
:mod:`lenpred.predictors.pipeline` trains them on a run's split and predicts a run;
:mod:`lenpred.predictors.synthetic` makes features and runs with a planted truth to check them on. The names below are
imported lazily, so that importing this package does not import torch.
"""

from __future__ import annotations

from lenpred.lazy import lazy_exports

_LAZY = {
    "PREDICTORS": "lenpred.predictors.registry",
    "make_predictor": "lenpred.predictors.registry",
    "load_head": "lenpred.predictors.io",
    "save_head": "lenpred.predictors.io",
    "Targets": "lenpred.predictors.targets",
    "Dist": "lenpred.predictors.dist",
    "Predictor": "lenpred.predictors.base",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
