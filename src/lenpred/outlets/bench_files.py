"""The OUTLETS bench from files (``lenpred outlets bench``): the trajectory's test rows, the heads,
carried prefill tables and anchors it names, scored on the live series (:mod:`lenpred.outlets.livebench`,
the headline) and at the fraction-of-L and token points (:mod:`lenpred.outlets.evaluate`, secondary).

:class:`BenchRequest` is what the command builds from its flags; :func:`load_methods` loads everything
and predicts every method on the test rows; :func:`run_bench` scores the secondary table,
:func:`run_live` the live series, :func:`run_benches` both from one load.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lenpred.errors import ConfigError, DataError
from lenpred.outlets.baselines import CarriedConstant, Remaining, carried_oracle, carry_prefill
from lenpred.outlets.evaluate import (
    CONSTANT,
    ORACLE,
    Bootstrap,
    MethodInput,
    OutletsBench,
    PointSpec,
    Protocol,
    _f,
    _family,
    bound_on,
    default_points,
    score_methods,
    series_of,
    short_threshold_of,
    total_at_start,
)
from lenpred.outlets.features import rows_of
from lenpred.outlets.livebench import (
    T_ONLY,
    LiveBench,
    LiveRequest,
    check_live_rows,
    check_strict,
    live_point_set,
    score_live,
)

__all__ = ["BenchRequest", "Loaded", "anchored_method", "counters_method", "head_method", "load_methods", "named", "prefill_method", "run_bench",
           "run_benches", "run_live"]


def named(items: Sequence[str]) -> list[tuple[str | None, str]]:
    """``"[NAME=]PATH"`` strings -> (name or None, path) pairs."""
    out = []
    for it in items:
        name, sep, path = it.partition("=")
        out.append((name or None, path) if sep else (None, it))
    return out


@dataclass(frozen=True)
class BenchRequest:
    """What ``lenpred outlets bench`` scores, built once from its flags: the trajectory and its run,
    the methods as ``"[NAME=]PATH"`` strings (OUTLETS heads, carried prefill tables, anchors), the
    reference method (default: the best carried prefill head at t = 0), the split and the bootstrap."""

    traj: str
    run: str
    heads: Sequence[str] = ()
    prefill_predictions: Sequence[str] = ()
    anchors: Sequence[str] = ()
    counters: Sequence[str] = ()
    reference: str | None = None
    split: str | None = None
    boot: Bootstrap = Bootstrap()
    live: LiveRequest = LiveRequest()

    def config(self) -> dict[str, Any]:
        """The inputs the ``outlets-bench`` artifact records."""
        live = {k: v for k, v in (("live_points", list(self.live.points) if self.live.points is not None else None),
                                  ("live_every", self.live.every), ("strict_series", self.live.strict or None))
                if v is not None}
        return {"traj": self.traj, "run": self.run, "heads": list(self.heads),
                "prefill_predictions": list(self.prefill_predictions),
                **({"anchors": list(self.anchors)} if self.anchors else {}),
                **({"counters": list(self.counters)} if self.counters else {}), "reference": self.reference,
                "split": self.split, "n_boot": self.boot.n_boot, "seed": self.boot.seed, **live}


def head_method(path: str | os.PathLike[str], traj: Any, card: Mapping[str, Any] | None, name: str | None = None
                ) -> MethodInput:
    """An outlets head (any variant, the probe included) predicted on ``traj``'s rows."""
    import lenpred.outlets.head  # noqa: F401 - registers the outlets head
    from lenpred.predictors.io import read_head

    head, art = read_head(path, card=card)
    if head.name != "outlets":
        raise DataError(f"{path} is a {head.name} head, not an outlets head",
                        "pass prefill heads' predictions with --prefill-predictions (lenpred predict)")
    variant = (art.meta.get("train") or {}).get("variant") or "outlets"
    name = name or variant
    d = head.predict_dist(traj)
    made_for = rows_of(art.meta.get("feature_spec"))  # the rows of the trajectory it was trained on
    return MethodInput(name, _family(name), str(path),
                       Remaining(d.q10, d.q50, d.q90, f"outlets head ({variant}; trained on {made_for} rows)"),
                       extra={"made_for": made_for})


def prefill_method(name: str | None, path: str, index: Any, card: Mapping[str, Any] | None,
                   cap: float | None) -> tuple[MethodInput, Any]:
    """A prefill head's predictions table (``path``) carried along trajectory rows ``index`` by survival, named
    ``prefill-<name or its maker>``, and the table itself."""
    from lenpred.predictions import read_predictions

    p = read_predictions(path, card=card)
    nm = name or p.made_by
    nm = nm if nm.startswith("prefill-") else f"prefill-{nm}"
    rem = carry_prefill(p, index, cap, what=f"prefill predictions {nm!r}")
    point = p.for_samples(index[["prompt_id", "sample_idx"]], what=f"prefill predictions {nm!r}")["pred_tokens"]
    return MethodInput(nm, "prefill", str(path), rem, point.to_numpy(dtype=np.float64)), p


