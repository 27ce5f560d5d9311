"""Decode lengths of a run, checked for what the bound needs, in the three treatments of truncation.

A sample with ``stop_reason == 'length'`` stopped at ``max_new_tokens`` (the cap C): it is censored,
not a length. The analysis reports three variants side by side:

``censored`` (censoring-aware; the headline while truncations look like a normal tail)
    prompts with fewer than half their samples censored; censored samples are multiply imputed
    from a per-prompt right-censored normal fit (see :mod:`lenpred.stats.censoring`).
``eos``
    only samples that ended with EOS: the responses that end. Biased low when the cap cuts a genuine
    tail (it drops exactly the long ones).
``capped``
    every sample, a censored one counted as C. This is the exact bound for the length the engine
    actually serves under this card (it never generates past C), and understates the latent spread.

Which one leads is decided in :func:`lenpred.stats.analysis.choose_variants`.

Estimators work on arrays with the samples on the last axis; prompts are grouped by their sample count
K so each group is one dense ``(M, P, K)`` array (M imputations, P prompts), which keeps every
estimator vectorised even while a run is still being collected and prompts have unequal K.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from os import PathLike
from typing import Any

import numpy as np
import pandas as pd

from lenpred.data.lengths import sample_lengths
from lenpred.data.rundir import RunDir
from lenpred.errors import DataError
from lenpred.stats.censoring import impute_censored
from lenpred.stats.config import MIN_SAMPLES_FLOOR, RECOMMENDED_SAMPLES, BoundConfig

VARIANT_LABELS = {
    "censored": "censoring-aware",
    "eos": "EOS-only",
    "capped": "capped (served)",
}


@dataclass(frozen=True)
class RunLengths:
    """One row per sample: prompt_id, sample_idx, length, censored, text (decoded response).

    Read from a run directory (:func:`load_run_lengths`) or from a plain length table
    (:func:`lenpred.stats.table.read_length_table`); ``card`` is the run's card, or for a table a
    minimal card that names the table and its cap.
    """

    samples: pd.DataFrame
    cap: int
    card: dict[str, Any]
    card_hash: str
    path: str
    min_samples: int = 2
    prompts_left_out: int = 0  # prompts with samples, but fewer than min_samples
    prompts_listed: int | None = None  # prompts the run lists (None for a plain length table)
    source: str = "run"  # "run" (a run directory) or "table" (a plain length table)

    @property
    def text_available(self) -> bool:
        return bool(self.samples["text"].str.strip().any())

    @property
    def n_prompts(self) -> int:
        return int(self.samples["prompt_id"].nunique())


@dataclass(frozen=True)
class LengthsOrigin:
    """Where a length table comes from, as :class:`RunLengths` records it: the cap the lengths were
    sampled under, the run's card (or a table's minimal card) and hash, its path, the prompts the run
    lists (None for a plain length table) and the kind of source ("run" or "table")."""

    cap: int
    card: dict[str, Any]
    card_hash: str
    path: str
    prompts_listed: int | None = None
    source: str = "run"


@dataclass(frozen=True)
class Group:
    """Prompts that share a sample count K. ``x`` is (M, P, K); M = 1 unless samples were imputed."""

    prompt_ids: np.ndarray  # (P,)
    x: np.ndarray  # (M, P, K)
    n_truncated: np.ndarray  # (P,) samples of the prompt that hit the cap (imputed in the censored variant)
    n_total: np.ndarray  # (P,) samples of the prompt in the run, kept or not

    @property
    def k(self) -> int:
        return int(self.x.shape[-1])


@dataclass(frozen=True)
class Variant:
    """One treatment of truncation: the groups it keeps and why it dropped the others."""

    name: str
    groups: list[Group]
    dropped: dict[str, int] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return VARIANT_LABELS[self.name]

    @property
    def n_prompts(self) -> int:
        return sum(len(g.prompt_ids) for g in self.groups)

    @property
    def n_samples(self) -> int:
        return sum(g.x.shape[1] * g.x.shape[2] for g in self.groups)


def _need_more_samples(path: str, k_max: int, min_samples: int) -> DataError:
    """No prompt has ``min_samples`` samples: say what would work with the samples there are."""
    why = (
        f"{path}: no prompt has {min_samples} or more samples (the most any prompt has is {k_max})"
    )
    if min_samples > MIN_SAMPLES_FLOOR and k_max >= MIN_SAMPLES_FLOOR:
        # the samples are there, the selection is too strict
        return DataError(
            why,
            f"use --min-samples {k_max} or less, or add samples: `lenpred collect` with --samples "
            f"{min_samples} on the same run extends it",
        )
    return DataError(
        f"{why}; the bound compares each sample with the median of the prompt's other samples, so it "
        f"needs at least {MIN_SAMPLES_FLOOR} samples per prompt ({RECOMMENDED_SAMPLES} or more for a usable "
        "estimate)",
        f"collect with --samples {RECOMMENDED_SAMPLES} (or more) per prompt",
    )


def load_run_lengths(run: RunDir | str | PathLike[str], min_samples: int = 2) -> RunLengths:
    """Read a run directory and refuse runs the bound cannot be computed from, with a clear error.

    Raises :class:`DataError` for an empty run, one with fewer than ``min_samples`` samples on every
    prompt, or one where every sample was truncated; :class:`CardMismatchError` (from
    :class:`RunDir`) when the directory mixes shards made under different cards.
    """
    rd = run if isinstance(run, RunDir) else RunDir.open(run)
    path = str(rd.path)
    cap = rd.card.get("sampling", {}).get("max_new_tokens")
    if not isinstance(cap, int) or cap < 1:
        raise DataError(f"{path}/card.json has no positive integer sampling.max_new_tokens", "fix the card")
    df = sample_lengths(rd, extra=("text",), with_prompts=False)
    if df.empty:
        raise DataError(
            f"{path} has no samples yet (no shard in samples.parquet/)",
            "wait for `lenpred collect` to write its first shard, or check the run path",
        )
    try:
        listed: int | None = len(rd.prompts())
    except DataError:
        listed = None
    origin = LengthsOrigin(cap=cap, card=rd.card, card_hash=rd.card_hash, path=path, prompts_listed=listed)
    return from_samples(df, origin, min_samples=min_samples, fix_corrupt="the run is corrupt; re-collect it")


def from_samples(
    df: pd.DataFrame,
    origin: LengthsOrigin,
    *,
    min_samples: int = 2,
    fix_corrupt: str = "fix the lengths",
) -> RunLengths:
    """:class:`RunLengths` from a table in :func:`lenpred.data.lengths.sample_lengths` form (columns
    ``prompt_id``, ``sample_idx``, ``n_tokens``, ``truncated``, optional ``text``), in its row order;
    ``fix_corrupt`` is the fix a negative length's error suggests."""
    cap, path = origin.cap, origin.path
    text = df["text"].fillna("").astype(str).to_numpy() if "text" in df else np.full(len(df), "", dtype=object)
    samples = pd.DataFrame(
        {
            "prompt_id": df["prompt_id"].astype(str).to_numpy(),
            "sample_idx": df["sample_idx"].astype(int).to_numpy(),
            "length": df["n_tokens"].astype(int).to_numpy(),
            "censored": df["truncated"].to_numpy(dtype=bool),
            "text": text,
        }
    )
    if (samples["length"] < 0).any():
        raise DataError(f"{path} has samples with a negative n_tokens", fix_corrupt)
    k = samples.groupby("prompt_id", sort=False).size()
    if int(k.max()) < min_samples:
        raise _need_more_samples(path, int(k.max()), min_samples)
    # --min-samples selects prompts by how many samples they have in the run (e.g. 24 keeps the
    # prompts of a K = 24 extension); each variant then needs MIN_SAMPLES_FLOOR usable samples.
    keep = k.index[k >= min_samples]
    left_out = int(len(k) - len(keep))
    if left_out:
        samples = samples[samples["prompt_id"].isin(keep)].reset_index(drop=True)
    if bool(samples["censored"].all()):
        raise DataError(
            f"{path}: all {len(samples)} samples stopped at max_new_tokens={cap}, so no length was observed",
            "collect a new run with a larger max_new_tokens (or a lower temperature to avoid repetition loops)",
        )
    return RunLengths(
        samples=samples,
        cap=cap,
        card=origin.card,
        card_hash=origin.card_hash,
        path=path,
        min_samples=min_samples,
        prompts_left_out=left_out,
        prompts_listed=origin.prompts_listed,
        source=origin.source,
    )


