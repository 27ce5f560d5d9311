"""Online OUTLETS: a length head at every speculative cycle, on the draft states the loop already has.

:class:`OnlineLengthHead` is an ``on_cycle`` callback for :class:`lenpred.draft.speculative.
SpeculativeDecoder`. Each :class:`~lenpred.draft.speculative.Cycle` carries the draft states it
computed (``states``), their fc inputs (``fused``) and the target states they read (``aux``) at
consecutive positions; they go into the same :class:`lenpred.outlets.features.RowBuilder` the
offline extraction uses, so a row online is the row offline (no extra forward pass: the head reads
what the cycle computed anyway). The row at the newest position, t = the tokens generated before
this cycle (see :func:`lenpred.outlets.features.state_position`), goes to the head.

**Two paths.** A head with an ``online()`` method (the ``outlets`` predictor:
:class:`lenpred.outlets.rownet.OnlineOutlets`) gets one per generation and is fed the row's
blocks as arrays (:meth:`~lenpred.outlets.features.RowBuilder.row`, views, no copies; the builder
keeps only the blocks the head reads) -- no pandas, no spec check, no mode switch per cycle; the
object also carries a refining head's posterior from cycle to cycle. Any other head gets the row as a one-row :class:`~lenpred.outlets.store.Trajectory`
(refilled in place each cycle) through ``predict_dist``.

**The head's contract** (the ``outlets`` predictor, or anything with the same two methods):
``predict(X)`` -> (n,) predicted *remaining* tokens L - t per row of the trajectory ``X``;
``predict_dist(X)`` -> :class:`lenpred.predictors.dist.Dist` of the remaining tokens (mean, spread,
q10 / q50 / q90). The head's saved ``meta.json`` records the trajectory spec it was trained on as
``feature_spec`` (the ``trajectory_spec`` of its training artifact); :func:`check_head_spec` refuses
a head trained on another draft head or target before anything is loaded. Online rows carry
placeholder labels (length = t, remaining = 0, truncated = False): a head must never read them.

**An event** (:class:`LengthEvent`) reports, after cycle c: the tokens it committed, the tokens so far
``n_generated``, the position ``t`` the prediction is for, the predicted remaining tokens after t
with its 80% interval (q10..q90), the predicted total ``t + remaining``, and ``remaining_now`` =
max(total - n_generated, 0) (the same prediction, counted from now).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lenpred.errors import CardMismatchError, DataError
from lenpred.outlets.features import RowBuilder
from lenpred.outlets.store import Trajectory

__all__ = ["CostReport", "CostRun", "LengthEvent", "OnlineFeatures", "OnlineLengthHead", "OpenedHeads", "check_head_spec",
           "load_length_head", "measure_cost", "open_heads", "read_head_spec", "target_forward_seconds"]


@dataclass
class LengthEvent:
    cycle: int
    committed: list[int]
    n_generated: int
    t: int  # tokens generated when the state the head read was the newest (= n_generated before this cycle)
    remaining: float  # the head's median remaining tokens after t
    remaining_mean: float
    remaining_q10: float
    remaining_q90: float
    total: float  # t + remaining
    total_q10: float
    total_q90: float
    remaining_now: float  # max(total - n_generated, 0)
    head_seconds: float  # row building + the head, this cycle

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in d.items()}


class OnlineFeatures:
    """The rows of the sequence being decoded, fed cycle by cycle; a reusable one-row Trajectory."""

    def __init__(self, n_prompt: int, layers: Sequence[int], spec: Mapping[str, Any] | None = None,
                 blocks: Sequence[str] | None = None) -> None:
        self.builder = RowBuilder(n_prompt, layers, blocks)  # blocks: only those the head reads (None: all)
        self.spec = spec if spec is not None else {}  # kept as given (not copied): see OnlineLengthHead
        self._traj: Trajectory | None = None

    def add_cycle(self, cycle: Any) -> int:
        """Take a cycle's states; returns the newest t with a row (-1: none yet)."""
        if cycle.fused is None or cycle.aux is None or not cycle.positions:
            return self.builder.t_latest
        self.builder.add(int(cycle.positions[0]), cycle.states, cycle.fused, cycle.aux)
        return self.builder.t_latest

    def trajectory(self, t: int) -> Trajectory:
        """The row at t as a one-row Trajectory (the same object each call, updated in place: cheap)."""
        blocks = self.builder.rows([t])
        if self._traj is None:
            index = pd.DataFrame({"prompt_id": ["online"], "sample_idx": [0], "t": [t], "length": [t], "remaining": [0],
                                  "truncated": [False]})
            self._traj = Trajectory(index, blocks, self.spec)
            self._cols = [self._traj.index.columns.get_loc(c) for c in ("t", "length")]
        else:
            for k, v in blocks.items():
                self._traj.blocks[k][...] = v
            for c in self._cols:
                self._traj.index.iat[0, c] = t
        return self._traj


