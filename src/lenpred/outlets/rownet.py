"""The fitted OUTLETS head's inference, one row at a time: the one forward pass offline and online.

:class:`RowNet` holds a fitted :class:`lenpred.outlets.head.OutletsHead`'s network as a fixed plan of
float32 numpy calls (one BLAS call per layer, GELU as x Phi(x); dropout left out) with the input
standardisation done in place in a preallocated (1, d) row, and the scalar arithmetic that turns one
output into the remaining-length distribution (q10 / q50 / q90, mean, spread). The offline
``predict`` / ``predict_dist`` and the online :class:`OnlineOutlets` (one generation's rows, fed one
position per cycle by :class:`lenpred.outlets.online.OnlineLengthHead`) both run rows through it, so an online prediction is the offline prediction of the same row bit for bit, and
a row's prediction never depends on the rows predicted beside it (BLAS picks other kernels for other
batch sizes, ~1e-7 apart). Training and validation run the same network batched in torch.

:class:`Refiner` is TRAIL's Bayesian refinement along one sample through the L-independent
checkpoints (:func:`refine_checkpoints`; docs/outlets.md, "probe").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from torch import nn

from lenpred.errors import DataError
from lenpred.predictors.dist import Dist
from lenpred.stats.quantiles import Z90

__all__ = ["RowNet", "OnlineOutlets", "Refiner", "refine_checkpoints"]

Plan = list[tuple[Any, ...]]
_C_TANH = np.float32(np.sqrt(2.0 / np.pi))


def _plan(net: nn.Module) -> Plan:
    """The eval-mode forward of an :func:`lenpred.predictors.nn.mlp` as numpy steps: ("linear", W^T
    (in, out) float32, b), ("gelu", approximate, Phi); dropout left out (eval). GELU(x) = x Phi(x)."""
    plan: Plan = []
    mods = list(net.children()) if isinstance(net, nn.Sequential) else [net]
    for m in mods:
        if isinstance(m, nn.Linear):
            w = m.weight.detach().cpu().numpy().astype(np.float32).T.copy()
            b = None if m.bias is None else m.bias.detach().cpu().numpy().astype(np.float32).copy()
            plan.append(("linear", w, b))
        elif isinstance(m, nn.GELU):
            from scipy import special

            plan.append(("gelu", m.approximate, special.ndtr))
        elif not isinstance(m, nn.Dropout):
            raise DataError(f"the outlets head's network has a {type(m).__name__} layer; the predict path knows "
                            "Linear, GELU and Dropout", "retrain the head with this version of lenpred")
    return plan


def _run(plan: Plan, x: np.ndarray) -> np.ndarray:
    """(1, d) float32 -> (1, out) float32: one row through the plan (float32 numpy; one small BLAS call
    per layer, far cheaper per row than torch's dispatch, which is what a cycle pays)."""
    for step in plan:
        if step[0] == "linear":
            x = x @ step[1]
            if step[2] is not None:
                x += step[2]
        elif step[1] == "tanh":
            x = np.float32(0.5) * x * (np.float32(1.0) + np.tanh(_C_TANH * (x + np.float32(0.044715) * x * x * x)))
        else:
            x = x * step[2](x)
    return x


_PROBS = np.array([0.1, 0.5, 0.9])


# ---------------------------------------------------------------- refinement
def refine_checkpoints(spec: Mapping[str, Any] | None) -> tuple[int, tuple[int, ...]]:
    """(stride, fixed token counts) of the refinement checkpoints: the L-independent positions of the
    spec's position scheme (t = 0, the fixed points, the stride grid); defaults 64 and 32 ... 512."""
    from lenpred.outlets.features import FIXED_TOKENS

    pos = (spec or {}).get("positions") or {}
    stride = int(pos.get("stride") or 64)
    tokens = pos.get("fixed_tokens", pos.get("tokens"))
    return max(stride, 1), tuple(sorted(int(x) for x in (FIXED_TOKENS if tokens is None else tokens)))


class Refiner:
    """TRAIL's refinement along one sample (see the module docstring): the posterior folded through
    the checkpoints so far; :meth:`output` is the posterior at any row after the latest checkpoint."""

    def __init__(self, edges: np.ndarray, stride: int, tokens: tuple[int, ...],
                 cache: dict[int, np.ndarray] | None = None) -> None:
        self.edges, self.stride, self.tokens = edges, stride, tokens
        self.cache = {} if cache is None else cache
        self.post: np.ndarray | None = None
        self.c = -1  # the latest checkpoint folded in

    def is_checkpoint(self, t: int) -> bool:
        return t == 0 or t % self.stride == 0 or t in self.tokens

    def due(self, t: int) -> list[int]:
        """The checkpoints after the latest folded one, up to t (increasing)."""
        a = self.c
        got = set(range((a // self.stride + 1) * self.stride, t + 1, self.stride)) if t > a else set()
        got |= {x for x in self.tokens if a < x <= t}
        if a < 0 <= t:
            got.add(0)
        return sorted(got)

    def _step(self, lik: np.ndarray, t: int) -> np.ndarray:
        cur = lik
        if self.post is not None:
            d = int(t - self.c)
            m = self.cache.get(d)
            if m is None:
                from lenpred.outlets.baselines import transition_matrix

                m = self.cache[d] = transition_matrix(self.edges, float(d))
            post = cur * (self.post @ m)
            s = post.sum()
            cur = post / s if s > 1e-300 else cur  # the two disagree completely: trust the new evidence
        s = cur.sum()
        return cur / s if s > 0 else np.full_like(cur, 1.0 / cur.size)

    def fold(self, t: int, lik: np.ndarray) -> None:
        """Fold in the classifier's output ``lik`` (B,) at checkpoint t."""
        if t <= self.c:
            raise DataError(f"refinement positions must increase (checkpoint {t} after {self.c})",
                            "feed a sample's rows in increasing t")
        self.post, self.c = self._step(lik, t), int(t)

    def output(self, t: int, lik: np.ndarray) -> np.ndarray:
        """The refined histogram at row t (>= the latest checkpoint) with the classifier's output ``lik``."""
        if t < self.c:
            raise DataError(f"refinement positions must increase (row {t} after checkpoint {self.c})",
                            "feed a sample's rows in increasing t")
        if t == self.c and self.post is not None:
            return self.post
        return self._step(lik, t)



class RowNet:
    """A fitted head's network and output arithmetic for one row at a time (see the module docstring).

    ``outputs(xn)`` standardises the raw (1, d) float32 row ``xn`` in place and runs the plan;
    ``regression`` / ``probs`` / ``binned`` turn one output into (mean, spread, q10, q50, q90) remaining
    tokens in scalar float64 arithmetic, clipped to [0, cap - t].
    """

    def __init__(self, head: Any) -> None:
        self.plan = _plan(head.net_)
        self.mean = np.asarray(head.scaler_.mean, dtype=np.float32)
        self.scale = np.asarray(head.scaler_.scale, dtype=np.float32)
        self.cap = float(head.cap_)
        self.n_out = int(head._n_out())
        self.width_scale = getattr(head, "width_scale_", None)
        self.tscale = getattr(head, "tscale_", None)
        self.edges = getattr(head, "edges_", None)

    def outputs(self, xn: np.ndarray) -> np.ndarray:
        """(1, d) raw float32 row, standardised in place -> (n_out,) float32 network output."""
        np.subtract(xn, self.mean, out=xn)
        np.divide(xn, self.scale, out=xn)
        return _run(self.plan, xn)[0]

    def rows(self, x: np.ndarray) -> np.ndarray:
        """(n, d) raw float32 rows -> (n, n_out) float32 outputs, each row from a (1, d) buffer as online."""
        buf = np.zeros((1, x.shape[1]), np.float32)
        out = np.empty((x.shape[0], self.n_out), np.float32)
        for i in range(x.shape[0]):
            buf[0] = x[i]
            out[i] = self.outputs(buf)
        return out

    def regression(self, o: np.ndarray, t: float) -> tuple[float, float, float, float, float]:
        """(mean, spread, q10, q50, q90) remaining tokens of one row from its network output ``o`` (3,):
        the quantiles q50 -/+ softplus, the calibrated width, back to tokens, clipped to [0, cap - t],
        and the quantile-matched two-piece normal's moments. Scalar float64 arithmetic (the same online
        and offline; the head's ``_tokens_regression`` is the batched twin used in validation)."""
        m, a, b = float(o[0]), float(o[1]), float(o[2])
        c = self.width_scale
        lo = m - c * (math.log1p(math.exp(-abs(a))) + max(a, 0.0))
        hi = m + c * (math.log1p(math.exp(-abs(b))) + max(b, 0.0))
        top = max(self.cap - t, 0.0)
        ts = self.tscale

        def tokens(z: float) -> float:
            v = z * ts.sd + ts.mu
            v = math.expm1(min(v, 30.0)) if ts.log else v
            return min(max(v, 0.0), top)

        q10, q50, q90 = tokens(lo), tokens(m), tokens(hi)
        s1, s2 = max(q50 - q10, 0.0) / Z90, max(q90 - q50, 0.0) / Z90
        d = (s2 - s1) / math.sqrt(2.0 * math.pi)
        sd = math.sqrt(max(0.5 * (s1 * s1 + s2 * s2) - d * d, 0.0))
        return min(max(q50 + d, 0.0), top), sd, q10, q50, q90

    def probs(self, o: np.ndarray, t: float) -> np.ndarray:
        """(n_bins,) float64 histogram of one row: softmax of its output, bins above cap - t emptied."""
        q = o.astype(np.float64)
        e = np.exp(q - q.max())
        p = e / e.sum()
        possible = self.edges[:-1] < max(self.cap - t, 1e-9)
        p = np.where(possible, p, 0.0)
        s = p.sum()
        return p / s if s > 0 else possible / max(int(possible.sum()), 1)

    def binned(self, p: np.ndarray, t: float) -> tuple[float, float, float, float, float]:
        """(mean, spread, q10, q50, q90) of one row's histogram over ``edges`` (uniform within a bin, as
        :func:`lenpred.predictors.dist.binned`), clipped to cap - t."""
        e = self.edges
        p = p / p.sum()
        mid, w = 0.5 * (e[1:] + e[:-1]), e[1:] - e[:-1]
        mean = float((p * mid).sum())
        spread = math.sqrt(max(float((p * (mid * mid + w * w / 12.0)).sum()) - mean * mean, 0.0))
        cum = np.cumsum(p)
        js = np.minimum(np.searchsorted(cum, _PROBS, side="left"), len(p) - 1)  # first bin reaching each p
        top = max(self.cap - t, 0.0)
        qs = []
        for q, j in zip(_PROBS, js.tolist(), strict=True):
            before = float(cum[j] - p[j])
            frac = min(max((q - before) / max(float(p[j]), 1e-12), 0.0), 1.0)
            qs.append(min(float(e[j] + frac * (e[j + 1] - e[j])), top))
        return min(mean, top), min(spread, top), qs[0], qs[1], qs[2]


class OnlineOutlets:
    """An :class:`lenpred.outlets.head.OutletsHead` for one generation, one position per cycle, without
    a Trajectory.

    ``predict(t, row)``: ``row(t')`` returns the blocks at position t' as arrays ({name: (d,)}; the
    online :class:`lenpred.outlets.features.RowBuilder` gives them); the head's blocks go straight
    into a preallocated (1, d) row that the head's :class:`RowNet` standardises
    in place and runs -- the object :meth:`OutletsHead.predict_dist` runs every row through, so the
    result is bit for bit the offline one. No spec check (the caller checked the head against the
    draft head once) and no mode switch per call. With ``refine``, the posterior is carried between
    calls (positions must increase): the checkpoints passed since the last call are folded in first,
    each from its own row, so every prediction equals the offline refinement at that position.
    """

    def __init__(self, head: Any) -> None:
        self.head = head
        self.blocks = tuple(head.blocks_["x"])
        self._widths = tuple(int(w) for w in head.widths_["x"])
        self._xn = np.zeros((1, head.d_in_), np.float32)  # the one row, filled in place each call
        self._slices, o = [], 0
        for b, w in zip(self.blocks, self._widths, strict=True):
            self._slices.append((b, slice(o, o + w)))
            o += w
        self._t = np.zeros(1)
        self.net = RowNet(head)
        self._checked = False
        self.refiner = head._refiner() if (head._binned and head.refine) else None

    def _check(self, row: Mapping[str, np.ndarray]) -> None:
        for b, w in zip(self.blocks, self._widths, strict=True):
            if b not in row:
                raise DataError(f"online rows have no block {b!r}", f"available: {', '.join(sorted(row))}")
            got = int(np.shape(row[b])[-1])
            if got != w:
                raise DataError(f"online block {b!r} has width {got}, the {self.head.name} head was trained on {w}",
                                "use the draft head and target the length head was trained with")
        self._checked = True

    def outputs(self, t: int, row: Mapping[str, np.ndarray]) -> np.ndarray:
        """(3 or n_bins,) float32: the network's output for the row at position t."""
        if not self._checked:
            self._check(row)
        xn = self._xn
        for b, sl in self._slices:
            xn[0, sl] = row[b]
        if self.head.progress:
            self._t[0] = t
            xn[0, -2] = t
            xn[0, -1] = np.log1p(self._t)[0]
        o = self.net.outputs(xn)
        if not math.isfinite(float(o.sum())):  # a NaN or infinite input reaches the output
            raise DataError(f"{self.head.name} input has NaN or infinite values at t = {t}", "check the draft states")
        return o

    def predict(self, t: int, row: Callable[[int], Mapping[str, np.ndarray]]) -> Dist:
        """The remaining-length distribution at position t (one-element arrays, as ``predict_dist``)."""
        return Dist(*(np.array([x]) for x in self.predict_row(t, row)))

    def predict_row(self, t: int, row: Callable[[int], Mapping[str, np.ndarray]]) -> tuple[float, ...]:
        """(mean, spread, q10, q50, q90) remaining tokens at position t, as floats."""
        net = self.net
        if not self.head._binned:
            return net.regression(self.outputs(t, row(t)), float(t))
        p = net.probs(self.outputs(t, row(t)), float(t))
        r = self.refiner
        if r is not None:
            if t < r.c:
                raise DataError(f"online refinement positions must increase (t = {t} after {r.c})",
                                "use one OnlineOutlets per generation")
            if t != r.c:
                for c in r.due(t):
                    r.fold(c, p if c == t else net.probs(self.outputs(c, row(c)), float(c)))
            p = r.output(t, p)
        return net.binned(p, float(t))
