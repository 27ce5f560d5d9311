"""The predictor registry: one explicit table from name to head class.

``lenpred train --predictor NAME`` and :func:`lenpred.predictors.io.load_head` look heads up here; an
unknown name is an error that lists the valid ones. Synthetic noise models (:mod:`lenpred.sim.noise`) are not
trained estimators and are not in this table. The trajectory head ``outlets`` lives with the trajectory
features it reads (:mod:`lenpred.outlets`, a package above this one, which this one does not import): it
adds itself to the table when :mod:`lenpred.outlets.head` is imported, as every part of lenpred that
reads or trains one does.
"""

from __future__ import annotations

from typing import Any

from lenpred.errors import ConfigError
from lenpred.predictors.base import Predictor
from lenpred.predictors.constant import ConstantHead
from lenpred.predictors.egtp import EGTPHead
from lenpred.predictors.film import FiLMHead
from lenpred.predictors.gbdt import GBDTHead
from lenpred.predictors.mlp import MLPHead
from lenpred.predictors.moe import MoEHead
from lenpred.predictors.ngram import NgramHead
from lenpred.predictors.probe import ProbeHead
from lenpred.predictors.prompt_length import PromptLengthHead
from lenpred.predictors.proxy import ProxyHead
from lenpred.predictors.ridge import RidgeHead
from lenpred.predictors.softlabel import SoftLabelHead
from lenpred.registry import Registry

__all__ = ["PREDICTORS", "make_predictor"]

PREDICTORS: Registry[type[Predictor]] = Registry("predictor")
for _cls in (ConstantHead, PromptLengthHead, RidgeHead, MLPHead, SoftLabelHead, EGTPHead, FiLMHead, MoEHead,
             ProxyHead, ProbeHead, NgramHead, GBDTHead):
    PREDICTORS.add(_cls.name, _cls)


def make_predictor(name: str, params: dict[str, Any] | None = None) -> Predictor:
    """A new (unfitted) head ``name`` with hyperparameters ``params`` (unknown ones are an error)."""
    cls = PREDICTORS.get(name)
    params = dict(params or {})
    valid = cls.param_names()
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise ConfigError(f"predictor {name!r} has no hyperparameter(s) {', '.join(unknown)}",
                          f"valid: {', '.join(valid) or '(none)'}")
    import inspect

    sig = inspect.signature(cls.__init__).parameters
    for k, v in params.items():  # block selectors are tuples in the signature; JSON gives lists, flags strings
        if "tuple" in str(sig[k].annotation):
            if isinstance(v, list):
                params[k] = tuple(v)
            elif isinstance(v, str):
                params[k] = tuple(s.strip() for s in v.split(",") if s.strip())
    return cls(**params)
