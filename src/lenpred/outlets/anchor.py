"""The prefill anchor: an OUTLETS head that is never worse than the carried prefill head it starts from.

An OUTLETS head sees the draft state at a cycle; the carried prefill head sees the prompt and how
far the sample has come (its prefill distribution conditioned on L > t,
:func:`lenpred.outlets.baselines.carry_prefill`). Early in an answer the prefill head can be the
better of the two (the reference run's first OUTLETS head was 1.13x worse at t = 0), later the
draft state knows more. The anchor combines them per *progress band* (tokens generated so far):

    log1p(q_p) = w_b * log1p(q_p^outlets) + (1 - w_b) * log1p(q_p^prefill),   p in {10, 50, 90}

a geometric blend of the two predictive distributions' quantiles, one weight ``w_b`` in [0, 1] per
band ``b``, chosen on **validation rows** (prompts neither head trained on) to minimise the
prompt-weighted MAE of q50; then the band's 80% interval is scaled about q50 so it covers 80% of
its validation rows (each tail's half-width by one factor, as the heads calibrate theirs).

Why it keeps the promise: ``w_b = 0`` (the prefill head alone) is always on the grid, so on the
validation rows of every band the anchor is at most as bad as the carried prefill head; at t = 0
with ``w = 0`` it *is* the prefill head. On test rows that holds up to the validation-to-test gap,
which the bench measures (CI over prompts). Bands are fixed token ranges (not fractions of L,
which a server does not know).

The anchor is a small JSON artifact (kind ``outlets-anchor``) naming the OUTLETS head and the prefill
predictor it blends, with their identities, so it refuses to be applied to other ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from lenpred.errors import ConfigError, DataError
from lenpred.outlets.baselines import Remaining
from lenpred.predictors.dist import weighted_quantile

__all__ = ["BANDS", "PrefillAnchor", "blend", "fit_anchor"]

BANDS: tuple[int, ...] = (0, 1, 32, 128, 512)  # band b holds t in [BANDS[b], BANDS[b + 1]); the last is open
GRID = np.round(np.linspace(0.0, 1.0, 21), 2)  # candidate weights, 0 (prefill alone) included
SCHEMA = "lenpred.outlets-anchor/1"


def band_of(t: np.ndarray, bands: Sequence[int] = BANDS) -> np.ndarray:
    """(n,) band index of each row's tokens generated so far."""
    return np.searchsorted(np.asarray(bands, dtype=np.float64), np.asarray(t, dtype=np.float64), side="right") - 1


def blend(outlets: Remaining, prefill: Remaining, w: np.ndarray) -> Remaining:
    """Per-row geometric blend of two remaining-length distributions' quantiles, ``w`` (n,) on OUTLETS."""
    w = np.asarray(w, dtype=np.float64)

    def mix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        g = np.expm1(w * np.log1p(np.maximum(a, 0.0)) + (1.0 - w) * np.log1p(np.maximum(b, 0.0)))
        return np.where(w <= 0.0, b, np.where(w >= 1.0, a, g))  # either input alone: exactly its values

    q10, q50, q90 = mix(outlets.q10, prefill.q10), mix(outlets.q50, prefill.q50), mix(outlets.q90, prefill.q90)
    return Remaining(np.minimum(q10, q50), q50, np.maximum(q90, q50), "prefill anchor")


