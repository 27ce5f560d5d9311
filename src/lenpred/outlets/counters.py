"""Counter heads: remaining-length prediction from what a server counts for free in the answer so far.

A serving engine holds every token it has generated. Without any hidden state it can count, at a
re-prediction point t: the tokens so far, newlines and blank lines, list items and headers at line
starts, code fences (and whether a code block is open), sentence ends, tokens since the last newline,
and the same counts over the last 32 tokens; and it knows the prompt's length. A counter head reads
those numbers (:data:`COUNTERS`) at the rows a live server meets (t = 0, 16, 32, 64, ... below each
sample's L, :func:`lenpred.outlets.features.live_positions`) and predicts the remaining length's
10/50/90% quantiles. With ``prefill``, it also reads a prefill head's prediction for the request
(its q10 / q50 / q90, and its q50 carried to t by survival), so it can only add to the carried
prefill head what the answer so far says.

Two kinds, both gradient-boosted trees (scikit-learn's ``HistGradientBoosting*``, saved as arrays by
:func:`lenpred.predictors.gbdt.export_trees`, never pickled):

* ``quantile``: three regressors with the pinball loss on log1p(remaining) (quantiles survive the
  monotone transform), early-stopped on half of the validation prompts;
* ``hazard``: a discrete-time hazard over log-spaced bins of the remaining length (edges 1, sqrt 2,
  2, ... up to the cap): one binary classifier on (row, bin k) pairs for every bin up to the row's own,
  labelled 1 at its bin; at prediction the per-bin hazards give the survival curve, hence the
  conditional distribution and its quantiles (geometric interpolation inside a bin). No remaining
  length past the cap (cap - t) is predicted.

Both are calibrated on the other half of the validation prompts by conformalized quantile regression
per live point (Mondrian CQR; points with fewer than :data:`MIN_GROUP` rows pool): the 80% interval is
widened or narrowed in log space until it covers 80% of those rows. Rows weigh the same (as a server
meets them: a long request is met more often), the live bench's headline weighting.

The artifact (kind ``outlets-counters``) holds the trees, the bins, the calibration and the token
table (which token ids hold a newline, a fence, a sentence end, ...; computed from the model's
tokenizer once at training), so it needs no tokenizer at prediction, and it is bound to the model and
sampling card it was trained under. It records the rows it was made for (``live``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from lenpred.errors import ConfigError, DataError
from lenpred.outlets.baselines import Remaining, two_piece_carry

__all__ = ["COUNTERS", "FLAGS", "KINDS", "PREFILL_FEATURES", "CounterHead", "counter_rows", "fit_counter_head",
           "hazard_edges", "load_counter_head", "token_flags"]

KIND = "outlets-counters"
KINDS = ("quantile", "hazard")
RECENT = 32  # tokens: the window of the recent counts
MIN_GROUP = 30  # validation rows a live point needs for its own calibration
LEVEL = 0.8  # the calibrated interval: q10 - q90
# per token id: how many newlines / blank lines / fences / sentence ends it holds; whether it is a list
# marker or header mark (counted at a line start), ends with a newline, or ends with a colon
FLAGS = ("newline", "blank", "fence", "sentence_end", "marker", "header", "ends_newline", "colon")
COUNTERS: tuple[str, ...] = (
    "t", "log1p_t", "log1p_prompt_tokens", "newlines", "blank_lines", "list_items", "headers", "fences",
    "in_code", "sentence_ends", "colons", "since_newline", "recent_newlines", "recent_sentence_ends",
    "newline_rate", "sentence_rate", "last_is_newline")
PREFILL_FEATURES = ("log1p_prefill_q10", "log1p_prefill_q50", "log1p_prefill_q90", "log1p_carried_q50")
_SENT = re.compile(r"[.!?](?=\s|$)")
_MARK = re.compile(r"(?:[-*+\u2022]|\d{1,3}[.)])")


def token_flags(pieces: Sequence[str]) -> np.ndarray:
    """(V, len(FLAGS)) int16: the flags of each token's text (``pieces[i]``: the decoded text of id i)."""
    out = np.zeros((len(pieces), len(FLAGS)), dtype=np.int16)
    for i, s in enumerate(pieces):
        st = s.strip()
        out[i] = (s.count("\n"), s.count("\n\n"), s.count("```"), len(_SENT.findall(s)),
                  bool(_MARK.fullmatch(st)), st.startswith("#"), s.endswith("\n"), s.rstrip().endswith(":"))
    return out


