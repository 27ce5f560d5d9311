"""The yardstick's report (for benchmarks/bench_yardstick.py), from its work file read by
:func:`lenpred.report.yardstick.read_cells`.

``OUT/yardstick.json``: every cell row as run, and per (regime, cluster, batch, load or episode,
arrival) and arm the min / max / mean over seeds of each figure, of its ratio to the best prediction-free
arm in the same cell and seed (:func:`lenpred.report.yardstick.reference`; ``vs free``), and of its ratio to
the baseline FCFS + round robin (``vs base``; attainment: the difference in points). Steady cells whose
arms carry batch figures also get the batch-means interval of the short-P99 ratio to the reference, per seed
(:func:`lenpred.sim.yardstick.batch_ratio`).
``OUT/yardstick.md``: the same as tables, one per (cluster, batch, regime).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lenpred.report.yardstick import read_cells, reference
from lenpred.sim.yardstick import batch_ratio

FIGURES = ("short_p99_s", "p99_s", "short_p50_s", "attain_all", "attain_short", "attain_long", "drain_s")
RATIO = ("short_p99_s", "p99_s", "short_p50_s", "drain_s")  # the rest (attainment) as a difference


def _span(xs: Sequence[float]) -> dict[str, float | int | None]:
    v = [x for x in xs if x is not None and math.isfinite(x)]
    if not v:
        return {"min": None, "max": None, "mean": None, "n": 0}
    return {"min": min(v), "max": max(v), "mean": sum(v) / len(v), "n": len(v)}


def _place(row: dict[str, Any]) -> tuple[str, str, int, str, str]:
    c = row["cell"]
    return c["regime"], c["cluster"], int(c["batch"]), c["where"], c["arrival"]


def summarize(rows: list[dict[str, Any]], baseline: str) -> list[dict[str, Any]]:
    """Per place (regime, cluster, batch, where, arrival) and arm: each figure's span over seeds and
    its ratio (attainment: difference) to the baseline in the same seed."""
    by_place: dict[tuple[str, str, int, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["cell"]["regime"] != "goodput":
            by_place[_place(r)].append(r)
    out = []
    for place, rs in sorted(by_place.items()):
        arms = list(dict.fromkeys(a for r in rs for a in r["arms"]))
        refs = [reference(r) for r in rs]
        for arm in arms:
            entry: dict[str, Any] = {"regime": place[0], "cluster": place[1], "batch": place[2], "where": place[3],
                                     "arrival": place[4], "arm": arm, "seeds": sorted(r["cell"]["seed"] for r in rs
                                                                                      if arm in r["arms"])}
            for f in FIGURES:
                vals, rel, free = [], [], []
                for r, ref in zip(rs, refs, strict=True):
                    x = r["arms"].get(arm, {}).get(f)
                    vals.append(x)
                    for acc, other in ((rel, baseline), (free, ref)):
                        b = r["arms"].get(other, {}).get(f)
                        if x is not None and b is not None:
                            acc.append(x / b if f in RATIO and b else (x - b if f not in RATIO else None))
                entry[f] = _span(vals)
                entry[f"{f} vs base"] = _span(rel)
                entry[f"{f} vs free"] = _span(free)
            entry["reference"] = sorted(ref for r, ref in zip(rs, refs, strict=True) if arm in r["arms"])
            cis = [batch_ratio(r["arms"][arm]["batches"]["short_p99_s"], r["arms"][ref]["batches"]["short_p99_s"])
                   for r, ref in zip(rs, refs, strict=True)
                   if "batches" in r["arms"].get(arm, {}) and "batches" in r["arms"].get(ref, {}) and arm != ref]
            entry["short_p99_s vs free, batch means"] = [None if c is None else [c.mean, c.lo, c.hi] for c in cis]
            if place[0] == "steady":
                entry["n"] = sorted(r["n"] for r in rs)
                entry["converged"] = sum(bool(r["converged"]) for r in rs)
                # seeds where this arm's P99 grew >= 1.5x at two doublings of N: an unstable queue, no steady value
                entry["diverging"] = sum(any(k.startswith(f"{arm} ") for k in r.get("diverging", [])) for r in rs)
            else:  # seeds whose burst backlog outlasted the tail (arrivals had stopped before it drained)
                entry["not_drained"] = sum(not r["arms"].get(arm, {}).get("drained", True) for r in rs)
            out.append(entry)
    return out


def goodput_summary(rows: list[dict[str, Any]], baseline: str) -> list[dict[str, Any]]:
    """Per (cluster, batch) and arm: goodput (x capacity) per class over seeds, and vs the baseline."""
    by: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["cell"]["regime"] == "goodput":
            by[r["cell"]["cluster"], int(r["cell"]["batch"])].append(r)
    out = []
    for (cl, b), rs in sorted(by.items()):
        for arm in dict.fromkeys(a for r in rs for a in r["arms"]):
            e: dict[str, Any] = {"cluster": cl, "batch": b, "arm": arm}
            for cls in ("all", "short", "long"):
                got = [r["arms"].get(arm, {}).get(cls, {}) for r in rs]
                base = [r["arms"].get(baseline, {}).get(cls, {}) for r in rs]
                e[cls] = _span([g.get("load") for g in got])
                e[f"{cls} vs base"] = _span([g["load"] / x["load"] for g, x in zip(got, base, strict=True)
                                             if g.get("load") and x.get("load")])
                e[f"{cls} unresolved"] = sum(not g.get("resolved", False) for g in got)
                e[f"{cls} at cap"] = sum(g.get("hi") is None or g.get("hi") == math.inf for g in got if g.get("load"))
            out.append(e)
    return out


def free_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The headline: per (regime, cluster, batch) group and arm, the ratios to the best prediction-free arm
    of each cell and seed (median and min–max over the group's pairs), the pairs meeting issue 37's goal
    (short P99 <= 0.8x at overall <= 1.05x) and 'never worse' (both <= 1.02x), and, for steady cells with
    batch figures, the pairs whose batch-means interval of the short ratio lies below 1."""
    from lenpred.report.yardstick import GOAL_SHORT, MAX_OVERALL, NEVER_WORSE, REFERENCE, _Row, arm_stats

    by: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["cell"]["regime"] != "goodput":
            by[r["cell"]["regime"], r["cell"]["cluster"], int(r["cell"]["batch"])].append(r)
    out = ["## Against the best prediction-free arm (issue 37)", "",
           "Per group, every arm's short-request and overall P99 as a ratio to the best prediction-free arm of the "
           "same cell and seed, median (min–max) over the group's (load or episode, seed) pairs. `goal`: pairs where "
           f"the short P99 is <= {GOAL_SHORT:g}x at an overall P99 <= {MAX_OVERALL:g}x; `never worse`: both P99s "
           f"<= {NEVER_WORSE:g}x; `CI < 1`: steady pairs whose batch-means 95% interval of the short ratio lies "
           "below 1 (of the pairs with batch figures).", ""]
    for (regime, cl, b), rs in sorted(by.items(), key=lambda kv: (kv[0][0] != "steady", kv[0])):
        refs: dict[str, int] = {}
        stats = arm_stats([_Row.model_validate(r) for r in rs], refs)
        ci: dict[str, list[bool]] = defaultdict(list)
        for r in rs:
            ref = reference(r)
            for arm, f in r["arms"].items():
                if arm != ref and "batches" in f and "batches" in r["arms"][ref]:
                    c = batch_ratio(f["batches"]["short_p99_s"], r["arms"][ref]["batches"]["short_p99_s"])
                    if c is not None:
                        ci[arm].append(c.hi < 1.0)
        out += [f"### {regime}, {cl}, batch {b} ({len(rs)} pairs)", "",
                "Reference: " + ", ".join(f"{a} in {n}" for a, n in sorted(refs.items(), key=lambda kv: -kv[1])) + ".",
                "", "| arm | short P99 x free | overall P99 x free | short P50 x free | goal | never worse | CI < 1 |",
                "|---|---|---|---|---|---|---|"]
        order = sorted(stats.values(), key=lambda s: (s.arm != REFERENCE, s.predictor != "-", s.short_p99.median))
        for s in order:
            def sp(x: Any) -> str:
                return "-" if x is None else f"{x.median:.3f} ({x.lo:.3f}–{x.hi:.3f})"
            c = ci.get(s.arm, [])
            out.append(f"| {s.arm} | {sp(s.short_p99)} | {sp(s.overall_p99)} | {sp(s.short_p50)} | {s.n_goal}/{s.pairs} | "
                       f"{s.n_never_worse}/{s.pairs} | {f'{sum(c)}/{len(c)}' if c else '-'} |")
        out.append("")
    return out