@dataclass(frozen=True)
class PrefillAnchor:
    """Weights on the OUTLETS head per progress band, and each band's interval scale (both from val)."""

    bands: tuple[int, ...]
    weights: tuple[float, ...]  # on OUTLETS; 1 - w on the carried prefill head
    scales: tuple[float, ...]  # half-width factors of the 80% interval
    head: Mapping[str, Any] = field(default_factory=dict)  # the OUTLETS head: path and identity
    prefill: Mapping[str, Any] = field(default_factory=dict)  # the prefill predictor: name and identity
    val: Mapping[str, Any] = field(default_factory=dict)  # per band: rows, MAE of each input and of the blend

    def __post_init__(self) -> None:
        n = len(self.bands)
        if not (len(self.weights) == len(self.scales) == n) or n == 0:
            raise DataError(f"prefill anchor with {n} bands, {len(self.weights)} weights, {len(self.scales)} scales",
                            "refit the anchor (`lenpred outlets anchor`)")
        if list(self.bands) != sorted(set(self.bands)) or self.bands[0] != 0:
            raise DataError(f"prefill anchor bands {list(self.bands)} are not increasing from 0",
                            "refit the anchor (`lenpred outlets anchor`)")
        bad = [x for x in (*self.weights, *self.scales) if not np.isfinite(x)]
        if bad or not all(0.0 <= w <= 1.0 for w in self.weights) or not all(s > 0 for s in self.scales):
            raise DataError("prefill anchor weights must lie in [0, 1] and scales be positive and finite",
                            "refit the anchor (`lenpred outlets anchor`)")

    def apply(self, outlets: Remaining, prefill: Remaining, t: np.ndarray) -> Remaining:
        """The anchored remaining-length quantiles of rows at tokens generated ``t`` (n,)."""
        n = len(np.asarray(t))
        if not (len(outlets.q50) == len(prefill.q50) == n):
            raise DataError(f"anchor inputs disagree in rows (outlets {len(outlets.q50)}, prefill {len(prefill.q50)}, "
                            f"t {n})", "predict both on the same trajectory rows")
        b = band_of(t, self.bands)
        r = blend(outlets, prefill, np.asarray(self.weights)[b])
        s = np.asarray(self.scales)[b]
        lo, hi = _half_widths(r)
        q10 = np.maximum(r.q50 - s * lo, 0.0)
        q90 = r.q50 + s * hi
        return Remaining(q10, r.q50, q90, f"prefill anchor (weights on OUTLETS by band: {list(self.weights)})")

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, **asdict(self), "bands": list(self.bands), "weights": list(self.weights),
                "scales": list(self.scales)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "anchor") -> PrefillAnchor:
        if not isinstance(d, Mapping) or d.get("schema") != SCHEMA:
            got = d.get("schema") if isinstance(d, Mapping) else type(d).__name__
            raise DataError(f"{where} is not a prefill anchor of schema {SCHEMA} (got {got!r})",
                            "pass a directory written by `lenpred outlets anchor`")
        try:
            return cls(bands=tuple(int(x) for x in d["bands"]), weights=tuple(float(x) for x in d["weights"]),
                       scales=tuple(float(x) for x in d["scales"]), head=dict(d.get("head") or {}),
                       prefill=dict(d.get("prefill") or {}), val=dict(d.get("val") or {}))
        except (KeyError, TypeError, ValueError) as e:
            raise DataError(f"{where} is damaged ({type(e).__name__}: {e})",
                            "refit the anchor (`lenpred outlets anchor`)") from None


def _half_widths(r: Remaining) -> tuple[np.ndarray, np.ndarray]:
    """The interval's half-widths below and above q50, at least half a token (a degenerate interval still scales)."""
    return np.maximum(r.q50 - r.q10, 0.5), np.maximum(r.q90 - r.q50, 0.5)