def tokenizer_flags(tokenizer: Any) -> np.ndarray:
    """:func:`token_flags` of every id of a Hugging Face tokenizer (each id decoded alone)."""
    n = len(tokenizer)
    return token_flags([tokenizer.decode([i]) for i in range(n)])


def counter_rows(token_ids: Sequence[int], ts: Sequence[int], prompt_tokens: int, flags: np.ndarray) -> np.ndarray:
    """(len(ts), len(COUNTERS)) float64: the counters after the first t tokens of one answer, per t."""
    ids = np.asarray(token_ids, dtype=np.int64)
    t = np.asarray(ts, dtype=np.int64)
    if len(t) and (t.min() < 0 or t.max() > len(ids)):
        raise DataError(f"a counter row at t = {int(t.max())} is past the answer's {len(ids)} tokens",
                        "score rows below each sample's length (the live series)")
    if len(ids) and (ids.min() < 0 or ids.max() >= len(flags)):
        raise DataError(f"token id {int(ids.max())} is outside the head's token table ({len(flags)} ids)",
                        "use the head with the model it was trained for")
    f = flags[ids].astype(np.int64) if len(ids) else np.zeros((0, len(FLAGS)), np.int64)
    col = {name: f[:, k] for k, name in enumerate(FLAGS)}
    line_start = np.ones(len(ids), dtype=np.int64)
    if len(ids) > 1:
        line_start[1:] = col["ends_newline"][:-1] > 0
    per_token = {"newlines": col["newline"], "blank_lines": col["blank"], "fences": col["fence"],
                 "sentence_ends": col["sentence_end"], "colons": col["colon"],
                 "list_items": col["marker"] * line_start, "headers": col["header"] * line_start}
    cum = {k: np.concatenate([[0], np.cumsum(v)]) for k, v in per_token.items()}
    pos = np.arange(len(ids))
    last_nl = np.maximum.accumulate(np.where(col["newline"] > 0, pos, -1)) if len(ids) else np.zeros(0, np.int64)
    last_nl = np.concatenate([[-1], last_nl])  # last_nl[t]: index of the last newline token among the first t
    lo = np.maximum(t - RECENT, 0)
    tf = t.astype(np.float64)
    denom = np.maximum(tf, 1.0)
    out = np.empty((len(t), len(COUNTERS)), dtype=np.float64)
    vals = {
        "t": tf, "log1p_t": np.log1p(tf), "log1p_prompt_tokens": np.full(len(t), np.log1p(max(prompt_tokens, 0))),
        **{k: cum[k][t].astype(np.float64) for k in per_token},
        "in_code": (cum["fences"][t] % 2).astype(np.float64),
        "since_newline": (t - 1 - last_nl[t]).astype(np.float64),
        "recent_newlines": (cum["newlines"][t] - cum["newlines"][lo]).astype(np.float64),
        "recent_sentence_ends": (cum["sentence_ends"][t] - cum["sentence_ends"][lo]).astype(np.float64),
        "newline_rate": cum["newlines"][t] / denom, "sentence_rate": cum["sentence_ends"][t] / denom,
        "last_is_newline": np.where(t > 0, col["ends_newline"][np.maximum(t - 1, 0)] > 0 if len(ids) else 0, 0)
        .astype(np.float64),
    }
    vals["since_newline"] = np.where(t > 0, vals["since_newline"], 0.0)
    for k, name in enumerate(COUNTERS):
        out[:, k] = vals[name]
    return out


def prefill_features(q: np.ndarray, t: np.ndarray, cap: float | None) -> np.ndarray:
    """(n, 4): log1p of a prefill head's q10 / q50 / q90 (total tokens) and of its q50 carried to t."""
    q = np.asarray(q, dtype=np.float64)
    _, r50, _ = two_piece_carry(q[:, 0], q[:, 1], q[:, 2], np.asarray(t, dtype=np.float64), cap)
    return np.column_stack([np.log1p(np.clip(q, 0, None)), np.log1p(r50)])


def hazard_edges(cap: float) -> np.ndarray:
    """Bin edges of the remaining length: 1, sqrt 2, 2, 2 sqrt 2, ... up to past ``cap``."""
    k = int(np.ceil(2 * np.log2(max(cap, 2.0)))) + 1
    return np.asarray([2.0 ** (i / 2) for i in range(k + 1)])


