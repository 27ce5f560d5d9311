"""The OUTLETS bench from files (``lenpred outlets bench``): the trajectory's test rows, the heads,
carried prefill tables and anchors it names, scored by :mod:`lenpred.outlets.evaluate`.

:class:`BenchRequest` is what the command builds from its flags; :func:`run_bench` loads everything,
predicts every method on the test rows and scores them.
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

__all__ = ["BenchRequest", "anchored_method", "head_method", "named", "run_bench"]


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
    reference: str | None = None
    split: str | None = None
    boot: Bootstrap = Bootstrap()

    def config(self) -> dict[str, Any]:
        """The inputs the ``outlets-bench`` artifact records."""
        return {"traj": self.traj, "run": self.run, "heads": list(self.heads),
                "prefill_predictions": list(self.prefill_predictions),
                **({"anchors": list(self.anchors)} if self.anchors else {}), "reference": self.reference,
                "split": self.split, "n_boot": self.boot.n_boot, "seed": self.boot.seed}


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
    return MethodInput(name, _family(name), str(path), Remaining(d.q10, d.q50, d.q90, f"outlets head ({variant})"))


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
    return MethodInput(name or "outlets-anchored", "outlets", str(path), rem)


def run_bench(req: BenchRequest, points: Sequence[PointSpec] | None = None) -> OutletsBench:
    """Load everything, predict every method on the test rows, score (a prefill table's name gets the
    ``prefill-`` prefix)."""
    from lenpred.data.lengths import sample_lengths
    from lenpred.data.rundir import RunDir
    from lenpred.outlets.store import role_rows
    from lenpred.predictions import read_predictions
    from lenpred.predictors.pipeline import run_cap

    traj_path, run, split, reference, boot = req.traj, req.run, req.split, req.reference, req.boot
    n_boot, ci, seed = boot.n_boot, boot.ci, boot.seed
    if n_boot < 10:
        raise ConfigError(f"--n-boot must be at least 10, got {n_boot}")
    rd = RunDir.open(run)
    traj, sp, test = role_rows(traj_path, rd, "test", "compute trajectory features for the split's test prompts", split)
    cap = run_cap(rd.card)
    lengths = sample_lengths(rd, with_prompts=False)
    if cap is not None:
        lengths["n_tokens"] = np.minimum(lengths["n_tokens"], int(cap))
    constant = CarriedConstant.from_samples(lengths[lengths["prompt_id"].isin(sp.train)])
    idx = test.index
    methods: list[MethodInput] = []
    for name, path in named(req.heads):
        methods.append(head_method(path, test, rd.card, name))
    for name, path in named(req.prefill_predictions):
        p = read_predictions(path, card=rd.card)
        nm = name or p.made_by
        nm = nm if nm.startswith("prefill-") else f"prefill-{nm}"
        rem = carry_prefill(p, idx, cap, what=f"prefill predictions {nm!r}")
        point = p.for_samples(idx[["prompt_id", "sample_idx"]], what=f"prefill predictions {nm!r}")["pred_tokens"]
        methods.append(MethodInput(nm, "prefill", str(path), rem, point.to_numpy(dtype=np.float64)))
    if req.anchors:
        methods.extend([anchored_method(name, path, methods, test, rd.card) for name, path in named(req.anchors)])
    const_rem = constant.predict(idx["t"].to_numpy())
    methods.append(MethodInput(CONSTANT, "prefill", "run", const_rem))
    test_lengths = lengths[lengths["prompt_id"].isin(set(idx["prompt_id"].astype(str)))]
    methods.append(MethodInput(ORACLE, "oracle", "run", carried_oracle(idx, test_lengths, fallback=const_rem)))
    infos, results, ref = score_methods(idx, methods, points=points, reference=reference, boot=boot)
    bound = bound_on(test_lengths, n_boot, ci, seed)
    total = total_at_start(idx, methods, bound, n_boot=n_boot, ci=ci, seed=seed)
    prot = Protocol(run=str(rd.path), card_hash=rd.card_hash, trajectory=str(traj_path),
                    trajectory_spec=_jsonable(traj.spec), cap=cap, test_prompts=int(idx["prompt_id"].nunique()),
                    test_samples=int(len(idx[["prompt_id", "sample_idx"]].drop_duplicates())), test_rows=int(test.n),
                    reference=ref, short_threshold=_f(short_threshold_of(idx)), n_boot=n_boot, ci=ci, seed=seed)
    return OutletsBench(protocol=prot, points=infos, series=series_of([p for p in (points or default_points())
                                                                         if any(i.id == p.id for i in infos)]),
                        methods=results, total_t0=total)


def _jsonable(d: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(dict(d), default=str))
