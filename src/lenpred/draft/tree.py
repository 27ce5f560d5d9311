"""Dynamic draft trees (EAGLE-2's, which EAGLE-3 keeps): their shape, and growing one from the draft.

:class:`TreeSpec` says how big a tree is; :func:`grow_tree` expands the best nodes level by level
with the draft head and keeps the best ``nodes`` of them; :class:`DraftTree` is what the target
verifies in one pass (:meth:`lenpred.draft.speculative.SpeculativeDecoder._tree_cycle`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from lenpred.checks import check_limit
from lenpred.draft.model import DraftKV, Eagle3Draft
from lenpred.errors import ConfigError

__all__ = ["DraftTree", "TreeSpec", "grow_tree"]


@dataclass(frozen=True)
class TreeSpec:
    """A dynamic draft tree (EAGLE-2's, which EAGLE-3 keeps): ``depth`` levels; at each level the
    ``topk`` best nodes by cumulative draft log-probability are expanded into their ``topk`` best
    children; the ``nodes`` best nodes of the whole tree are verified in one target pass."""

    depth: int = 5
    topk: int = 8
    nodes: int = 48

    def __post_init__(self) -> None:
        if self.depth < 1 or self.topk < 1 or self.nodes < 1:
            raise ConfigError(f"a draft tree needs depth, topk and nodes >= 1, got {self.depth},{self.topk},{self.nodes}",
                              "e.g. --tree 5,8,48 (depth, top-k, nodes)")

    @classmethod
    def parse(cls, text: str) -> TreeSpec:
        """'DEPTH,TOPK,NODES', e.g. '5,8,48'."""
        try:
            d, k, n = (int(x) for x in str(text).split(","))
        except ValueError:
            raise ConfigError(f"cannot read the tree {text!r}", "write DEPTH,TOPK,NODES, e.g. --tree 5,8,48") from None
        return cls(d, k, n)

    def check_limits(self) -> TreeSpec:
        """Refuse a depth, top-k or node count above :data:`lenpred.checks.LIMITS` (it would run for hours)."""
        for name, v in (("tree depth", self.depth), ("tree top-k", self.topk), ("tree nodes", self.nodes)):
            check_limit(name, v, "e.g. --tree 5,8,48 (depth, top-k, nodes)")
        return self


@dataclass
class DraftTree:
    """The verified part of a draft tree, nodes in verification order (depth first, then score):
    ``tokens`` (target ids), ``parents`` (index into these nodes, -1 = the last committed token),
    ``depths`` (1 = the token after it). Every node's parent comes before it."""

    tokens: list[int]
    parents: list[int]
    depths: list[int]
    states: dict[int, torch.Tensor] = field(default_factory=dict)  # node -> draft state of its expansion


def grow_tree(draft: Eagle3Draft, d2t_ids: torch.Tensor, spec: TreeSpec, root: torch.Tensor, T: int,
              dkv: DraftKV) -> DraftTree:
    """Grow the dynamic tree from the draft state ``root`` (1, 1, d) of position T - 1 (whose logits
    propose the token after the last committed one). ``d2t_ids`` (N_draft,): draft id -> target id."""
    dev = root.device
    w = min(spec.topk, draft.config.draft_vocab_size)
    toks: list[int] = []  # draft ids
    parents: list[int] = []
    depths: list[int] = []
    scores: list[float] = []
    hid: dict[int, torch.Tensor] = {}  # expanded node -> its draft state o (d,)
    anc: dict[int, list[int]] = {}  # node -> entries of its expanded strict ancestors
    lp = torch.log_softmax(draft.logits(root)[0, -1], dim=-1)
    v, ix = torch.topk(lp, w)
    for s_, i_ in zip(v.tolist(), ix.tolist(), strict=True):
        toks.append(i_)
        parents.append(-1)
        depths.append(1)
        scores.append(s_)
        anc[len(toks) - 1] = []
    tk = tv = None
    level = list(range(len(toks)))
    for d in range(1, spec.depth):
        grow = sorted(level, key=lambda n: -scores[n])[:w]
        m = len(grow)
        E = 0 if tk is None else int(tk.shape[2])
        allowed = torch.zeros((m, E), dtype=torch.bool)
        for r, n in enumerate(grow):
            for e in anc[n]:
                allowed[r, e] = True
        hidden = torch.stack([root[0, 0] if parents[n] < 0 else hid[parents[n]] for n in grow])[None]
        ids = d2t_ids[torch.tensor([toks[n] for n in grow], device=dev)][None]
        pos = torch.full((1, m), T - 1 + d, device=dev)
        o, (k_, v_) = draft.step_tree(hidden, ids, pos, dkv, None if tk is None else (tk, tv), allowed)
        tk = k_ if tk is None else torch.cat([tk, k_], dim=2)
        tv = v_ if tv is None else torch.cat([tv, v_], dim=2)
        lps = torch.log_softmax(draft.logits(o)[0], dim=-1)  # (m, N_draft)
        cv, ci = torch.topk(lps, w, dim=-1)
        level = []
        for r, n in enumerate(grow):
            hid[n] = o[0, r]
            for s_, i_ in zip(cv[r].tolist(), ci[r].tolist(), strict=True):
                toks.append(i_)
                parents.append(n)
                depths.append(d + 1)
                scores.append(scores[n] + s_)
                anc[len(toks) - 1] = anc[n] + [E + r]
                level.append(len(toks) - 1)
    # the best `nodes` nodes; a child never scores above its parent, and ties go to the shallower
    # node, so the chosen set contains every chosen node's ancestors
    order = sorted(range(len(toks)), key=lambda n: (-scores[n], depths[n], n))[: spec.nodes]
    order.sort(key=lambda n: (depths[n], -scores[n], n))
    new_index = {n: i for i, n in enumerate(order)}
    tids = d2t_ids[torch.tensor([toks[n] for n in order], device=dev)].tolist()
    return DraftTree(tokens=[int(t) for t in tids],
                     parents=[-1 if parents[n] < 0 else new_index[parents[n]] for n in order],
                     depths=[depths[n] for n in order],
                     states={new_index[n]: hid[n] for n in order if n in hid})