# ---------------------------------------------------------------- the head
@dataclass
class CounterHead:
    """A fitted counter head (see the module docstring); ``predict`` takes its feature rows and t."""

    kind: str
    names: tuple[str, ...]
    trees: dict[str, dict[str, np.ndarray]]
    flags: np.ndarray
    cap: float | None
    edges: np.ndarray | None = None
    calibration: dict[str, float] = field(default_factory=dict)  # str(t) or "pooled" -> log-space widening
    prefill: dict[str, Any] | None = None  # {"name": made_by of the prefill table read, "path": ...}
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def uses_prefill(self) -> bool:
        return self.prefill is not None

    def _raw(self, x: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        from lenpred.predictors.gbdt import eval_trees

        room = np.maximum((self.cap if self.cap is not None else np.inf) - t, 1.0)
        if self.kind == "quantile":
            q = [np.expm1(eval_trees(self.trees[k], x)) for k in ("q10", "q50", "q90")]
            q10, q50, q90 = (np.clip(v, 1.0, room) for v in q)
            q10, q90 = np.minimum(q10, q50), np.maximum(q90, q50)
            return q10, q50, q90
        assert self.edges is not None
        return _hazard_quantiles(self.trees["hazard"], self.edges, x, room)

    def predict(self, x: np.ndarray, t: Sequence[int] | np.ndarray) -> Remaining:
        """The calibrated 10/50/90% remaining tokens of each row of ``x`` (its counters, and with a
        prefill head its :func:`prefill_features`), each at its t."""
        tt = np.asarray(t, dtype=np.float64)
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != len(self.names):
            raise DataError(f"the counter head reads {len(self.names)} features per row, got shape {x.shape}",
                            "build the rows with CounterHead.rows (or retrain the head with this lenpred)")
        q10, q50, q90 = self._raw(x, tt)
        c = np.asarray([self.calibration.get(str(int(v)), self.calibration.get("pooled", 0.0)) for v in tt])
        room = np.maximum((self.cap if self.cap is not None else np.inf) - tt, 1.0)
        lo = np.clip(np.expm1(np.log1p(q10) - c), 0.0, q50)
        hi = np.clip(np.expm1(np.log1p(q90) + c), q50, np.maximum(room, q50))
        return Remaining(lo, q50, hi, f"counter head ({self.kind}{', with ' + str(self.prefill['name']) if self.prefill else ''};"
                         " trained on live rows)", extra={"made_for": "live"})

    def rows(self, samples: pd.DataFrame, index: pd.DataFrame, prefill: Any = None) -> np.ndarray:
        """The feature rows of trajectory-index-like rows (``prompt_id``, ``sample_idx``, ``t``):
        ``samples`` has their ``token_ids``, ``n_tokens`` and ``n_prompt_tokens``; ``prefill`` (a
        :class:`lenpred.predictions.Predictions`) when the head reads one."""
        return build_rows(samples, index, self.flags, self.cap, prefill if self.uses_prefill else None,
                          what=f"the counter head's prefill table ({(self.prefill or {}).get('name')})")


def _hazard_quantiles(trees: dict[str, np.ndarray], edges: np.ndarray, x: np.ndarray, room: np.ndarray,
                      probs: Sequence[float] = (0.1, 0.5, 0.9), chunk: int = 8192
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from lenpred.predictors.gbdt import eval_trees

    nb = len(edges) - 1
    out = np.zeros((len(probs), len(x)))
    for s in range(0, len(x), chunk):
        xs, rs = x[s:s + chunk], room[s:s + chunk]
        n = len(xs)
        z = np.column_stack([np.repeat(xs, nb, axis=0), np.tile(np.arange(nb, dtype=np.float64), n)])
        h = 1.0 / (1.0 + np.exp(-eval_trees(trees, z).reshape(n, nb)))
        # no remaining length past the room left to the cap: its bin ends the series (hazard 1)
        last = np.clip(np.searchsorted(edges, rs, side="right") - 1, 0, nb - 1)
        h[np.arange(nb)[None, :] >= last[:, None]] = 1.0
        surv = np.cumprod(np.concatenate([np.ones((n, 1)), 1.0 - h[:, :-1]], axis=1), axis=1)  # P(R >= bin k)
        pmf = surv * h
        cdf = np.cumsum(pmf, axis=1)
        for j, p in enumerate(probs):
            k = np.minimum((cdf < p).sum(axis=1), nb - 1)
            below = np.where(k > 0, cdf[np.arange(n), np.maximum(k - 1, 0)], 0.0)
            frac = np.clip((p - below) / np.maximum(pmf[np.arange(n), k], 1e-12), 0.0, 1.0)
            lo_e, hi_e = edges[k], np.minimum(edges[k + 1], np.maximum(rs, edges[k]))
            out[j, s:s + n] = np.minimum(lo_e * (hi_e / lo_e) ** frac, rs)
    return out[0], out[1], out[2]


def build_rows(samples: pd.DataFrame, index: pd.DataFrame, flags: np.ndarray, cap: float | None, prefill: Any,
               what: str = "prefill predictions") -> np.ndarray:
    """Feature rows (:data:`COUNTERS`, then :data:`PREFILL_FEATURES` with ``prefill``) for ``index``'s rows."""
    keyed = samples.set_index(["prompt_id", "sample_idx"])
    keys = list(zip(index["prompt_id"].astype(str), index["sample_idx"].astype(np.int64), strict=True))
    missing = [k for k in dict.fromkeys(keys) if k not in keyed.index]
    if missing:
        raise DataError(f"{len(missing)} sample(s) of these rows are not in the run (first: {missing[0]})",
                        "use the run the rows were made from")
    t_all = index["t"].to_numpy(dtype=np.int64)
    out = np.empty((len(index), len(COUNTERS)), dtype=np.float64)
    for key, pos in _group_positions(keys).items():
        s = keyed.loc[key]
        n = int(s["n_tokens"]) if cap is None else min(int(s["n_tokens"]), int(cap))
        out[pos] = counter_rows(list(s["token_ids"])[:n], t_all[pos], int(s["n_prompt_tokens"]), flags)
    if prefill is None:
        return out
    q = prefill.for_samples(index[["prompt_id", "sample_idx"]], what=what)
    qq = q[["q10", "q50", "q90"]].to_numpy(dtype=np.float64)
    pred = q["pred_tokens"].to_numpy(dtype=np.float64)
    qq = np.where(np.isfinite(qq), qq, pred[:, None])
    return np.column_stack([out, prefill_features(qq, t_all, cap)])


def _group_positions(keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], np.ndarray]:
    groups: dict[tuple[str, int], list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    return {k: np.asarray(v, dtype=np.int64) for k, v in groups.items()}


# ---------------------------------------------------------------- fitting
def live_index(samples: pd.DataFrame, cap: float | None, every: int | None = None) -> pd.DataFrame:
    """The live rows of ``samples`` (``prompt_id``, ``sample_idx``, ``n_tokens``): one per (sample, t) for
    t = 0, 16, 32, ... (and every ``every`` tokens) below its L; columns prompt_id, sample_idx, t, length,
    remaining."""
    from lenpred.outlets.features import live_positions

    rows = []
    for pid, k, n in zip(samples["prompt_id"].astype(str), samples["sample_idx"].astype(np.int64),
                         samples["n_tokens"].astype(np.int64), strict=True):
        L = int(n) if cap is None else min(int(n), int(cap))
        for t in sorted(live_positions(L, every)):
            if t < L or (t == 0 and L == 0):
                rows.append((pid, int(k), t, L, L - t))
    return pd.DataFrame(rows, columns=["prompt_id", "sample_idx", "t", "length", "remaining"])


def _hgb(kind: str, seed: int, quantile: float | None = None) -> Any:
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

    common = {"max_iter": 500, "learning_rate": 0.05, "max_leaf_nodes": 31, "min_samples_leaf": 40,
              "l2_regularization": 1.0, "early_stopping": True, "n_iter_no_change": 30, "scoring": "loss",
              "random_state": seed}
    if kind == "hazard":
        return HistGradientBoostingClassifier(**common)
    return HistGradientBoostingRegressor(loss="quantile", quantile=quantile, **common)


def _calibrate(q10: np.ndarray, q90: np.ndarray, y: np.ndarray, t: np.ndarray) -> dict[str, float]:
    """Per live point (and pooled): the log-space widening c that makes [q10 e^-c, q90 e^c] cover LEVEL
    of these rows (split-conformal quantile of max(log q10 - log y, log y - log q90))."""
    s = np.maximum(np.log1p(q10) - np.log1p(y), np.log1p(y) - np.log1p(q90))

    def level(v: np.ndarray) -> float:
        k = min(int(np.ceil((len(v) + 1) * LEVEL)), len(v))
        return float(np.sort(v)[k - 1])

    out = {"pooled": level(s)}
    for tv in np.unique(t):
        m = t == tv
        if m.sum() >= MIN_GROUP:
            out[str(int(tv))] = level(s[m])
    return out


def fit_counter_head(samples: pd.DataFrame, fit_ids: frozenset[str], val_ids: frozenset[str], flags: np.ndarray,
                     cap: float | None, *, kind: str = "quantile", prefill: Any = None,
                     prefill_id: Mapping[str, Any] | None = None, every: int | None = None, seed: int = 0,
                     progress: Callable[[str], None] | None = None) -> CounterHead:
    """Fit a counter head on the live rows of the ``fit_ids`` prompts' samples; early stopping on half of the
    ``val_ids`` prompts and calibration on the other half (split by a hash of the prompt id)."""
    import zlib

    from threadpoolctl import threadpool_limits

    from lenpred.predictors.gbdt import export_trees

    if kind not in KINDS:
        raise ConfigError(f"unknown counter head kind {kind!r}", f"use one of {', '.join(KINDS)}")
    say = progress or (lambda _m: None)
    fit_s = samples[samples["prompt_id"].isin(fit_ids)]
    val_s = samples[samples["prompt_id"].isin(val_ids)]
    if fit_s.empty or val_s.empty:
        raise DataError(f"the counter head needs samples of training and validation prompts (got {len(fit_s)} and "
                        f"{len(val_s)})", "use a run with a split that has train and val prompts (lenpred split)")
    half = val_s["prompt_id"].map(lambda p: zlib.crc32(str(p).encode()) % 2 == 0)
    stop_s, cal_s = val_s[half], val_s[~half]
    if stop_s.empty or cal_s.empty:
        stop_s = cal_s = val_s
    sets = {}
    for name, s in (("fit", fit_s), ("stop", stop_s), ("cal", cal_s)):
        idx = live_index(s, cap, every)
        x = build_rows(s, idx, flags, cap, prefill, what="the prefill predictions given")
        sets[name] = (idx, x, idx["remaining"].to_numpy(dtype=np.float64))
        say(f"counter head: {name} rows {len(idx)} ({idx[['prompt_id', 'sample_idx']].drop_duplicates().shape[0]} samples)")
    names = COUNTERS + (PREFILL_FEATURES if prefill is not None else ())
    (_, x, y), (_, xv, yv) = sets["fit"], sets["stop"]
    trees: dict[str, dict[str, np.ndarray]] = {}
    edges = None
    iters: dict[str, int] = {}
    with threadpool_limits(1):
        if kind == "quantile":
            for key, q in (("q10", 0.1), ("q50", 0.5), ("q90", 0.9)):
                est = _hgb(kind, seed, q).fit(x, np.log1p(y), X_val=xv, y_val=np.log1p(yv))
                trees[key], iters[key] = export_trees(est), int(est.n_iter_)
                say(f"counter head: {key} {est.n_iter_} trees")
        else:
            edges = hazard_edges(cap if cap is not None else float(max(y.max(), yv.max())))
            z, lab = _expand(x, y, edges)
            zv, labv = _expand(xv, yv, edges)
            say(f"counter head: hazard on {len(z)} (row, bin) pairs, {len(edges) - 1} bins")
            est = _hgb(kind, seed).fit(z, lab, X_val=zv, y_val=labv)
            trees["hazard"], iters["hazard"] = export_trees(est), int(est.n_iter_)
            say(f"counter head: hazard {est.n_iter_} trees")
    head = CounterHead(kind, tuple(names), trees, flags, cap, edges,
                       prefill=dict(prefill_id) if prefill is not None else None)
    ic, xc, yc = sets["cal"]
    tc = ic["t"].to_numpy(dtype=np.float64)
    q10, _, q90 = head._raw(xc, tc)
    head.calibration = _calibrate(q10, q90, yc, tc)
    head.info = {"rows": {k: int(len(v[0])) for k, v in sets.items()},
                 "samples": {k: int(v[0][["prompt_id", "sample_idx"]].drop_duplicates().shape[0]) for k, v in sets.items()},
                 "trees": iters, "every": every, "seed": seed}
    return head


def _expand(x: np.ndarray, y: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, bin k) pairs for k up to the row's own bin (label 1 there): the hazard's training set."""
    nb = len(edges) - 1
    b = np.clip(np.searchsorted(edges, y, side="right") - 1, 0, nb - 1)
    rows = np.repeat(np.arange(len(x)), b + 1)
    k = np.concatenate([np.arange(v + 1) for v in b]) if len(b) else np.zeros(0, np.int64)
    z = np.column_stack([x[rows], k.astype(np.float64)])
    return z, (k == b[rows]).astype(np.int64)


# ---------------------------------------------------------------- the artifact
def save_counter_head(head: CounterHead, out: str, card: Mapping[str, Any], config: Mapping[str, Any]) -> None:
    from lenpred.io.artifacts import ArtifactHeader, write_artifact

    tensors = {"token_flags": np.ascontiguousarray(head.flags)}
    for key, tr in head.trees.items():
        tensors.update({f"{key}.{k}": np.ascontiguousarray(v) for k, v in tr.items()})
    if head.edges is not None:
        tensors["edges"] = np.asarray(head.edges, dtype=np.float64)
    info = {"kind": head.kind, "names": list(head.names), "trees": sorted(head.trees), "cap": head.cap,
            "calibration": head.calibration, "prefill": head.prefill, "flags": list(FLAGS), "rows": "live",
            "fit": head.info}
    write_artifact(out, ArtifactHeader(kind=KIND, schema_version=1, config=dict(config), card=card,
                                       card_scope="model+sampling", meta={"feature_spec": {"positions": {"rows": "live"}}}),
                   tensors=tensors, json_files={"head.json": info})


def load_counter_head(path: str, card: Mapping[str, Any] | None = None) -> CounterHead:
    from lenpred.io.artifacts import load_artifact

    art = load_artifact(path, kind=KIND, card=card, what="counter head")
    info = art.read_json("head.json")
    if list(info.get("flags") or []) != list(FLAGS) or any(n not in COUNTERS + PREFILL_FEATURES for n in info["names"]):
        raise DataError(f"counter head {path} was made by a lenpred with other counters than this one",
                        "retrain it (lenpred outlets counters)")
    ten = art.tensors()
    trees = {key: {k.split(".", 1)[1]: v for k, v in ten.items() if k.startswith(key + ".")} for key in info["trees"]}
    return CounterHead(info["kind"], tuple(info["names"]), trees, ten["token_flags"], info.get("cap"),
                       ten.get("edges"), dict(info.get("calibration") or {}), info.get("prefill"), dict(info.get("fit") or {}))


# ---------------------------------------------------------------- from files (lenpred outlets counters)
def run_samples(rd: Any, ids: frozenset[str] | set[str]) -> pd.DataFrame:
    """The samples of these prompts with their token ids, lengths and prompt lengths."""
    from lenpred.data.lengths import sample_lengths

    s = sample_lengths(rd, extra=("token_ids",), with_prompts=True)
    s = s[s["prompt_id"].isin(ids)].reset_index(drop=True)
    have = s["token_ids"].map(lambda v: 0 if v is None else len(v)).to_numpy()
    short = have < s["n_tokens"].to_numpy()
    if short.any():
        raise DataError(f"{int(short.sum())} of {len(s)} samples of {rd.path} lack their token ids (the counters read "
                        "the answer's tokens)", "use a run collected by lenpred collect (it keeps every sample's token ids)")
    return s


def train_counter_files(run: str, out: str, *, kind: str = "quantile", prefill: str | None = None,
                        every: int | None = None, split: str | None = None, seed: int = 0, model: str | None = None,
                        progress: Callable[[str], None] | None = None) -> CounterHead:
    """Train a counter head on ``run``'s training prompts (validation prompts: early stopping and
    calibration) and write it to ``out``. ``prefill``: ``[NAME=]FILE``, a prefill predictions table
    covering the train and val prompts (lenpred predict --roles train,val), read as features."""
    from lenpred.data.rundir import RunDir
    from lenpred.data.split import load_split
    from lenpred.io.artifacts import check_out
    from lenpred.models.loading import load_tokenizer
    from lenpred.predictions import read_predictions
    from lenpred.predictors.pipeline import run_cap

    if kind not in KINDS:
        raise ConfigError(f"unknown counter head kind {kind!r}", f"use one of {', '.join(KINDS)}")
    if every is not None and every < 1:
        raise ConfigError(f"--live-every must be >= 1, got {every}", "pass a token count, e.g. --live-every 32")
    rd = RunDir.open(run)
    pre_name, sep, pre_path = (prefill or "").partition("=")
    pre_path = pre_path if sep else (prefill or "")
    check_out(out, kind=KIND, card=rd.card, inputs={"--run": run, **({"--prefill-predictions": pre_path} if prefill else {})})
    sp = load_split(rd, split)
    cap = run_cap(rd.card)
    model_id = model or str((rd.card.get("model") or {}).get("id") or "")
    tok = load_tokenizer(model_id) if model_id else load_tokenizer()
    vocab = (rd.card.get("model") or {}).get("vocab_size")
    if vocab is not None and len(tok) < int(vocab) - 1024:
        raise DataError(f"the tokenizer of {model_id!r} has {len(tok)} ids, the run's model {vocab}",
                        "pass --model with the run's model")
    flags = tokenizer_flags(tok)
    if vocab is not None and len(flags) < int(vocab):
        flags = np.vstack([flags, np.zeros((int(vocab) - len(flags), len(FLAGS)), np.int16)])
    samples = run_samples(rd, set(sp.train) | set(sp.val))
    pre = pid = None
    if prefill:
        pre = read_predictions(pre_path, card=rd.card)
        pid = {"name": pre_name or pre.made_by, "path": pre_path}
    head = fit_counter_head(samples, sp.train, sp.val, flags, cap, kind=kind, prefill=pre, prefill_id=pid,
                            every=every, seed=seed, progress=progress)
    save_counter_head(head, out, rd.card, {"run": run, "kind": kind, "prefill": prefill, "live_every": every,
                                           "split": split, "seed": seed, "model": model_id})
    return head


def predict_counter_files(head_path: str, run: str, roles: Sequence[str], *, prefill: str | None = None,
                          every: int | None = None, split: str | None = None) -> Any:
    """A predictions table from a counter head: per sample of the split's ``roles``, its prediction at t = 0
    (pred_tokens, q10 / q50 / q90) and a re-prediction with its quantiles at every live point below L
    (``repred_gen``, ``repred_remaining``, ``repred_q10``, ``repred_q90``: what the simulator's
    distribution-aware policies read). ``prefill``: the table a ``-mlp`` head reads (``[NAME=]FILE``)."""
    from lenpred.data.rundir import RunDir
    from lenpred.data.split import load_split
    from lenpred.predictions import Predictions, read_predictions

    rd = RunDir.open(run)
    head = load_counter_head(head_path, card=rd.card)
    pre = None
    if head.prefill is not None:
        if not prefill:
            raise ConfigError(f"counter head {head_path} reads the prefill predictions {head.prefill.get('name')!r}",
                              f"pass --prefill-predictions {head.prefill.get('name')}=FILE (lenpred predict)")
        pre = read_predictions(prefill.partition("=")[2] if "=" in prefill else prefill, card=rd.card)
    sp = load_split(rd, split)
    ids: set[str] = set()
    for r in roles:
        ids |= set(sp.ids(r))
    samples = run_samples(rd, ids)
    idx = live_index(samples, head.cap, every)
    rem = head.predict(head.rows(samples, idx, pre), idx["t"].to_numpy())
    df = idx[["prompt_id", "sample_idx", "t"]].assign(q10=rem.q10, q50=rem.q50, q90=rem.q90)
    rows = []
    for (pid, k), g in df.groupby(["prompt_id", "sample_idx"], sort=False):
        g = g.sort_values("t")
        first, later = g.iloc[0], g.iloc[1:]
        rows.append({"prompt_id": pid, "sample_idx": int(k), "pred_tokens": float(first["q50"]),
                     "q10": float(first["q10"]), "q50": float(first["q50"]), "q90": float(first["q90"]),
                     "repred_gen": later["t"].astype(int).tolist(), "repred_remaining": later["q50"].tolist(),
                     "repred_q10": later["q10"].tolist(), "repred_q90": later["q90"].tolist()})
    made_by = "counters" + (f"-{head.kind}" if head.kind != "quantile" else "") + (
        f"+{str(head.prefill['name']).removeprefix('prefill-')}" if head.prefill else "")
    return Predictions.from_frame(pd.DataFrame(rows), made_by=made_by, card=rd.card,
                                  config={"head": head_path, "roles": list(roles), "prefill": prefill,
                                          "live_every": every, "rows": "live"})