def anchored_method(name: str | None, path: str, methods: Sequence[Any], traj: Any, card: Mapping[str, Any]) -> Any:
    """The bench method of an anchor: its OUTLETS head (one of ``methods`` by path, else loaded here)
    and its prefill table (one of ``methods`` by name) blended on ``traj``'s rows."""
    from lenpred.outlets.anchor import load_anchor

    a = load_anchor(path, card=card)
    pre_name = str(a.prefill.get("name"))
    pre = next((m for m in methods if m.name == pre_name), None)
    if pre is None:
        raise DataError(f"anchor {path} blends the prefill predictions {pre_name!r}, which are not in this bench",
                        f"pass them with --prefill-predictions {pre_name.removeprefix('prefill-')}=FILE")
    head_path = str(a.head.get("path"))
    head = next((m for m in methods if m.source == head_path), None) or head_method(head_path, traj, card)
    want = a.head.get("sha256")
    if want:
        from lenpred.io.artifacts import load_artifact

        have = (load_artifact(head_path, verify=False).meta.get("files") or {}).get("weights.safetensors")
        if have != want:
            raise DataError(f"anchor {path} was fitted on another OUTLETS head than {head_path} (weights differ)",
                            "refit the anchor on this head (`lenpred outlets anchor`)")
    rem = a.apply(head.remaining, pre.remaining, traj.index["t"].to_numpy())
    return MethodInput(name or "outlets-anchored", "outlets", str(path), rem, extra=dict(head.extra))


def counters_method(name: str | None, path: str, index: Any, rd: Any, tables: Mapping[str, Any]) -> MethodInput:
    """A counter head (lenpred outlets counters) predicted on the rows of ``index`` from the run's answers
    so far; a head that reads a prefill table takes it from ``tables`` (the bench's --prefill-predictions)."""
    from lenpred.outlets.counters import load_counter_head, run_samples

    head = load_counter_head(path, card=rd.card)
    pre = None
    if head.prefill is not None:
        want = str(head.prefill.get("name"))
        pre = tables.get(want) or tables.get(want.removeprefix("prefill-"))
        if pre is None:
            raise DataError(f"counter head {path} reads the prefill predictions {want!r}, which are not in this bench",
                            f"pass them with --prefill-predictions {want}=FILE (lenpred predict --roles test)")
    samples = run_samples(rd, set(index["prompt_id"].astype(str)))
    rem = head.predict(head.rows(samples, index, pre), index["t"].to_numpy())
    nm = name or ("counters" + (f"-{head.kind}" if head.kind != "quantile" else "")
                  + (f"+{str(head.prefill['name']).removeprefix('prefill-')}" if head.prefill else ""))
    if not nm.startswith("counters"):
        nm = f"counters-{nm}"
    return MethodInput(nm, "counters", str(path), rem, extra={"made_for": "live"})


@dataclass
class Loaded:
    """What :func:`load_methods` read: the run, its test rows and every method predicted on them."""

    rd: Any  # RunDir
    traj_path: str
    traj: Any  # the whole trajectory (its spec)
    test: Any  # the test prompts' rows
    cap: float | None
    test_lengths: Any  # DataFrame: one row per sample of the test prompts (capped)
    methods: list[MethodInput]

    @property
    def rows(self) -> str:
        return rows_of(self.traj.spec)


