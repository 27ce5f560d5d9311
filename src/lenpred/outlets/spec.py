"""The OUTLETS head's contract with its data: the variants, the trajectory-spec check, row weights.

* :data:`VARIANTS`: the head variants compared in one table (``lenpred outlets train --variant NAME``);
* :func:`check_trajectory_spec`: a head applies only to trajectory features of its own draft head,
  target and layers (everything in the spec except where and how many positions were written);
* :func:`row_weights`: each prompt weighs 1, split evenly over its samples, each sample's weight evenly
  over its positions;
* :func:`two_piece_moments`: mean and sd of the quantile-matched two-piece normal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from lenpred.errors import CardMismatchError
from lenpred.stats.quantiles import Z90

__all__ = ["VARIANTS", "LOG_OFFSET", "TARGET_PREFIX", "check_trajectory_spec", "row_weights", "sample_codes", "sample_order",
           "sample_rows", "two_piece_moments"]

LOG_OFFSET = 16.0  # log bins are equal in log(remaining + LOG_OFFSET): ~2-token bins at the end, ~50 at 512
TARGET_PREFIX = "target."
# spec keys that describe where or how many positions were written (or the labels), not what the states are
_SPEC_IGNORED = frozenset({
    "lenpred_version", "created_at", "card_hash", "run", "n", "n_rows", "n_samples", "n_prompts", "shards",
    "dtype", "positions", "position_scheme", "scheme", "stride", "fractions", "tokens", "seconds", "roles",
    "device", "batch_size", "threads", "target_states", "labels",
})

# The variants compared in one table (lenpred outlets train --variant NAME). "outlets" is the default head.
VARIANTS: dict[str, dict[str, Any]] = {
    "outlets": {"blocks": ("draft",), "progress": True, "loss": "l1-log"},
    "outlets-fused": {"blocks": ("fused",), "progress": True, "loss": "l1-log"},
    "outlets-both": {"blocks": ("draft", "fused"), "progress": True, "loss": "l1-log"},
    "outlets-noprogress": {"blocks": ("draft",), "progress": False, "loss": "l1-log"},
    "outlets-running": {"blocks": ("draft", "draft_running"), "progress": True, "loss": "l1-log"},
    "outlets-history": {"blocks": ("draft", "draft_running"), "progress": True, "loss": "l1-log", "history": "pool"},
    "outlets-l1raw": {"blocks": ("draft",), "progress": True, "loss": "l1"},
    "outlets-softlabel": {"blocks": ("draft",), "progress": True, "loss": "softlabel"},
    "outlets-target": {"blocks": ("target",), "progress": True, "loss": "l1-log"},
    "probe": {"blocks": ("target",), "progress": False, "loss": "softlabel", "bins": "linear", "n_bins": 10,
              "smoothing": 0.0, "refine": True, "hidden": 128, "depth": 1},
}


def _flat(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flat(v, key + "."))
        else:
            out[key] = list(v) if isinstance(v, tuple) else v
    return out


def _ignored(key: str) -> bool:
    parts = key.split(".")
    return any(p in _SPEC_IGNORED for p in parts) or parts[-1].endswith("path")


def check_trajectory_spec(trained: Mapping[str, Any], given: Mapping[str, Any], what: str = "outlets head") -> None:
    """Every field of the trajectory spec the head was fitted on must match the given features' --
    except where and how many positions were written (the position scheme, the run, counts, dtype,
    file paths): a head applies at any position, on any prompt set of the same draft head and target."""
    a, b = _flat(trained), _flat(given)
    for k in sorted(set(a) | set(b)):
        if _ignored(k) or a.get(k) == b.get(k):
            continue
        low = k.lower()
        if low.startswith("draft"):
            who, fix = "another draft head", "compute trajectory features with the head's draft head"
        elif low.startswith(("target", "model")) or "fingerprint" in low:
            who, fix = "another target model", "compute trajectory features for the head's target model"
        else:
            who, fix = "another trajectory spec", "compute trajectory features with the head's spec"
        raise CardMismatchError(
            f"trajectory features come from {who} than the {what} was trained on "
            f"({k}: {b.get(k)!r} != {a.get(k)!r})", f"{fix} (lenpred outlets features), or retrain the head on these")


def row_weights(index: Any, per: str = "sample") -> np.ndarray:
    """(n,) weights, mean 1. ``per="sample"``: each prompt 1, split evenly over its samples, each sample's
    over its positions (a long answer counts as much as a short one). ``per="row"``: each prompt split
    evenly over its samples, every row of a sample weighing the same, so a sample counts as often as it
    has rows: on live rows (t = 0, 16, 32, ... while running) as often as a server meets it."""
    if per not in ("sample", "row"):
        raise ValueError(f"row_weights: per must be 'sample' or 'row', got {per!r}")
    pid = index["prompt_id"].astype(str).to_numpy()
    sid = index["sample_idx"].to_numpy()
    key = np.char.add(np.char.add(pid.astype(str), "\x00"), sid.astype(str))
    _, s_code, s_count = np.unique(key, return_inverse=True, return_counts=True)
    _, p_code = np.unique(pid, return_inverse=True)
    # samples per prompt: distinct sample codes within each prompt
    pairs = np.unique(np.column_stack([p_code, s_code]), axis=0)
    k_per_prompt = np.bincount(pairs[:, 0], minlength=p_code.max() + 1)
    w = 1.0 / (k_per_prompt[p_code] * (1.0 if per == "row" else s_count[s_code]))
    return w / w.mean()


def two_piece_moments(q10: np.ndarray, q50: np.ndarray, q90: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sd of the two-piece normal whose 10/50/90% quantiles are the given ones (half-normals
    of scales s1 = (q50 - q10) / z and s2 = (q90 - q50) / z on either side of q50, each half the mass)."""
    s1 = np.maximum(q50 - q10, 0.0) / Z90
    s2 = np.maximum(q90 - q50, 0.0) / Z90
    d = (s2 - s1) / np.sqrt(2.0 * np.pi)
    return q50 + d, np.sqrt(np.maximum(0.5 * (s1**2 + s2**2) - d**2, 0.0))



def sample_codes(index: Any) -> np.ndarray:
    """Each row's sample (``prompt_id``, ``sample_idx``) as an integer code, in order of first appearance."""
    import pandas as pd

    return pd.factorize(index["prompt_id"].astype(str) + "\x00" + index["sample_idx"].astype(str))[0]


def sample_order(index: Any) -> tuple[np.ndarray, np.ndarray]:
    """(codes, order): :func:`sample_codes` and the rows ordered by sample, then by ``t``."""
    codes = sample_codes(index)
    return codes, np.lexsort((index["t"].to_numpy(), codes))


def sample_rows(index: Any) -> list[np.ndarray]:
    """Each sample's rows in order of ``t`` (rows of ``index`` in any order)."""
    codes, order = sample_order(index)
    return np.split(order, np.flatnonzero(np.diff(codes[order])) + 1)