class OnlineLengthHead:
    """``on_cycle`` callback: one prediction per cycle, kept in ``events`` (and passed to ``emit``)."""

    def __init__(self, head: Any, n_prompt: int, layers: Sequence[int], spec: Mapping[str, Any] | None = None,
                 emit: Any = None) -> None:
        self.head = head
        # the head's own spec object when it has one: a head may skip its spec check on identity
        own = getattr(head, "feature_spec_", None)
        make = getattr(head, "online", None)
        self.fast = make() if callable(make) else None  # one per generation (a refining head's state)
        self.features = OnlineFeatures(n_prompt, layers, own if isinstance(own, dict) and own else spec,
                                       blocks=self.fast.blocks if self.fast is not None else None)
        self.emit = emit
        self.events: list[LengthEvent] = []
        self.row_seconds: list[float] = []
        self.head_seconds: list[float] = []

    def __call__(self, cycle: Any) -> LengthEvent | None:
        t0 = time.perf_counter()
        t = self.features.add_cycle(cycle)
        if t < 0:
            return None
        if self.fast is not None:
            t1 = time.perf_counter()
            mean, _, r10, r50, r90 = self.fast.predict_row(t, self.features.builder.row)
        else:
            X = self.features.trajectory(t)
            t1 = time.perf_counter()
            d = self.head.predict_dist(X)
            mean, r10, r50, r90 = float(d.mean[0]), float(d.q10[0]), float(d.q50[0]), float(d.q90[0])
        t2 = time.perf_counter()
        self.row_seconds.append(t1 - t0)
        self.head_seconds.append(t2 - t1)
        total = t + r50
        ev = LengthEvent(cycle=int(cycle.index), committed=list(cycle.committed), n_generated=int(cycle.n_generated),
                         t=int(t), remaining=r50, remaining_mean=mean, remaining_q10=r10, remaining_q90=r90,
                         total=total, total_q10=t + r10, total_q90=t + r90,
                         remaining_now=max(total - int(cycle.n_generated), 0.0), head_seconds=t2 - t0)
        self.events.append(ev)
        if self.emit is not None:
            self.emit(ev)
        return ev


# ---------------------------------------------------------------------------------------- compatibility
def read_head_spec(path: str | Path) -> dict[str, Any]:
    """The trajectory spec a length head was trained on (its meta.json ``feature_spec``), without loading it."""
    from lenpred.io.artifacts import load_artifact

    art = load_artifact(path, kind="head", what="length head")
    spec = art.meta.get("feature_spec")
    if not isinstance(spec, dict) or "draft" not in spec or "target_fingerprint" not in spec:
        raise DataError(f"length head {path} was not trained on trajectory features (its feature spec names no "
                        "draft head): it is a prefill head", "pass an outlets head (lenpred outlets train)")
    return spec


def load_length_head(path: str | Path) -> Any:
    """Load a length head (the ``outlets`` predictor) strictly, through the predictor registry."""
    import lenpred.outlets.head  # noqa: F401 - registers the outlets head
    from lenpred.predictors.io import load_head

    return load_head(path)


@dataclass
class OpenedHeads:
    """An EAGLE-3 head and an OUTLETS length head, checked against each other and their target."""

    draft: Any  # lenpred.draft.io.DraftHead, or None (plain decoding)
    model: str  # the target's name: the one asked for, else the draft head's recorded target
    layers: tuple[int, ...] | None  # the target layers the draft reads (None without a draft)
    length_head: Any = None
    length_spec: dict[str, Any] | None = None


def open_heads(draft: str | Path | None, length_head: str | Path | None = None, *,
               model: str | None = None) -> OpenedHeads:
    """Load the draft head and the length head with every check ``lenpred generate`` makes, before
    the target's weights load: a length head trained on another draft head is refused first (its
    meta.json only), then, with the target's config, a draft head that does not fit the target and a
    length head of another target or layers."""
    from transformers import AutoConfig

    from lenpred.draft.io import check_against_target, load_draft
    from lenpred.models import EMBEDDED
    from lenpred.models.loading import hf_folder
    from lenpred.outlets.extract import draft_identity

    head = load_draft(draft) if draft else None
    spec = did = None
    if length_head:
        if head is None:
            raise DataError("a length head needs the draft head it was trained on", "pass the draft head too")
        spec = read_head_spec(length_head)
        did = draft_identity(head)
        check_head_spec(spec, draft=did, target_fingerprint=None,
                        layers=(spec.get("layers") or {}).get("draft_input") or [], what=f"length head {length_head}")
    rec = ((head.meta or {}).get("target") or {}) if head else {}
    name = model or rec.get("id") or EMBEDDED
    mspec, folder = hf_folder(name)
    layers = check_against_target(head, AutoConfig.from_pretrained(folder), fingerprint=mspec.fingerprint) if head else None
    loaded = None
    if spec is not None and did is not None:  # now with the target: another target or layers are refused too
        check_head_spec(spec, draft=did, target_fingerprint=mspec.fingerprint, layers=layers or [],
                        what=f"length head {length_head}")
        loaded = load_length_head(length_head)
    return OpenedHeads(head, name, layers, loaded, spec)


