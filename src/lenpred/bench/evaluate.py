"""The fixed-card benchmark: predictors scored on a run's test split, relative to the oracle bound.

The protocol (what seed 004 of the limits work asks for): fix the model, the data and the sampling
card; score every predictor on the same test prompts' samples (the lengths as served: a sample cut
at max_new_tokens counts as max_new_tokens); and report, beside the absolute MAE, the MAE divided by
the per-prompt oracle bound computed on *the same prompts* -- the best any prompt-only predictor
can do there. Absolute figures move when the data change; the relative ones stay comparable.

:func:`evaluate` returns a typed :class:`BenchResult`; presentation is in :mod:`lenpred.report.bench`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from lenpred import __version__
from lenpred.bench.scoring import PointMetrics, point_metrics
from lenpred.data.lengths import loo_median, sample_lengths
from lenpred.data.rundir import RunDir
from lenpred.data.split import Split, load_split
from lenpred.errors import DataError
from lenpred.predictions import Predictions
from lenpred.stats.bootstrap import Bootstrap

__all__ = ["BenchResult", "BenchRow", "BoundRow", "ProtocolCard", "evaluate", "oracle_bound", "SUBSETS"]

SCHEMA_VERSION = 1
SUBSETS = ("all", "eos", "truncated")


@dataclass(frozen=True)
class ProtocolCard:
    """What was fixed: model, data, sampling, samples per prompt, the split."""

    run: str
    card_hash: str
    model: str
    model_fingerprint: str
    dataset: str
    dataset_sha256: str
    sampling: dict[str, Any]
    test_prompts: int
    test_samples: int
    samples_per_prompt: dict[str, int]  # K -> test prompts with K samples
    split_counts: dict[str, int]
    split_seed: int
    lenpred_version: str = __version__


@dataclass(frozen=True)
class BoundRow:
    """The per-prompt oracle bound on the test prompts (capped lengths), and the LOO prompt median."""

    n_prompts: int
    n_samples: int
    oracle_mae: float
    oracle_mae_ci: tuple[float, float]
    oracle_mae_insample: float
    oracle_mae_loo: float
    mean_length: float


@dataclass(frozen=True)
class BenchRow:
    name: str
    made_by: str
    subset: str  # all | eos | truncated
    metrics: PointMetrics
    mae_over_bound: float | None  # only on "all": the bound is defined over every sample
    excess_over_bound: float | None  # MAE - bound, tokens


@dataclass
class BenchResult:
    protocol: ProtocolCard
    bound: BoundRow
    rows: list[BenchRow] = field(default_factory=list)

    def row(self, name: str, subset: str = "all") -> BenchRow:
        for r in self.rows:
            if r.name == name and r.subset == subset:
                return r
        raise KeyError((name, subset))

    def names(self) -> list[str]:
        out: list[str] = []
        for r in self.rows:
            if r.name not in out:
                out.append(r.name)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BenchResult:
        if d.get("schema_version") != SCHEMA_VERSION:
            raise DataError(f"bench result of schema version {d.get('schema_version')}, expected {SCHEMA_VERSION}",
                            "rerun `lenpred bench` with this lenpred version to rewrite it")

        def tup(x: Any) -> tuple[float, float]:
            return (float(x[0]), float(x[1]))

        b = dict(d["bound"])
        b["oracle_mae_ci"] = tup(b["oracle_mae_ci"])
        rows = []
        for r in d["rows"]:
            m = dict(r["metrics"])
            m["mae_ci"] = tup(m["mae_ci"])
            rows.append(BenchRow(**{**r, "metrics": PointMetrics(**m)}))
        return cls(ProtocolCard(**d["protocol"]), BoundRow(**b), rows)


def oracle_bound(lengths: pd.DataFrame, n_boot: int, ci: float, seed: int, *, drop_single: bool = False) -> BoundRow:
    """The per-prompt oracle bound (:func:`lenpred.stats.oracle.mae_estimates`) on the prompts of
    ``lengths`` (columns prompt_id, n_tokens: the lengths as served), averaged over prompts, with a
    bootstrap interval over prompts (``default_rng(seed)``).

    The bound needs 2+ samples of a prompt. ``drop_single=False`` (the prefill bench): every prompt
    counts, and a prompt with one sample is an error (the split gives every test prompt K >= 8).
    ``drop_single=True`` (the OUTLETS bench): such prompts are left out, their samples not counted.
    Where no prompt has one sample the two give the same figures.
    """
    from lenpred.stats.bootstrap import mean_ci
    from lenpred.stats.oracle import mae_estimates

    k = lengths.groupby("prompt_id")["n_tokens"].transform("size")
    if not drop_single and (k < 2).any():
        raise DataError(f"{int(lengths.loc[k < 2, 'prompt_id'].nunique())} test prompt(s) have a single sample: "
                        "the oracle bound needs 2+ samples per prompt", "re-run `lenpred split` (test prompts get K >= 8)")
    keep, kk = lengths[k >= 2], k[k >= 2]
    per_prompt = []
    for _, g in keep.groupby(kk):
        ids = g["prompt_id"].unique()
        x = np.stack([g.loc[g["prompt_id"] == p, "n_tokens"].to_numpy(float) for p in ids])[None]  # (1, P, K)
        est = mae_estimates(x)
        per_prompt.append(pd.DataFrame({"prompt_id": ids, "oracle": est["mae_oracle"],
                                        "ins": est["mae_insample"], "loo": est["mae_loo"],
                                        "mean": x[0].mean(-1)}))
    if not per_prompt:
        raise DataError("no test prompt has 2+ samples: the bound is undefined", "use a run whose test prompts have K >= 8")
    pp = pd.concat(per_prompt, ignore_index=True)
    rng = np.random.default_rng(seed)
    return BoundRow(
        n_prompts=len(pp), n_samples=len(keep), oracle_mae=float(pp["oracle"].mean()),
        oracle_mae_ci=mean_ci(pp["oracle"].to_numpy(), n_boot, ci, rng),
        oracle_mae_insample=float(pp["ins"].mean()), oracle_mae_loo=float(pp["loo"].mean()),
        mean_length=float(pp["mean"].mean()),
    )


def _protocol(rd: RunDir, split: Split, test: pd.DataFrame) -> ProtocolCard:
    card = rd.card
    k = test.groupby("prompt_id").size().value_counts().sort_index()
    return ProtocolCard(
        run=str(rd.path), card_hash=rd.card_hash, model=str(card["model"].get("id")),
        model_fingerprint=str(card["model"].get("fingerprint")),
        dataset=str(card["prompts"].get("source")), dataset_sha256=str(card["prompts"].get("dataset_sha256")),
        sampling=dict(card["sampling"]), test_prompts=int(test["prompt_id"].nunique()), test_samples=len(test),
        samples_per_prompt={str(int(a)): int(b) for a, b in k.items()}, split_counts=split.counts(),
        split_seed=split.config.seed,
    )


def evaluate(
    run: RunDir | str | os.PathLike[str],
    predictions: Sequence[Predictions],
    names: Sequence[str] | None = None,
    split: Split | None = None,
    boot: Bootstrap | None = None,
    reference_rows: bool = True,
) -> BenchResult:
    """Score each predictions table on the run's test split (``boot``: the intervals' resamples, level, seed;
    default ``Bootstrap()``).

    ``reference_rows`` adds the prompt-median row: each test sample predicted by the median of its
    prompt's *other* samples (the bound used as a predictor; its MAE is the LOO end of the bracket).
    Every predictions table must be for this run (card hash) and cover every test sample.
    """
    boot = boot or Bootstrap()
    rd = run if isinstance(run, RunDir) else RunDir.open(run)
    split = split or load_split(rd, require_complete=False)  # only test prompts matter; they never change
    s = sample_lengths(rd, with_prompts=False)
    test = s[s["prompt_id"].isin(split.test)].reset_index(drop=True)
    if test.empty:
        raise DataError(f"{rd.path}: the split has no test prompt with samples", f"run `lenpred split {rd.path}`")
    res = BenchResult(_protocol(rd, split, test), oracle_bound(test, boot.n_boot, boot.ci, boot.seed))
    tables: list[tuple[str, str, pd.DataFrame]] = []
    names = list(names) if names is not None else [p.made_by for p in predictions]
    if len(set(names)) != len(names):
        raise DataError(f"predictor names must be unique, got {names}", "pass distinct names (NAME=PATH)")
    for name, p in zip(names, predictions, strict=True):
        p.check_card(rd.card, what=f"predictions {name!r}")
        tables.append((name, p.made_by, p.for_samples(test, what=f"predictions {name!r}")))
    if reference_rows:
        loo = loo_median(test["n_tokens"].to_numpy(float), test["prompt_id"].to_numpy())
        ref = test[["prompt_id", "sample_idx"]].assign(pred_tokens=loo, q10=np.nan, q50=np.nan, q90=np.nan)
        tables.append(("prompt-median (oracle)", "oracle", ref))
    y = test["n_tokens"].to_numpy(float)
    trunc = test["truncated"].to_numpy(bool)
    pids = test["prompt_id"].to_numpy()
    for name, made_by, t in tables:
        for subset in SUBSETS:
            m = {"all": np.ones_like(trunc), "eos": ~trunc, "truncated": trunc}[subset]
            if not m.any():
                continue
            q10, q50, q90 = (t[c].to_numpy(float)[m] if t[c].notna().all() else None for c in ("q10", "q50", "q90"))
            pm = point_metrics(y[m], t["pred_tokens"].to_numpy(float)[m], pids[m], (q10, q50, q90), boot)
            rel = exc = None
            if subset == "all":
                rel = pm.mae / res.bound.oracle_mae
                exc = pm.mae - res.bound.oracle_mae
            res.rows.append(BenchRow(name, made_by, subset, pm, rel, exc))
    return res
