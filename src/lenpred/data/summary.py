"""A quick summary of a run directory: card, progress and length statistics (``lenpred info``, the demo).

:func:`run_summary` computes a :class:`RunSummary` from the lengths read through
:func:`lenpred.data.lengths.sample_lengths` (the one run-reading path); printing it is
:func:`lenpred.report.run_info.print_run_info`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from lenpred.data.lengths import sample_lengths
from lenpred.data.rundir import RunDir

__all__ = ["LengthStats", "RunSummary", "TargetProgress", "run_summary"]

QUANTILES = ("0.1", "0.5", "0.9", "0.99")


class LengthStats(BaseModel):
    """Length figures of the samples collected so far (absent while a run has no sample)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompts_with_samples: int
    samples_per_prompt: dict[str, int]  # K -> number of prompts with K samples
    truncated_share: float
    tokens: int
    length_mean: float
    length_quantiles: dict[str, float]
    eos_length_mean: float | None
    mean_within_prompt_sd_eos: float | None


class TargetProgress(BaseModel):
    """How far a collection target (the first ``prompts`` prompts x ``samples`` each) has got."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompts: int
    samples: int
    complete_prompts: int  # of the first `prompts` prompts, those with `samples` or more
    missing_samples: int


class RunSummary(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    run: str
    card_hash: str
    model: str | None
    engine: str | None
    sampling: dict[str, Any]
    targets: list[dict[str, Any]]
    prompts: int
    samples: int
    shards: int
    lengths: LengthStats | None
    progress: list[TargetProgress] = []

    def to_json_dict(self) -> dict[str, Any]:
        """The flat form ``lenpred info --json`` prints (length figures at the top level)."""
        out = self.model_dump(mode="json", exclude={"lengths"})
        if self.lengths is not None:
            out.update(self.lengths.model_dump(mode="json"))
        return out


def run_summary(run: RunDir) -> RunSummary:
    card = run.card
    s = sample_lengths(run, with_prompts=False)
    lengths = None
    if len(s.index):
        per = s.groupby("prompt_id").size()
        n = s["n_tokens"].to_numpy(dtype=float)
        eos = ~s["truncated"].to_numpy(dtype=bool)
        sd = s[eos].groupby("prompt_id")["n_tokens"].std().dropna()
        lengths = LengthStats(
            prompts_with_samples=int(per.size),
            samples_per_prompt={str(k): int(v) for k, v in per.value_counts().sort_index().items()},
            truncated_share=float((~eos).mean()),
            tokens=int(n.sum()),
            length_mean=float(n.mean()),
            length_quantiles={q: float(np.quantile(n, float(q))) for q in QUANTILES},
            eos_length_mean=float(n[eos].mean()) if eos.any() else None,
            mean_within_prompt_sd_eos=float(sd.mean()) if len(sd) else None,
        )
    progress = []
    if run.has_prompts():
        order = run.prompts()["prompt_id"].astype(str).tolist()
        have = s.groupby("prompt_id").size().reindex(order, fill_value=0).to_numpy() if len(s.index) else np.zeros(len(order), int)
        for t in card.get("targets", []):
            n, k = int(t["prompts"]), int(t["samples"])
            h = have[:n]
            progress.append(TargetProgress(prompts=n, samples=k, complete_prompts=int((h >= k).sum()),
                                           missing_samples=int(np.maximum(k - h, 0).sum())))
    return RunSummary(
        run=str(run.path),
        card_hash=run.card_hash,
        model=card["model"].get("id"),
        engine=card["engine"].get("name"),
        sampling=card["sampling"],
        targets=card.get("targets", []),
        prompts=int(len(run.prompts().index)) if run.has_prompts() else 0,
        samples=int(len(s.index)),
        shards=len(run.shard_paths()),
        lengths=lengths,
        progress=progress,
    )

