"""The reduced draft vocabulary: the N most frequent target tokens of the training responses.

As in the released training code (``scandata`` in SafeAILab/EAGLE ``traineagle3/cnets.py``): count
the target ids of the assistant responses, keep the ``N`` most frequent, sort them by id, and store

* ``d2t[d] = used[d] - d`` (int64 offsets: draft id ``d`` is target id ``d + d2t[d]``),
* ``t2d[v] = v in used`` (bool over the whole target vocabulary).

Ties in frequency go to the lower id (the release leaves them to ``Counter.most_common``). When fewer
than ``N`` distinct ids occur, the vocabulary is filled with unseen ids in increasing order, so a head
always has exactly ``draft_vocab_size`` entries. The end-of-sequence token is counted once per
response that ended with it (the draft must be able to propose it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch

from lenpred.errors import ModelError

__all__ = ["build_draft_vocab", "check_vocab_maps", "count_tokens"]


def count_tokens(sequences: Iterable[Sequence[int] | np.ndarray], vocab_size: int) -> np.ndarray:
    """(V,) int64 counts of token ids over ``sequences``."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for s in sequences:
        a = np.asarray(s, dtype=np.int64)
        if a.size:
            if a.min() < 0 or a.max() >= vocab_size:
                raise ModelError(f"token id {int(a.max())} outside the target vocabulary of {vocab_size}",
                                 "the run was made with another tokenizer than this target's")
            counts += np.bincount(a, minlength=vocab_size)
    return counts


def build_draft_vocab(counts: np.ndarray, n: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(d2t (n,) int64, t2d (V,) bool, share of the counted tokens the vocabulary covers)."""
    counts = np.asarray(counts, dtype=np.int64)
    V = int(counts.shape[0])
    if not 0 < n <= V:
        raise ModelError(f"draft vocabulary size {n} must be in 1..{V} (the target's vocabulary)",
                         f"pass --draft-vocab-size from 1 to {V}")
    ids = np.arange(V)
    order = np.lexsort((ids, -counts))  # by count descending, then id ascending
    used = np.sort(order[:n])
    d2t = torch.from_numpy(used - np.arange(n)).to(torch.int64)
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[torch.from_numpy(used)] = True
    total = int(counts.sum())
    coverage = float(counts[used].sum() / total) if total else 0.0
    return d2t, t2d, coverage


def check_vocab_maps(d2t: torch.Tensor, t2d: torch.Tensor, vocab_size: int, what: str = "draft head") -> None:
    """Refuse maps that do not fit a target vocabulary of ``vocab_size`` (naming the first problem)."""
    n = int(d2t.shape[0])
    if int(t2d.shape[0]) != vocab_size:
        raise ModelError(f"{what}: t2d covers {int(t2d.shape[0])} target ids, the target has {vocab_size}",
                         "use a head made for this target's vocabulary")
    tgt = torch.arange(n, dtype=torch.int64) + d2t.to(torch.int64).cpu()
    bad = (tgt < 0) | (tgt >= vocab_size)
    if bool(bad.any()):
        d = int(torch.nonzero(bad)[0])
        raise ModelError(
            f"{what}: d2t maps draft id {d} to target id {int(tgt[d])}, outside the target vocabulary of {vocab_size}",
            "use a head made for this target (its d2t does not fit this vocabulary)",
        )
    if int(torch.unique(tgt).numel()) != n:
        raise ModelError(f"{what}: d2t maps two draft ids to the same target id", "re-create the head's vocabulary")
    t2d_cpu = t2d.to(torch.bool).cpu()
    if int(t2d_cpu.sum()) != n or not bool(t2d_cpu[tgt].all()):
        raise ModelError(f"{what}: t2d does not mark exactly the target ids d2t maps to",
                         "re-create the head's vocabulary (d2t and t2d disagree)")