_Kept = tuple[str, np.ndarray, np.ndarray, int, int]  # prompt_id, lengths, censored, n_truncated, n_total


def _groups(
    per_prompt: list[_Kept],
    impute: bool,
    n_imputations: int,
    rng: np.random.Generator,
) -> list[Group]:
    """Group kept prompts by K into dense arrays, imputing the censored samples if asked."""
    by_k: dict[int, list[_Kept]] = {}
    for item in per_prompt:
        by_k.setdefault(len(item[1]), []).append(item)
    groups = []
    for k in sorted(by_k):
        items = by_k[k]
        m = n_imputations if impute and any(it[2].any() for it in items) else 1
        x = np.empty((m, len(items), k))  # (M, P, K)
        for p, (_, lengths, cens, _, _) in enumerate(items):
            x[:, p, :] = impute_censored(lengths, cens, m, rng) if impute else lengths
        groups.append(
            Group(
                prompt_ids=np.array([it[0] for it in items]),
                x=x,
                n_truncated=np.array([it[3] for it in items]),
                n_total=np.array([it[4] for it in items]),
            )
        )
    return groups


def build_variant(lengths: RunLengths, name: str, config: BoundConfig, rng: np.random.Generator) -> Variant:
    """The prompts and (possibly imputed) lengths of one variant; raises if it keeps no prompt.

    Prompts with fewer than ``--min-samples`` samples were already left out by
    :func:`load_run_lengths`; here a variant drops only prompts it cannot use.
    """
    kept: list[_Kept] = []
    dropped = {"too_few_samples": 0, "all_truncated": 0, "half_or_more_truncated": 0}
    for pid, g in lengths.samples.groupby("prompt_id", sort=False):
        x = g["length"].to_numpy(dtype=float)
        c = g["censored"].to_numpy(dtype=bool)
        n_eos = int((~c).sum())
        n_trunc, n_total = int(c.sum()), len(x)
        if name == "capped":
            kept.append((str(pid), np.minimum(x, lengths.cap), np.zeros_like(c), n_trunc, n_total))
            continue
        if n_eos == 0:
            dropped["all_truncated"] += 1
            continue
        if name == "eos":
            if n_eos < MIN_SAMPLES_FLOOR:  # the held-out median needs two EOS samples
                dropped["too_few_samples"] += 1
                continue
            kept.append((str(pid), x[~c], np.zeros(n_eos, dtype=bool), n_trunc, n_total))
        else:  # censored: the median is identified only while fewer than half the samples are censored
            if 2 * int(c.sum()) >= len(x):
                dropped["half_or_more_truncated"] += 1
                continue
            kept.append((str(pid), x, c, n_trunc, n_total))
    dropped = {k: v for k, v in dropped.items() if v}
    if not kept:
        reasons = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in dropped.items())
        raise DataError(
            f"{lengths.path}: the {VARIANT_LABELS[name]} variant keeps no prompt ({reasons})",
            "collect more samples per prompt or raise max_new_tokens; or choose another --headline variant",
        )
    groups = _groups(kept, impute=name == "censored", n_imputations=config.n_imputations, rng=rng)
    return Variant(name=name, groups=groups, dropped=dropped)