def check_head_spec(spec: Mapping[str, Any], *, draft: Mapping[str, Any], target_fingerprint: str | None,
                    layers: Sequence[int], what: str = "length head") -> None:
    """Refuse a head trained on another draft head, target or layers, naming which."""
    want = (spec.get("draft") or {}).get("sha256")
    if want != draft.get("sha256"):
        raise CardMismatchError(f"{what} was trained on the states of another draft head (weights sha256 "
                                f"{str(want)[:12]}... != this head's {str(draft.get('sha256'))[:12]}...)",
                                "pass the --draft it was trained with, or train a length head on this draft's features")
    fp = spec.get("target_fingerprint")
    if fp and target_fingerprint and fp != target_fingerprint:
        raise CardMismatchError(f"{what} was trained for another target ({fp[:19]}... != {target_fingerprint[:19]}...)",
                                "pass the --model it was trained for")
    got = [int(j) for j in ((spec.get("layers") or {}).get("draft_input") or layers)]
    if got != [int(j) for j in layers]:
        raise CardMismatchError(f"{what} was trained on target layers {got}, the draft reads {list(layers)}",
                                "use the draft head and target it was trained with")


# ---------------------------------------------------------------------------------------- cost
@dataclass(frozen=True)
class CostRun:
    """The generation :func:`measure_cost` times: ``k`` drafted tokens a cycle, at most
    ``max_new_tokens``, stopping at ``eos_ids``; ``repeats`` timed target passes."""

    k: int = 3
    max_new_tokens: int = 64
    eos_ids: Sequence[int] = ()
    repeats: int = 20


@dataclass
class CostReport:
    cycles: int
    row_ms: float  # median per cycle: building the row from the cycle's states
    head_ms: float  # median per cycle: the head's predict_dist
    target_forward_ms: float  # median single-token decoding pass of the target at the final context
    loop_pass_ms: float  # mean target pass of this generation (verifying passes of k + 1 tokens, and the prefill)
    share: float  # (row + head) / one target forward pass
    share_of_loop_pass: float

    def line(self) -> str:
        return (f"length head: {self.row_ms + self.head_ms:.3f} ms per cycle (row {self.row_ms:.3f} + head "
                f"{self.head_ms:.3f}) = {100 * self.share:.2f}% of one target forward pass "
                f"({self.target_forward_ms:.1f} ms; {100 * self.share_of_loop_pass:.2f}% of the loop's mean target "
                f"pass, {self.loop_pass_ms:.1f} ms) over {self.cycles} cycles")


def target_forward_seconds(target: Any, ids: Sequence[int], repeats: int = 20) -> float:
    """Median wall time of one single-token decoding pass of ``target`` after ``ids`` (KV cache warm)."""
    import torch

    with torch.inference_mode():
        kv = target.new_cache()
        target.forward(torch.tensor([list(ids[:-1])], device=target.device), kv)
        n = len(ids) - 1
        last = torch.tensor([[int(ids[-1])]], device=target.device)
        times = []
        for _ in range(repeats + 2):
            t0 = time.perf_counter()
            target.forward(last, kv)
            times.append(time.perf_counter() - t0)
            target.crop(kv, n)
    return float(np.median(times[2:]))  # the first passes warm caches and allocators


def measure_cost(target: Any, draft: Any, head: Any, prompt_ids: Sequence[int], *, layers: Sequence[int],
                 spec: Mapping[str, Any] | None = None, run: CostRun = CostRun()) -> CostReport:
    """The head's cost per cycle against one target forward pass, on one greedy generation."""
    from lenpred.draft.speculative import SpeculativeDecoder

    online = OnlineLengthHead(head, len(prompt_ids), layers, spec)
    dec = SpeculativeDecoder(target, draft, k=run.k, sampling=None, max_new_tokens=run.max_new_tokens,
                             eos_ids=list(run.eos_ids))
    g = dec.generate(list(prompt_ids), on_cycle=online)
    if not online.head_seconds:
        raise DataError("the generation ended before the first cycle: nothing to measure", "use another prompt")
    fwd = target_forward_seconds(target, list(prompt_ids) + g.tokens, run.repeats)
    verify = g.target_seconds / max(g.target_forwards, 1)  # the loop's passes, prefill included
    row, hd = float(np.median(online.row_seconds)), float(np.median(online.head_seconds))
    return CostReport(len(online.head_seconds), 1e3 * row, 1e3 * hd, 1e3 * fwd, 1e3 * verify,
                      (row + hd) / fwd, (row + hd) / verify)