def _wmae(pred: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    return float(np.sum(w * np.abs(pred - y)) / np.sum(w))


def _scale_for_coverage(r: Remaining, y: np.ndarray, w: np.ndarray, target: float = 0.8) -> float:
    """The half-width factor whose 80% interval covers ``target`` of the (weighted) rows: the
    weighted quantile of the factor at which each row enters its interval (as the heads calibrate)."""
    lo_w, hi_w = _half_widths(r)
    need = np.where(y < r.q50, (r.q50 - y) / lo_w, (y - r.q50) / hi_w)
    return float(max(weighted_quantile(need, w, target), 1e-3))


def fit_anchor(outlets: Remaining, prefill: Remaining, t: np.ndarray, y: np.ndarray, weights: np.ndarray, *,
               bands: Sequence[int] = BANDS, min_rows: int = 20) -> PrefillAnchor:
    """Choose each band's weight and interval scale on validation rows.

    ``y``: true remaining tokens (n,); ``weights``: row weights (each prompt once). A band with fewer
    than ``min_rows`` rows takes the prefill head alone (w = 0) and the unscaled interval. The anchor
    names no head and no prefill predictor: the caller records them (``dataclasses.replace``).
    """
    t, y, wt = (np.asarray(a, dtype=np.float64) for a in (t, y, weights))
    if not (len(t) == len(y) == len(wt) == len(outlets.q50) == len(prefill.q50)):
        raise DataError("anchor fit inputs disagree in rows", "predict both heads on the same validation rows")
    if len(t) == 0:
        raise DataError("no validation rows to fit the prefill anchor on",
                        "compute trajectory features for the split's validation prompts (--roles val)")
    b = band_of(t, bands)
    ws, ss, info = [], [], {}
    for k in range(len(bands)):
        m = b == k
        if int(m.sum()) < min_rows:
            ws.append(0.0)
            ss.append(1.0)
            info[str(bands[k])] = {"rows": int(m.sum()), "note": "too few rows: prefill head alone"}
            continue
        o, p = Remaining(outlets.q10[m], outlets.q50[m], outlets.q90[m]), Remaining(prefill.q10[m], prefill.q50[m],
                                                                                     prefill.q90[m])
        maes = [_wmae(blend(o, p, np.full(int(m.sum()), g)).q50, y[m], wt[m]) for g in GRID]
        best = int(np.argmin(maes))  # the first minimum: ties go to the prefill head (w = 0 comes first)
        r = blend(o, p, np.full(int(m.sum()), GRID[best]))
        ws.append(float(GRID[best]))
        ss.append(_scale_for_coverage(r, y[m], wt[m]))
        info[str(bands[k])] = {"rows": int(m.sum()), "mae_prefill": maes[0], "mae_outlets": maes[-1],
                               "mae_anchored": maes[best]}
    return PrefillAnchor(tuple(int(x) for x in bands), tuple(ws), tuple(ss), {}, {}, info)


def check_bands(bands: Sequence[int]) -> tuple[int, ...]:
    out = tuple(int(x) for x in bands)
    if not out or out[0] != 0 or list(out) != sorted(set(out)):
        raise ConfigError(f"--bands {list(out)} must be increasing token counts starting at 0", "e.g. --bands 0,1,32,128,512")
    return out


# ---------------------------------------------------------------- from files (`lenpred outlets anchor`)
def anchor_inputs(head_path: str, prefill: tuple[str | None, str], traj: Any, rd: Any, cap: float | None
                  ) -> tuple[Remaining, Remaining, str, Any]:
    """The OUTLETS head's and the carried prefill table's remaining-length quantiles on ``traj``'s rows,
    the prefill method's name and the head's artifact."""
    import lenpred.outlets.head  # noqa: F401 - registers the outlets head
    from lenpred.outlets.baselines import carry_prefill
    from lenpred.predictions import read_predictions
    from lenpred.predictors.io import read_head

    head, art = read_head(head_path, card=rd.card)
    if head.name != "outlets":
        raise DataError(f"{head_path} is a {head.name} head, not an outlets head",
                        "pass the OUTLETS head with --head and the prefill head's table with --prefill-predictions")
    d = head.predict_dist(traj)
    name, path = prefill
    p = read_predictions(path, card=rd.card)
    nm = name or p.made_by
    nm = nm if nm.startswith("prefill-") else f"prefill-{nm}"
    return Remaining(d.q10, d.q50, d.q90), carry_prefill(p, traj.index, cap, what=f"prefill predictions {nm!r}"), nm, art


def fit_anchor_files(traj_path: str, run: str, head_path: str, prefill: str, out: str, *,
                     bands: Sequence[int] = BANDS, split: str | None = None) -> PrefillAnchor:
    """Fit the anchor on the validation prompts' rows of ``traj_path`` and write it to ``out``
    (an ``outlets-anchor`` artifact: ``anchor.json``)."""
    from lenpred.data.rundir import RunDir
    from lenpred.io.artifacts import ArtifactHeader, check_out, write_artifact
    from lenpred.outlets.spec import row_weights
    from lenpred.outlets.store import role_rows
    from lenpred.predictors.pipeline import run_cap

    bands = check_bands(bands)
    pre_name, sep, pre_path = prefill.partition("=")
    pre = (pre_name or None, pre_path) if sep else (None, prefill)
    rd = RunDir.open(run)
    check_out(out, kind="outlets-anchor", card=rd.card, inputs={"--traj": traj_path, "--run": run, "--head": head_path,
                                                                 "--prefill-predictions": pre[1]})
    _, _, val = role_rows(traj_path, rd, "val", "compute trajectory features with --roles val (or train,val,test)",
                          split)
    cap = run_cap(rd.card)
    o, p, name, art = anchor_inputs(head_path, pre, val, rd, cap)
    y = val.index["remaining"].to_numpy(dtype=np.float64)
    head_id = {"path": str(head_path), "sha256": (art.meta.get("files") or {}).get("weights.safetensors")}
    anchor = replace(fit_anchor(o, p, val.index["t"].to_numpy(), y, row_weights(val.index), bands=bands),
                     head=head_id, prefill={"name": name, "path": pre[1]})
    write_artifact(out, ArtifactHeader(kind="outlets-anchor", schema_version=1,
                                       config={"traj": traj_path, "run": run, "head": head_path, "prefill": prefill,
                                               "bands": list(bands), "split": split},
                                       card=rd.card, card_scope="run"),
                   json_files={"anchor.json": anchor.to_dict()})
    return anchor


def load_anchor(path: str, card: Mapping[str, Any] | None = None) -> PrefillAnchor:
    from lenpred.io.artifacts import load_artifact

    art = load_artifact(path, kind="outlets-anchor", card=card)
    return PrefillAnchor.from_dict(art.read_json("anchor.json"), where=f"{path}/anchor.json")