def load_methods(req: BenchRequest, live_points: bool = False) -> Loaded:
    """Load everything and predict every method on the test rows (a prefill table's name gets the
    ``prefill-`` prefix): the heads, the carried prefill tables, the anchors, the carried constant,
    ``t-only`` and the carried oracle. ``live_points``: first check that the trajectory holds every
    row of the live series (before any head is run)."""
    from lenpred.data.lengths import sample_lengths
    from lenpred.data.rundir import RunDir
    from lenpred.outlets.store import role_rows
    from lenpred.predictors.pipeline import run_cap

    if req.boot.n_boot < 10:
        raise ConfigError(f"--n-boot must be at least 10, got {req.boot.n_boot}",
                          "pass --n-boot 10 or more (default 1000)")
    rd = RunDir.open(req.run)
    traj, sp, test = role_rows(req.traj, rd, "test", "compute trajectory features for the split's test prompts",
                               req.split)
    cap = run_cap(rd.card)
    if live_points:
        idx = test.index
        check_live_rows(idx, live_point_set(req.live, traj.spec, cap, int(idx["length"].max()) if len(idx) else 0),
                        traj.spec, str(req.traj))
    lengths = sample_lengths(rd, with_prompts=False)
    if cap is not None:
        lengths["n_tokens"] = np.minimum(lengths["n_tokens"], int(cap))
    train = lengths[lengths["prompt_id"].isin(sp.train)]
    constant = CarriedConstant.from_samples(train)
    idx = test.index
    methods: list[MethodInput] = []
    for name, path in named(req.heads):
        methods.append(head_method(path, test, rd.card, name))
    tables: dict[str, Any] = {}
    for name, path in named(req.prefill_predictions):
        m, p = prefill_method(name, path, idx, rd.card, cap)
        tables[name or p.made_by] = tables[p.made_by] = p
        methods.append(m)
    if req.anchors:
        methods.extend([anchored_method(name, path, methods, test, rd.card) for name, path in named(req.anchors)])
    if req.counters:
        methods.extend([counters_method(name, path, idx, rd, tables) for name, path in named(req.counters)])
    t = idx["t"].to_numpy()
    const_rem = constant.predict(t)
    methods.append(MethodInput(CONSTANT, "prefill", "run", const_rem))
    # t-only: every training sample still running at t is one row a server meets there (weight 1 each)
    t_only = CarriedConstant(train["n_tokens"].to_numpy(dtype=np.float64)).predict(t)
    t_only.note = "median (q10, q90) of L - t over the training samples with L > t, each sample one row: no prompt, no state"
    methods.append(MethodInput(T_ONLY, "baseline", "run", t_only))
    test_lengths = lengths[lengths["prompt_id"].isin(set(idx["prompt_id"].astype(str)))]
    methods.append(MethodInput(ORACLE, "oracle", "run", carried_oracle(idx, test_lengths, fallback=const_rem)))
    return Loaded(rd, str(req.traj), traj, test, cap, test_lengths, methods)


def run_bench(req: BenchRequest, points: Sequence[PointSpec] | None = None, loaded: Loaded | None = None
              ) -> OutletsBench:
    """The secondary table: t = 0, the fraction-of-L points (which use the true length; only where the
    trajectory holds fraction rows) and the token points, every method scored by
    :func:`lenpred.outlets.evaluate.score_methods`."""
    ld = loaded or load_methods(req)
    boot = req.boot
    n_boot, ci, seed = boot.n_boot, boot.ci, boot.seed
    if points is None:
        points = default_points() if ld.rows in ("fraction", "both") else default_points(fractions=())
    if req.live.strict and any(p.kind == "fraction" for p in points):
        check_strict(ld.methods, "fraction")
    idx = ld.test.index
    infos, results, ref = score_methods(idx, ld.methods, points=points, reference=req.reference, boot=boot)
    bound = bound_on(ld.test_lengths, n_boot, ci, seed)
    total = total_at_start(idx, ld.methods, bound, n_boot=n_boot, ci=ci, seed=seed)
    prot = Protocol(run=str(ld.rd.path), card_hash=ld.rd.card_hash, trajectory=str(ld.traj_path),
                    trajectory_spec=_jsonable(ld.traj.spec), cap=ld.cap, test_prompts=int(idx["prompt_id"].nunique()),
                    test_samples=int(len(idx[["prompt_id", "sample_idx"]].drop_duplicates())),
                    test_rows=int(ld.test.n), reference=ref, short_threshold=_f(short_threshold_of(idx)),
                    n_boot=n_boot, ci=ci, seed=seed)
    return OutletsBench(protocol=prot, points=infos, series=series_of([p for p in points
                                                                         if any(i.id == p.id for i in infos)]),
                        methods=results, total_t0=total)


def run_live(req: BenchRequest, loaded: Loaded | None = None) -> LiveBench:
    """The headline: every method on the live series (:func:`lenpred.outlets.livebench.score_live`)."""
    ld = loaded or load_methods(req)
    idx = ld.test.index
    points = live_point_set(req.live, ld.traj.spec, ld.cap, int(idx["length"].max()) if len(idx) else 0)
    check_live_rows(idx, points, ld.traj.spec, ld.traj_path)
    if req.live.strict:
        check_strict(ld.methods, "live")
    protocol = {"run": str(ld.rd.path), "card_hash": ld.rd.card_hash, "trajectory": ld.traj_path,
                "trajectory_rows": ld.rows}
    return score_live(idx, ld.methods, points, reference=req.reference, boot=req.boot,
                      short_threshold=short_threshold_of(idx), protocol=protocol)


def run_benches(req: BenchRequest) -> tuple[LiveBench, OutletsBench]:
    """Both tables from one load: the live series (checked first: a trajectory without its rows is
    refused before anything is scored) and the secondary table."""
    ld = load_methods(req, live_points=True)
    live = run_live(req, ld)
    return live, run_bench(req, loaded=ld)


def _jsonable(d: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(dict(d), default=str))
