"""Saving and loading heads: an artifact directory (kind ``head``), never pickle.

Layout (written atomically by :func:`lenpred.io.artifacts.write_artifact`)::

    HEAD/
      meta.json            kind "head", schema_version, lenpred_version, card_scope "model+sampling",
                           card (model and sampling fields), card_hash (of the training run),
                           predictor (registry key), params (hyperparameters), input_kind,
                           feature_spec, blocks (concrete block names per group), widths, side_names,
                           cap, spread (affine law, where used), train (what training saw)
      weights.safetensors  every fitted array: network weights ("net.*"), standardisation, bins ...
      state.json           the head's other fitted scalars

Loading is strict: the kind and schema version must match, files must be intact (sha256 in
meta.json), the predictor must be registered, its hyperparameters valid, and the tensors exactly
those the head expects (torch ``load_state_dict(strict=True)``; no missing or extra name).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from lenpred.errors import ConfigError, DataError
from lenpred.io.artifacts import Artifact, load_artifact
from lenpred.predictors.base import KIND, SCHEMA_VERSION, STATE, AffineSpread, Predictor

__all__ = ["save_head", "load_head", "read_head", "KIND", "SCHEMA_VERSION", "STATE"]


def save_head(head: Predictor, path: str | os.PathLike[str], card: Mapping[str, Any] | None = None,
              meta: Mapping[str, Any] | None = None) -> Artifact:
    """Write a fitted head (:meth:`Predictor.save`). ``card``: the training run's card (its model and
    sampling fields are kept)."""
    return head.save(path, card=card, meta=meta)


def load_head(path: str | os.PathLike[str], card: Mapping[str, Any] | None = None) -> Predictor:
    """Load a head written by :func:`save_head`; with ``card``, refuse a run of another model or
    sampling card (another prompt set is fine: that is a transfer evaluation)."""
    return read_head(path, card)[0]


def read_head(path: str | os.PathLike[str], card: Mapping[str, Any] | None = None) -> tuple[Predictor, Artifact]:
    """:func:`load_head`, also returning the artifact (its ``meta``: what trained the head)."""
    from lenpred.predictors.registry import PREDICTORS, make_predictor

    art = load_artifact(path, kind=KIND, schema_versions=(SCHEMA_VERSION,), card=card, what="head")
    m = art.meta
    name = m.get("predictor")
    if name not in PREDICTORS:
        raise DataError(f"head {art.path} was made by predictor {name!r}, which this lenpred does not know",
                        f"known predictors: {', '.join(PREDICTORS.names())} (a package's own head is known once "
                        "its module is imported: the OUTLETS head's, lenpred.outlets.head, by the commands)")
    try:
        head = make_predictor(name, m.get("params") or {})
    except ConfigError as e:
        raise DataError(f"head {art.path}: {e.problem}", "retrain the head with this version of lenpred") from None
    head._check_params()
    tensors = art.tensors()
    info = art.read_json(STATE)
    head.blocks_ = m.get("blocks")
    head.widths_ = m.get("widths") or {}
    head.feature_spec_ = m.get("feature_spec")
    head.side_names_ = m.get("side_names")
    head.cap_ = m.get("cap")
    if not head.own_spread:
        if not m.get("spread"):
            raise DataError(f"head {art.path} lacks its spread law", "retrain the head")
        head.spread_ = AffineSpread.from_json(m["spread"])
    try:
        head._set_state(tensors, info)
    except KeyError as e:
        raise DataError(f"head {art.path} lacks fitted value {e.args[0]!r}", "the head is corrupt: retrain it") from None
    expected = set(head._get_state()[0])
    if set(tensors) != expected:
        extra, missing = sorted(set(tensors) - expected), sorted(expected - set(tensors))
        raise DataError(f"head {art.path}: its tensors do not match the {name} head (unexpected: {extra}, missing: {missing})",
                        "the head is corrupt or of another version: retrain it")
    head.n_train_ = (m.get("train") or {}).get("n_prompts")
    head.fit_seconds_ = (m.get("train") or {}).get("seconds")
    return head, art
