"""Predictions reach the simulator one way: a :class:`lenpred.predictions.Predictions` table,
joined to the workload by ``(prompt_id, sample_idx)``.

Where the table comes from is the arm's ``prediction`` config (:func:`predictions_for`):

* a synthetic predictor (:mod:`lenpred.sim.noise`) run on the workload's samples;
* ``table``: a Parquet file written by ``lenpred predict`` (or any code through
  :meth:`Predictions.write`); for a run-directory workload it must have been made for that run;
* ``input``: the request table's own ``predicted_tokens`` (``predicted_spread``,
  ``repredictions``) columns.

:func:`other_samples_table` makes the oracle *distribution* as a table: each sample's prompt's other
samples.

:func:`aligned` joins a table to a workload with :meth:`Predictions.for_samples`, so a request
without a prediction is an error naming the first one, never a silent oracle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from lenpred.errors import DataError
from lenpred.predictions import Predictions, read_predictions
from lenpred.sim.config import PredictionConfig
from lenpred.sim.length_sources import parse_repredictions


def predictions_for(
    cfg: PredictionConfig,
    *,
    population: pd.DataFrame,
    keys: pd.DataFrame,
    card: Mapping[str, Any] | None = None,
    table: pd.DataFrame | None = None,
    source: str = "synthetic",
    seed: int = 0,
) -> Predictions:
    """The predictions table an arm with prediction config ``cfg`` sees on a workload.

    ``population``: the samples synthetic predictors predict on (prompt_id, sample_idx, n_tokens);
    ``keys``: the requests' join keys; ``card``: the run card (a table must match it);
    ``table``: a request table's rows aligned with ``keys`` (model ``input``).
    """
    if cfg.model == "table":
        assert cfg.path is not None  # the config refuses model 'table' without a path
        return read_predictions(cfg.path, card=card)
    if cfg.model == "input":
        if table is None or "predicted_tokens" not in table:
            raise DataError("prediction model 'input' needs a predicted_tokens value for every request",
                            "add the column to the request table, or pick another prediction model")
        return trace_predictions(table, keys, f"request table of the {source} workload")
    from lenpred.sim.noise import make_synthetic

    pred = make_synthetic(cfg.model, rel_mae=cfg.rel_mae, mae=cfg.mae, repredict_every=cfg.repredict_every)
    return pred.predict_table(population, seed=seed, card=card, source=source)


def aligned(preds: Predictions, keys: pd.DataFrame, what: str = "predictions") -> pd.DataFrame:
    """``preds`` row for row with the requests' ``keys`` (an error if any has no prediction)."""
    return preds.for_samples(keys, what=what)


def trace_predictions(df: pd.DataFrame, keys: pd.DataFrame, where: str) -> Predictions:
    """A request table's own prediction columns as a predictions table (rows aligned with keys)."""
    pred = pd.to_numeric(df["predicted_tokens"], errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(pred)
    if bad.any():
        raise DataError(f"prediction model 'input' needs a predicted_tokens value for every request "
                        f"({int(bad.sum())} missing or not a number in the {where})",
                        "give every request a prediction, or pick another prediction model")
    frame = pd.DataFrame({"prompt_id": keys["prompt_id"].to_numpy(), "sample_idx": keys["sample_idx"].to_numpy(),
                          "pred_tokens": pred})
    if "predicted_spread" in df:
        frame["spread"] = pd.to_numeric(df["predicted_spread"], errors="coerce").to_numpy(dtype=float)
    if "repredictions" in df:
        reps = [parse_repredictions(x) for x in df["repredictions"]]
        frame["repred_gen"] = [[g for g, _ in r] for r in reps]
        frame["repred_remaining"] = [[x for _, x in r] for r in reps]
    return Predictions.from_frame(frame, made_by="request-table", config={"path": where}, where=where)


def other_samples_table(population: pd.DataFrame, card: Any = None, source: str = "") -> Predictions:
    """The oracle *distribution* as a predictions table: each sample's ``dist_tokens`` are the lengths
    of its prompt's other samples (``pred_tokens`` their median, the per-prompt oracle the bound is
    about). ``population``: prompt_id, sample_idx, n_tokens (a workload's). Prompts with one sample
    have no other samples: an error naming the first."""
    pop = population[["prompt_id", "sample_idx", "n_tokens"]]
    rows = []
    for pid, g in pop.groupby("prompt_id", sort=False):
        y = g["n_tokens"].to_numpy(dtype=np.float64)
        if y.size < 2:
            raise DataError(f"prompt {pid!r} has one sample: no other samples to form its oracle distribution",
                            "use a run with K >= 2 samples per prompt (a split's test prompts have K >= 8)")
        for i, s in enumerate(g["sample_idx"].tolist()):
            others = np.delete(y, i)
            rows.append({"prompt_id": str(pid), "sample_idx": int(s), "pred_tokens": float(np.median(others)),
                         "dist_tokens": sorted(others.tolist())})
    return Predictions.from_frame(pd.DataFrame(rows), made_by="prompt-samples",
                                  config={"what": "each sample's prompt's other samples"}, card=card,
                                  where=f"other-samples table of {source or 'the workload'}")