def _r(s: dict[str, Any], fmt: str = "{:.2f}", scale: float = 1.0) -> str:
    if s["min"] is None:
        return "-"
    lo, hi = fmt.format(s["min"] * scale), fmt.format(s["max"] * scale)
    return lo if lo == hi else f"{lo}–{hi}"


def _table(entries: list[dict[str, Any]]) -> list[str]:
    regime = entries[0]["regime"]
    head = ["where", "arm", "short P99 s", "x free", "x base", "batch-means 95% CI of x free", "P99 s", "x free",
            "x base", "short P50 x free", "attain all / short / long %", "Δ all / short pts (vs free)"]
    if regime == "steady":
        head += ["N", "converged"]
    else:
        head += ["drain s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for e in entries:
        where = e["where"] + ("" if regime == "steady" else f" {e['arrival']}")
        att = " / ".join(_r(e[f"attain_{c}"], "{:.1f}", 100) for c in ("all", "short", "long"))
        delta = " / ".join(_r(e[f"attain_{c} vs free"], "{:+.1f}", 100) for c in ("all", "short"))
        cis = [c for c in e.get("short_p99_s vs free, batch means", []) if c is not None]
        ci = f"{min(c[1] for c in cis):.3f}–{max(c[2] for c in cis):.3f} ({len(cis)} seeds)" if cis else "-"
        name = e["arm"] + (" (ref. in " + str(e["reference"].count(e["arm"])) + ")"
                           if e["arm"] in e.get("reference", []) else "")
        cells = [where, name, _r(e["short_p99_s"]), _r(e["short_p99_s vs free"], "{:.3f}"),
                 _r(e["short_p99_s vs base"], "{:.3f}"), ci, _r(e["p99_s"]), _r(e["p99_s vs free"], "{:.3f}"),
                 _r(e["p99_s vs base"], "{:.3f}"), _r(e["short_p50_s vs free"], "{:.3f}"), att, delta]
        if regime == "steady":
            cells += [",".join(str(n) for n in sorted(set(e["n"]))), f"{e['converged']}/{len(e['n'])}"
                      + (f" ({e['diverging']} diverging)" if e.get("diverging") else "")]
        else:
            cells += [_r(e["drain_s"], "{:.0f}") + (f" ({e['not_drained']} past the tail)" if e["not_drained"] else "")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def markdown(summary: list[dict[str, Any]], goodput: list[dict[str, Any]], rows: list[dict[str, Any]],
             baseline: str) -> str:
    seeds = sorted({r["cell"]["seed"] for r in rows})
    out = ["# The yardstick: policies measured where the figures have a limit", "",
           f"{len(rows)} cells, seeds {', '.join(map(str, seeds))}. Every figure is min–max over seeds; "
           "`x free` is the ratio to the best prediction-free arm in the same cell and seed (of the stable arms "
           "with no predictor, those whose overall P99 is within 1.05x of the lowest; of those the lowest short "
           "P99; `ref. in k`: the arm was that reference in k seeds), `x base` the ratio to "
           f"{baseline}, `Δ` the attainment difference to the reference in points. The batch-means interval "
           "(steady cells, arms run with batch figures): the steady window cut into 10 batches by arrival, the "
           "ratio per batch, a Student-t 95% interval per seed; shown as the lowest lower and the highest upper "
           "end over seeds. Steady: figures over the arrivals between the 10% and 90% points "
           "at the N where every arm's short and overall P99 moved < 5% (or the cap: see `converged`; an arm whose "
           "P99 grew >= 1.5x at two successive doublings is `diverging`, an unstable queue, and left out of the "
           "rule). "
           "Episodes: base 0.7x, burst 1.3x / 1.5x for 30 / 120 s after 60 s of warm-up, then 0.7x until the "
           "episode ends (2x the drain time of the excess work, >= 60 s); figures over every request arriving "
           "from the burst's start; `drain s`: until every request that arrived by the burst's end finished. "
           "Attainment: TTFT <= SLO and TPOT <= SLO (DistServe), short = true output below the workload's "
           "median.", ""]
    out += free_markdown(rows)
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = defaultdict(list)
    for e in summary:
        groups[e["cluster"], e["batch"], e["regime"]].append(e)
    for (cl, b, regime), es in sorted(groups.items(), key=lambda kv: (kv[0][0], -kv[0][1], kv[0][2] != "steady")):
        out += [f"## {cl}, batch {b}: {regime}", "", *_table(es), ""]
    if goodput:
        out += ["## Goodput (x capacity at which >= 90% attain; min–max over seeds)", "",
                "| cluster | batch | arm | all | short | long | all x base | short x base |", "|---|---|---|---|---|---|---|---|"]
        for e in goodput:
            gp = [_r(e[c]) + (" (>= cap in " + str(e[f"{c} at cap"]) + ")" if e[f"{c} at cap"] else "")
                  for c in ("all", "short", "long")]
            out.append(f"| {e['cluster']} | {e['batch']} | {e['arm']} | {' | '.join(gp)} | "
                       f"{_r(e['all vs base'], '{:.3f}')} | {_r(e['short vs base'], '{:.3f}')} |")
        out.append("")
    return "\n".join(out)


def write_report(jl: Path, out: Path, baseline: str) -> list[Path]:
    rows = read_cells(jl, partial=True)
    out.mkdir(parents=True, exist_ok=True)
    summary, goodput = summarize(rows, baseline), goodput_summary(rows, baseline)
    js, md = out / "yardstick.json", out / "yardstick.md"
    for path, text in ((js, json.dumps({"baseline": baseline, "summary": summary, "goodput": goodput,
                                        "cells": rows}, indent=1) + "\n"),
                       (md, markdown(summary, goodput, rows, baseline) + "\n")):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return [js, md]
