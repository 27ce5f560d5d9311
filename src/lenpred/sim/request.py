"""The request entity: what a client sent, what a predictor said about it, and what happened to it.

A predictor's output reaches the policies only through these fields:

* ``pred``: predicted number of output tokens (at arrival, from the prompt alone); required: a
  request without a prediction is an error (an oracle is a predictor too: pass the true length);
* ``spread``: optional predictive spread (a standard deviation, tokens);
* ``repred``: optional re-predictions made while decoding, as ``(tokens_generated,
  predicted_remaining)`` pairs strictly increasing in ``tokens_generated`` (trajectory-aware predictors);
* ``dist``: optional predictive distribution of the total length (:class:`lenpred.sched.dists.LengthDist`),
  with one per re-prediction in ``repred_dists`` (what distribution-aware policies read; the current
  one follows the re-predictions applied).

``pred_total(gen)`` is the latest predicted *total* output length given ``gen`` generated tokens;
``pred_remaining(gen)`` is that minus ``gen`` (floored at 0).

State kept while simulating (``gen``/``base_step``) lets a decode instance know how many tokens a
running request has produced without touching it at every step: ``gen + (instance.step -
base_step)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from lenpred.errors import DataError

NAN = math.nan

# Predicted token counts are held on a grid of 2**-16 tokens. The decode instances keep running sums of
# predicted remaining tokens (added on arrival, taken away on admission, finish or a crossed prediction)
# that dispatchers compare; with every addend a multiple of 2**-16 below 2**37 tokens, each of those
# float sums is exact, so it does not depend on the order of the updates or drift from 0 on an empty
# instance, and a last-bit difference in a prediction (numpy's exp differs between AVX-512 and AVX2
# CPUs) cannot flip a comparison between two instances' loads (issue 39).
PRED_GRID = 65536.0


def on_grid(x: float) -> float:
    """``x`` rounded to the nearest multiple of 2**-16 (non-finite values unchanged)."""
    return round(x * PRED_GRID) / PRED_GRID if math.isfinite(x) else x

# What a request needs before it can run on a decode (or colocated) instance.
NEED_TRANSFER = 1  # fresh from a prefill instance: its KV must be pulled over the link
NEED_RECOMPUTE = 2  # preempted with recompute: prompt + generated tokens are prefilled again
NEED_SWAP_IN = 3  # preempted with swap: its KV comes back from host memory
NEED_PREFILL = 4  # colocated mode: a new request that has not been prefilled yet


class Request:
    """One request. Plain class with ``__slots__``: the engine touches these fields a lot."""

    __slots__ = (
        "rid", "arrival", "prompt", "output", "pred", "spread", "repred", "dist0", "repred_dists",
        # live state
        "gen", "base_step", "epoch", "pred_cur", "next_repred", "pred_version", "active",
        "need", "q_rem", "prefill_inst", "decode_inst", "dist", "t_left",
        # outcome (seconds; NaN until it happens)
        "t_prefill_start", "t_first", "t_decode_admit", "t_finish", "n_preempt", "rejected", "waited",
    )
    rid: int
    arrival: float  # seconds
    prompt: int  # prompt tokens
    output: int  # true output tokens
    pred: float  # predicted output tokens (at arrival)
    spread: float | None  # predictive standard deviation, tokens
    repred: tuple[tuple[int, float], ...]  # (tokens generated, predicted remaining)
    dist0: Any  # LengthDist | None: the predictive distribution at arrival
    repred_dists: tuple[Any, ...]  # LengthDist per re-prediction (empty: keep dist0)
    dist: Any  # LengthDist | None: the current one
    t_left: float  # when it was last preempted (NaN while not preempted)
    waited: float  # seconds spent preempted, waiting to rejoin a batch
    gen: int  # tokens generated as of base_step
    base_step: int  # decode-instance step count when gen was recorded
    epoch: int
    pred_cur: float  # latest predicted total output tokens
    next_repred: int  # index of the next re-prediction not yet applied
    pred_version: int
    active: bool
    need: int  # NEED_* while queued
    q_rem: float
    prefill_inst: Any  # PrefillInstance | None
    decode_inst: Any  # DecodeInstance | None
    t_prefill_start: float
    t_first: float
    t_decode_admit: float
    t_finish: float
    n_preempt: int
    rejected: bool

    # 9 parameters, kept: a __slots__ entity built once per simulated request (millions per study); its four
    # prediction fields are keywords with defaults, and a config object per request would cost the hot path
    def __init__(
        self,
        rid: int,
        arrival: float,
        prompt: int,
        output: int,
        pred: float | None,
        spread: float | None = None,
        repred: Sequence[tuple[int, float]] = (),
        dist: Any = None,
        repred_dists: Sequence[Any] = (),
    ) -> None:
        self.rid = rid
        self.arrival = float(arrival)  # seconds
        self.prompt = int(prompt)  # prompt tokens
        self.output = int(output)  # true output tokens (including the first, made by prefill)
        if pred is None:
            raise DataError(f"request {rid} has no predicted length",
                            "give every request a prediction (a predictions table, or the oracle predictor)")
        self.pred = on_grid(float(pred))  # predicted output tokens, on the grid (PRED_GRID)
        self.spread = None if spread is None else float(spread)
        self.repred = tuple((int(g), on_grid(float(r))) for g, r in repred)
        if len(self.repred) > 1 and any(b[0] <= a[0] for a, b in zip(self.repred, self.repred[1:], strict=False)):
            raise DataError(f"request {rid}: re-predictions must be strictly increasing in tokens generated, "
                            f"got {[g for g, _ in self.repred]}", "keep one re-prediction per position, sorted")
        self.dist0 = dist
        self.repred_dists = tuple(repred_dists)
        self.reset()

    def reset(self) -> None:
        """Forget any simulated state (so one request list can be simulated again)."""
        self.gen = 0
        self.base_step = 0
        self.epoch = 0  # bumped whenever the request leaves a running batch: stale heap entries die
        self.pred_cur = self.pred
        self.next_repred = 0
        self.pred_version = 0
        self.active = False  # counted in its decode instance's predicted-remaining sum
        self.need = 0
        self.q_rem = 0.0  # predicted remaining recorded when queued (for instance load sums)
        self.prefill_inst = None
        self.decode_inst = None
        self.t_prefill_start = NAN
        self.t_first = NAN
        self.t_decode_admit = NAN
        self.t_finish = NAN
        self.n_preempt = 0
        self.rejected = False
        self.dist = self.dist0
        self.t_left = NAN
        self.waited = 0.0

    def apply_repredictions(self, gen: int) -> bool:
        """Move ``pred_cur`` to the latest re-prediction made at or before ``gen`` tokens.
        Returns True when it changed."""
        changed = False
        rp = self.repred
        i = self.next_repred
        while i < len(rp) and rp[i][0] <= gen:
            g, r = rp[i]
            self.pred_cur = g + r
            if self.repred_dists:
                self.dist = self.repred_dists[i]
            i += 1
            changed = True
        self.next_repred = i
        return changed

    def pred_total(self) -> float:
        return self.pred_cur

    def pred_remaining(self, gen: int) -> float:
        r = self.pred_cur - gen
        return r if r > 0.0 else 0.0

    def __repr__(self) -> str:
        return (
            f"Request(rid={self.rid}, arrival={self.arrival:.4f}, prompt={self.prompt}, "
            f"output={self.output}, pred={self.pred:.1f})"
        )
