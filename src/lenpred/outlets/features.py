"""Trajectory features: what the OUTLETS head reads at decoding position t, offline and online alike.

**Position t** is the number of response tokens generated (committed) so far, 0 <= t. With a prompt
of P tokens x_0..x_{P-1} and the response x_P..x_{P+L-1} (EOS excluded), after t tokens the loop
knows x_0..x_{P+t-1}, and the target has run over x_0..x_{P+t-2} (the last committed token goes
through the target only in the next verifying pass). The newest draft state the speculative loop
holds at that point is therefore

    o_s  at  s = P + t - 2      (it read the target's state at x_s and the embedding of x_{s+1} = x_{P+t-1})

-- for t = 0 that is the last state of the prompt (s = P - 2, the prompt's last token as input),
which the first cycle computes along with the rest of the prompt (so prompts need 2+ tokens; chat
templates always give more). :func:`state_position` is that rule; the offline extraction and the
online loop both apply it through :class:`RowBuilder`, the one place a row is made.

**Blocks** of a row at t (all at the same position s):

* ``draft``: o_s, the draft decoder's pre-norm output (``Cycle.states`` online);
* ``fused``: g_s = fc([a_s; b_s; c_s]), the draft's fused input from the target's low/mid/high states;
* ``target.<j>``: the target's hidden state at x_s of layer j = the middle one of the three the draft
  reads (``hidden_states[j]``, the residual stream entering decoder layer j; 15 for SmolLM2-135M) --
  the TRAIL-style probe's input, taken from the states already captured, so it costs nothing extra;
* ``draft_running``: the mean of the draft states of t' = 0..t (s = P-2 .. P+t-2): a running summary
  of the answer so far.

**Positions kept** (:func:`positions`), by the row scheme ``rows`` (recorded in the spec's
``positions.rows``; a spec without it is ``fraction``, the only scheme before):

* ``fraction`` (the default): t = 0 always (also for an empty response, L = 0, so the t = 0 rows cover
  every sample, like a prefill head's evaluation), then the fixed points {32, 64, 128, 256, 512} and
  {floor(f L) for f in 0.1, 0.25, 0.5, 0.75} and a stride grid {stride, 2 stride, ...}, all with
  t < L. The fractions of L place rows with the answer's own length: a server never meets them.
* ``live``: the rows a live server meets, placed by tokens generated only: t = 0 and every
  re-prediction point a sample reaches, t in {16, 32, 64, 128, ...} (doubling, :data:`LIVE_FIRST`)
  with t < L, and with ``live_every`` K also {K, 2K, ...} < L.
* ``both``: the union.

Unique and sorted. With ``max_positions`` the fixed points are kept first (0, the fractions, the
absolute points, the live points; the evaluations read exactly those) and the grid points (stride
grid, every-K grid) that fit are spread evenly over the grid.

**Labels are lengths as served.** A sample stopped at max_new_tokens has L = the cap and exactly
``remaining = cap - t`` tokens left under the card (what a server generates and a scheduler sees),
so it is kept and labelled like any other sample; its fractions refer to that L. The ``truncated``
flag only marks it, so a bench can also report EOS-only figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from lenpred.config import Config
from lenpred.errors import ConfigError, DataError, FieldError

__all__ = [
    "FIXED_TOKENS", "FRACTIONS", "LIVE_FIRST", "MIN_POSITIONS", "ROW_SCHEMES", "SPEC_VERSION", "RowBuilder",
    "TrajectoryConfig", "block_names", "fixed_positions", "live_positions", "live_tokens", "make_spec", "positions",
    "rows_of", "sample_rows", "state_position", "target_block",
]

FIXED_TOKENS = (32, 64, 128, 256, 512)
FRACTIONS = (0.1, 0.25, 0.5, 0.75)
MIN_POSITIONS = 1 + len(FRACTIONS) + len(FIXED_TOKENS)  # every fixed point fits under the cap
SPEC_VERSION = 1
LIVE_FIRST = 16  # the first re-prediction point of the live scheme; then doubling (32, 64, ...)
ROW_SCHEMES = ("fraction", "live", "both")
RowScheme = Literal["fraction", "live", "both"]
STATE_RULE = "row t reads the draft state o_s at s = n_prompt + t - 2 (the newest the loop holds after t tokens)"


class TrajectoryConfig(Config):
    """How positions are sampled and rows stored (flags of ``lenpred outlets features``)."""

    rows: RowScheme = Field("fraction", description="which rows to keep: fraction (t = 0, fractions of L, 32..512, "
                                                    "the stride grid), live (t = 0, 16, 32, 64, ... tokens: what a live "
                                                    "server meets), or both")
    live_every: int | None = Field(None, ge=1, description="with --rows live or both: also a row every K tokens")
    stride: int = Field(64, ge=1, description="grid of positions every STRIDE tokens, besides the fixed points")
    max_positions: int | None = Field(None, description="at most N positions per sample (fixed points kept first)")
    chunk_prompts: int = Field(4, ge=1, description="prompts per resumable chunk (a kill loses at most one chunk)")
    dtype: Literal["float16", "float32"] = Field("float16", description="dtype of the stored blocks")
    compute_dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="precision of the target's forward pass: auto = bfloat16 where the CPU has amx_bf16 or "
                            "avx512_bf16 (or on a GPU), else float32 (ignored with --cache: the state cache's own)")

    @field_validator("max_positions")
    @classmethod
    def _cap(cls, v: int | None) -> int | None:
        if v is not None and v < MIN_POSITIONS:
            raise FieldError(f"must be >= {MIN_POSITIONS} (t = 0, {len(FRACTIONS)} fractions and "
                             f"{len(FIXED_TOKENS)} token counts are kept for the evaluation), got {v}",
                             f"pass --max-positions {MIN_POSITIONS} or more, or leave it out (no cap)")
        return v

    @model_validator(mode="after")
    def _room_for_live(self) -> TrajectoryConfig:
        # ConfigError, not a ValueError: pydantic lets it through as it is (a check of two fields together)
        if self.rows == "both" and self.max_positions is not None and self.max_positions < MIN_POSITIONS + 1:
            raise ConfigError(f"max_positions must be >= {MIN_POSITIONS + 1} with --rows both (the fixed points and "
                              f"the live point {LIVE_FIRST}), got {self.max_positions}",
                              f"pass --max-positions {MIN_POSITIONS + 1} or more, or leave it out")
        if self.live_every is not None and self.rows == "fraction":
            raise ConfigError("--live-every (live_every) needs live rows, but --rows is fraction",
                              "pass --rows live or --rows both with --live-every")
        return self

    def positions(self, length: int) -> np.ndarray:
        """The positions kept for a sample of ``length`` generated tokens under this config."""
        return positions(length, self.stride, self.max_positions, rows=self.rows, live_every=self.live_every)


# ---------------------------------------------------------------------------------------- positions
def state_position(n_prompt: int, t: int | np.ndarray) -> Any:
    """Sequence position s of the draft state that row t reads (see the module docstring)."""
    return n_prompt + t - 2


def fixed_positions(length: int) -> list[int]:
    """The fixed points of a sample of L generated tokens, in priority order (unique, t = 0 or t < L)."""
    cand = [0] + [int(np.floor(f * length)) for f in FRACTIONS] + list(FIXED_TOKENS)
    out: list[int] = []
    for t in cand:
        if (t == 0 or t < length) and t not in out:
            out.append(t)
    return out


def live_tokens(limit: int, first: int = LIVE_FIRST) -> list[int]:
    """The live re-prediction points below ``limit``: first, 2 first, 4 first, ... (16, 32, 64, ...)."""
    out, t = [], int(first)
    while t < limit:
        out.append(t)
        t *= 2
    return out


def live_positions(length: int, every: int | None = None) -> list[int]:
    """The rows a live server meets for a sample of L generated tokens, in priority order: t = 0, the
    doubling points 16, 32, ... below L, then (``every`` K) the grid K, 2K, ... below L."""
    out = [0] + live_tokens(length)
    if every is not None:
        out += [t for t in range(every, length, every) if t not in out]
    return out


def rows_of(spec: Mapping[str, Any] | None) -> str:
    """The row scheme a trajectory spec (or a head's ``feature_spec``) records: ``fraction``, ``live`` or
    ``both``; a spec from before the schemes (no ``positions.rows``) is ``fraction``."""
    pos = (spec or {}).get("positions") or {}
    return str(pos.get("rows", "fraction"))


def positions(length: int, stride: int = 64, max_positions: int | None = None, *, rows: str = "fraction",
              live_every: int | None = None) -> np.ndarray:
    """Sorted unique positions t kept for a sample of ``length`` generated tokens (int64) under the row
    scheme ``rows`` (see the module docstring)."""
    if length < 0:
        raise DataError(f"a sample cannot have {length} generated tokens", "re-collect the run's samples")
    if stride < 1:
        raise ConfigError(f"stride must be >= 1, got {stride}", "pass --stride 1 or more")
    if rows not in ROW_SCHEMES:
        raise ConfigError(f"unknown row scheme {rows!r}", f"use one of {', '.join(ROW_SCHEMES)}")
    fixed: list[int] = []
    grid: list[int] = []
    if rows in ("fraction", "both"):
        fixed = fixed_positions(length)
        grid = list(range(stride, length, stride))
    if rows in ("live", "both"):
        live = [0] + live_tokens(length)
        fixed += [t for t in live if t not in fixed]
        if live_every is not None:
            grid += list(range(live_every, length, live_every))
    grid = sorted(set(grid) - set(fixed))
    if max_positions is not None:
        room = max_positions - len(fixed)
        if room < 0:
            fixed = fixed[:max_positions]
            grid = []
        elif len(grid) > room:  # spread the kept grid points evenly over the grid
            keep = np.unique(np.round(np.linspace(0, len(grid) - 1, room)).astype(int)) if room else []
            grid = [grid[i] for i in keep]
    return np.array(sorted(set(fixed) | set(grid)), dtype=np.int64)


# ---------------------------------------------------------------------------------------- rows
def target_block(layers: Sequence[int]) -> str:
    """The probe block's name: the middle of the draft's three target layers."""
    return f"target.{int(layers[1])}"


def block_names(layers: Sequence[int]) -> tuple[str, ...]:
    return ("draft", "fused", target_block(layers), "draft_running")


def _np(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        import torch

        if x.dtype is torch.float32 and x.device.type == "cpu" and not x.requires_grad:
            return x.numpy()  # no copy (the online path, once per cycle)
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float32)


class _Grow:
    """A (n, d) buffer that grows by appending rows (amortised O(1) per row)."""

    def __init__(self, dtype: Any) -> None:
        self.a: np.ndarray | None = None
        self.n = 0
        self.dtype = dtype

    def append(self, x: np.ndarray) -> None:
        if self.a is None:
            self.a = np.empty((max(64, 2 * len(x)), x.shape[1]), dtype=self.dtype)
        if self.n + len(x) > len(self.a):
            b = np.empty((max(2 * len(self.a), self.n + len(x)), self.a.shape[1]), dtype=self.dtype)
            b[: self.n] = self.a[: self.n]
            self.a = b
        self.a[self.n : self.n + len(x)] = x
        self.n += len(x)

    def view(self) -> np.ndarray:
        assert self.a is not None
        return self.a[: self.n]


class RowBuilder:
    """The rows of one sequence from its draft states as they come: all at once (offline) or cycle by
    cycle (online, :mod:`lenpred.outlets.online`). The one place a row is made.

    ``add(start, states, fused, aux)``: draft states o_s (n, d), fused inputs g_s (n, d) and the
    target's captured states (n, 3 d_t) at consecutive positions s = start .. start + n - 1; calls
    must continue where the last one stopped. ``rows(ts)``: the blocks at positions t. ``blocks``:
    keep only these blocks (online, the ones the length head reads; default all of
    :func:`block_names`) -- a kept block's values do not depend on which others are kept.
    """

    def __init__(self, n_prompt: int, layers: Sequence[int], blocks: Sequence[str] | None = None) -> None:
        if n_prompt < 2:
            raise DataError(f"a prompt of {n_prompt} token(s) has no draft state for t = 0 (it reads the last prompt "
                            "token as the next-token input of position P - 2)", "use prompts of 2 or more tokens")
        self.n_prompt = int(n_prompt)
        self.layers = tuple(int(j) for j in layers)
        self.first = self.n_prompt - 2  # s of t = 0
        self.next = 0  # the next position add() expects
        self._target_name = target_block(self.layers)
        names = block_names(self.layers)
        self.blocks = names if blocks is None else tuple(b for b in names if b in set(blocks))
        self._grow = {b: _Grow(np.float64 if b == "draft_running" else np.float32) for b in self.blocks}
        self._total: np.ndarray | None = None  # running sum of the draft states from s = first on

    @property
    def t_latest(self) -> int:
        """The largest t whose row can be built now (-1: none yet)."""
        return max(self.next - 1 - self.first, -1)

    def add(self, start: int, states: Any, fused: Any, aux: Any) -> None:
        n = len(states)
        if start != self.next:
            raise ValueError(f"states must continue at position {self.next}, got {start}")
        if not (len(fused) == n and len(aux) == n):
            raise ValueError("states, fused and aux must have one row per position")
        self.next += n
        lo = max(self.first - start, 0)  # rows of this call at s >= first
        if lo >= n:
            return
        grow = self._grow
        if "draft" in grow or "draft_running" in grow:
            o = _np(states)[lo:]
            if "draft" in grow:
                grow["draft"].append(o)
            if "draft_running" in grow:
                # running sums c_s = c_{s-1} + o_s in float64, row after row: the same recurrence (so the
                # same bits) whether the rows come all at once (offline) or a few per cycle (online)
                c = np.empty(o.shape, np.float64)
                prev = self._total
                for i in range(len(o)):
                    prev = np.add(prev, o[i], out=c[i]) if prev is not None else np.add(0.0, o[i], out=c[i])
                self._total = c[-1]
                grow["draft_running"].append(c)
        if "fused" in grow:
            grow["fused"].append(_np(fused)[lo:])
        if self._target_name in grow:
            a = _np(aux)[lo:]
            d_t = a.shape[1] // 3
            grow[self._target_name].append(a[:, d_t : 2 * d_t])  # the middle of the three captured layers

    def rows(self, ts: Sequence[int] | np.ndarray) -> dict[str, np.ndarray]:
        """{block: (len(ts), d) float32} at positions ``ts`` (each 0 <= t <= t_latest)."""
        t = np.asarray(ts, dtype=np.int64)
        if t.size and (t.min() < 0 or t.max() > self.t_latest):
            raise DataError(f"no draft state for t = {int(t.max()) if t.max() > self.t_latest else int(t.min())} "
                            f"yet (rows exist for 0..{self.t_latest})",
                            "positions must lie within the part of the sequence the draft has read")
        if not t.size:
            return {b: np.zeros((0, g.a.shape[1] if g.a is not None else 0), np.float32) for b, g in self._grow.items()}
        # buffer row i holds s = first + i, i.e. t = i; fancy indexing copies
        out = {b: g.view()[t] for b, g in self._grow.items()}
        if "draft_running" in out:
            out["draft_running"] = (out["draft_running"] / (t + 1)[:, None]).astype(np.float32)
        return out

    def row(self, t: int) -> dict[str, np.ndarray]:
        """{block: (d,) float32} at one position t (0 <= t <= t_latest), the values of ``rows([t])[b][0]``
        without the copies (views into the buffers, valid until the next :meth:`add`): the online path."""
        if not 0 <= t <= self.t_latest:
            raise DataError(f"no draft state for t = {t} yet (rows exist for 0..{self.t_latest})",
                            "positions must lie within the part of the sequence the draft has read")
        out = {b: g.a[t] for b, g in self._grow.items()}  # type: ignore[index]
        if "draft_running" in out:
            out["draft_running"] = (out["draft_running"] / (t + 1)).astype(np.float32)
        return out


def sample_rows(draft: Any, aux: Any, tokens: Any, n_prompt: int, ts: Sequence[int] | np.ndarray,
                layers: Sequence[int]) -> dict[str, np.ndarray]:
    """Offline rows of one teacher-forced sequence: ``aux`` (N, 3 d_t) target states at x_0..x_{N-1},
    ``tokens`` (N,) ids; one fc and one draft pass over positions 0..s_max, then :class:`RowBuilder`."""
    import torch

    t = np.asarray(ts, dtype=np.int64)
    b = RowBuilder(n_prompt, layers)
    if not t.size:
        return b.rows(t)
    s_max = int(state_position(n_prompt, int(t.max())))
    dev = draft.fc.weight.device
    a = torch.as_tensor(aux[: s_max + 1]).to(dev, torch.float32)[None]  # (1, S, 3d)
    x = torch.as_tensor(np.asarray(tokens[1 : s_max + 2], dtype=np.int64)).to(dev)[None]  # (1, S) next tokens
    with torch.inference_mode():
        g = draft.fuse(a)  # (1, S, d)
        o, _ = draft.step(g, x, torch.arange(s_max + 1, device=dev)[None], None)  # (1, S, d)
    b.add(0, o[0], g[0], a[0])
    return b.rows(t)


# ---------------------------------------------------------------------------------------- spec
def _positions_spec(cfg: TrajectoryConfig) -> dict[str, Any]:
    """The spec's ``positions``: the row scheme and its parameters."""
    out: dict[str, Any] = {"rows": cfg.rows, "t0": "always", "max_positions": cfg.max_positions}
    if cfg.rows in ("fraction", "both"):
        out.update({"fixed_tokens": list(FIXED_TOKENS), "fractions": list(FRACTIONS), "stride": cfg.stride})
    if cfg.rows in ("live", "both"):
        out["live"] = {"first": LIVE_FIRST, "growth": 2, "every": cfg.live_every,
                       "rule": "t = 0 and t = 16, 32, 64, ... (and every K tokens) with t < L"}
    return out


def make_spec(*, target: Mapping[str, Any], draft: Mapping[str, Any], layers: Sequence[int], widths: Mapping[str, int],
              cfg: TrajectoryConfig, target_states: str) -> dict[str, Any]:
    """The trajectory spec (meta.json ``trajectory_spec``): what the rows mean and what made them.

    ``positions`` and ``target_states`` describe how rows were sampled and at which precision the
    target states were kept; a head may accept other values there (they do not change a row's meaning).
    """
    return {
        "version": SPEC_VERSION,
        "target": dict(target),  # id, fingerprint, num_hidden_layers, hidden_size
        "target_fingerprint": target.get("fingerprint"),
        "draft": dict(draft),  # sha256 of its weights, weights_file, its target's fingerprint, its card
        "layers": {"draft_input": [int(j) for j in layers], "target_block": int(layers[1]),
                   "convention": "hidden_states index: the residual stream entering decoder layer j"},
        "blocks": {k: int(v) for k, v in widths.items()},
        "state": STATE_RULE,
        "positions": _positions_spec(cfg),
        "labels": {"remaining": "length - t, as served (a sample stopped at max_new_tokens: cap - t)",
                   "truncated": "the sample hit max_new_tokens (length = the cap)"},
        "target_states": target_states,
    }
