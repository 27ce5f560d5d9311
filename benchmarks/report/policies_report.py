"""The report of the policy study (benchmarks/bench_policies.py): ``policies.json``, ``policies.md`` (per
workload and arrival tables, the "never worse than FCFS" matrix, the goals and the recommended default),
``p99_vs_load_{arrival}.png`` and ``pareto.png``, all from the cells' JSONL rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

ARRIVALS = ("poisson", "bursty")
BASELINE = ("fcfs+rr", "-")


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The cells of a JSONL file (a line cut by a kill is skipped: that cell runs again)."""
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return [r for r in rows if "policy" in r]


SCHEMA = ("policy", "predictor", "arrival", "workload", "seed", "load", "short_p99_s", "short_p50_s", "p99_s",
          "mean_e2e_s", "ttft_p99_s", "max_wait_s", "preemptions_per_req", "starved")
GOAL_LOADS = (1.1, 1.2)
XLIM, YLIM = (-5.0, 120.0), (-80.0, 60.0)  # the Pareto plot's window, in %
FIGURE_ARMS = [("fcfs+lpt", "mlp"), ("las", "-"), ("mlfq", "-"), ("sjf", "mlp"), ("sjf aging100", "mlp"), ("sjf aging1000", "mlp"),
               ("hrrn", "mlp"), ("gittins", "mlp"), ("gittins aging100", "samples"), ("gittins np", "samples"),
               ("sjf", "true")]


def verdict(row: dict[str, Any], base: dict[str, Any]) -> str:
    """'' when a cell meets "never backfires" against its FCFS + RR cell, else the first failed test:
    s (short P99 > 1.02x), o (overall P99 > 1.10x up to 1.0x load, > 1.25x above), w (longest wait > 2x)."""
    if row["short_p99_s"] > 1.02 * base["short_p99_s"]:
        return "s"
    if row["p99_s"] > (1.10 if row["load"] <= 1.0 else 1.25) * base["p99_s"]:
        return "o"
    if row["max_wait_s"] > 2.0 * base["max_wait_s"]:
        return "w"
    return ""


def with_baseline(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    base = {(r["arrival"], r["workload"], r["seed"], r["load"]): r for r in rows
            if (r["policy"], r["predictor"]) == BASELINE}
    out = []
    for r in rows:
        b = base.get((r["arrival"], r["workload"], r["seed"], r["load"]))
        if b is not None:
            out.append((r, b))
    return out


def summary(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per arm: failed cells (and which), mean changes at each (workload, arrival, load) over seeds."""
    arms_: dict[tuple[str, str], dict[str, Any]] = {}
    for r, b in with_baseline(rows):
        a = arms_.setdefault((r["policy"], r["predictor"]), {"cells": 0, "fails": {}, "by": {}})
        a["cells"] += 1
        v = verdict(r, b)
        cell = (r["workload"], r["arrival"], r["load"])
        if v:
            a["fails"].setdefault(cell, set()).add(v)
        acc = a["by"].setdefault(cell, [])
        acc.append((r["short_p99_s"] / b["short_p99_s"] - 1, r["p99_s"] / b["p99_s"] - 1,
                    r["max_wait_s"] / b["max_wait_s"], r["preemptions_per_req"]))
    for a in arms_.values():
        a["mean"] = {c: tuple(float(np.mean([x[i] for x in v])) for i in range(4)) for c, v in a["by"].items()}
    return arms_


def gain(a: dict[str, Any], workload: str = "sharegpt", arrival: str = "poisson") -> float | None:
    """Mean short-P99 change at the goal loads (1.1x and 1.2x) on one workload and arrival process."""
    v = [a["mean"][(workload, arrival, x)][0] for x in GOAL_LOADS if (workload, arrival, x) in a["mean"]]
    return float(np.mean(v)) if v else None


def recommend(sm: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    """The policy to use when predictions are present: among policies run with both prefill heads, the
    one whose cells with every head (and on every workload) never backfire, best by its mean short-P99
    gain with the best head at 1.1-1.2x (Poisson, ShareGPT); else the one with the fewest failed cells."""
    pols = sorted({p for p, h in sm if h in ("mlp", "proxy")})
    cand = []
    for p in pols:
        mine = [v for (q, h), v in sm.items() if q == p and h in ("mlp", "proxy")]
        fails = sum(len(v["fails"]) for v in mine)
        best = min((g for v in mine if (g := gain(v)) is not None), default=0.0)
        cand.append({"policy": p, "failed_cells": fails, "cells": sum(v["cells"] for v in mine), "gain": best})
    cand.sort(key=lambda c: (c["failed_cells"] > 0, c["failed_cells"] / max(c["cells"], 1), c["gain"]))
    return {"choice": cand[0] if cand else None, "candidates": cand}


def fmt(x: float | None, pct: bool = True) -> str:
    return "-" if x is None else (f"{100 * x:+.1f}%" if pct else f"{x:.2f}")


def md_report(rows: list[dict[str, Any]], sm: dict[tuple[str, str], dict[str, Any]], rec: dict[str, Any]) -> str:
    loads = sorted({r["load"] for r in rows})
    wls = [w for w in ("sharegpt", "outlets", "alpaca") if any(r["workload"] == w for r in rows)]
    arrs = [x for x in ARRIVALS if any(r["arrival"] == x for r in rows)]
    seeds = sorted({r["seed"] for r in rows})
    out = ["# Scheduling that never backfires: the policy study", "",
           f"{len(rows)} cells: workloads {', '.join(wls)}; arrivals {', '.join(arrs)}; seeds "
           f"{', '.join(map(str, seeds))}; loads {', '.join(f'{x:g}' for x in loads)} x measured capacity. "
           "Changes are against FCFS + round robin in the same cell, averaged over seeds.", ""]
    for w in wls:
        for arr in arrs:
            out += [f"## {w}, {arr}: short-request P99 change (overall P99 change) by load", "",
                    "| policy | predictor | " + " | ".join(f"{x:g}x" for x in loads) + " | failed cells |",
                    "|---|---|" + "---:|" * (len(loads) + 1)]
            for (p, h), a in sm.items():
                if not any(c[0] == w and c[1] == arr for c in a["mean"]):
                    continue
                cells_ = [f"{fmt(m[0])} ({fmt(m[1])})" if (m := a["mean"].get((w, arr, x))) else "-" for x in loads]
                nf = sum(1 for c in a["fails"] if c[0] == w and c[1] == arr)
                out.append(f"| {p} | {h} | " + " | ".join(cells_) + f" | {nf} |")
            out.append("")
    out += matrix_md(sm, wls, arrs, loads)
    out += goals_md(sm, rec)
    return "\n".join(out) + "\n"


def matrix_md(sm: dict[tuple[str, str], dict[str, Any]], wls: list[str], arrs: list[str], loads: list[float]
              ) -> list[str]:
    cols = [(w, a) for w in wls for a in arrs]
    out = ["## Never worse than FCFS + RR (every seed)", "",
           "One character per load (" + ", ".join(f"{x:g}x" for x in loads) + "): `.` meets all three tests in "
           "every seed; `s` short-request P99 above 1.02x FCFS's, `o` overall P99 above 1.10x (<= 1.0x load) or "
           "1.25x (above), `w` a wait longer than 2x FCFS's longest, in some seed; blank: not run.", "",
           "| policy | predictor | " + " | ".join(f"{w} {a}" for w, a in cols) + " |",
           "|---|---|" + "---|" * len(cols)]
    for (p, h), a in sm.items():
        if (p, h) == BASELINE:
            continue
        cells_ = []
        for w, arr in cols:
            chars = []
            for x in loads:
                c = (w, arr, x)
                chars.append(" " if c not in a["mean"] else (sorted(a["fails"][c])[0] if c in a["fails"] else "."))
            cells_.append("`" + "".join(chars) + "`")
        out.append(f"| {p} | {h} | " + " | ".join(cells_) + " |")
    return out + [""]


def goals_md(sm: dict[tuple[str, str], dict[str, Any]], rec: dict[str, Any]) -> list[str]:
    free = {p: gain(a) for (p, h), a in sm.items() if h == "-" and (p, h) != BASELINE}
    never = sorted(f"{p} / {h}" for (p, h), a in sm.items() if not a["fails"] and (p, h) != BASELINE)
    out = ["## Goals", "", "Mean short-request P99 change at 1.1x and 1.2x (Poisson, ShareGPT, over seeds):", "",
           "| policy | predictor | gain | failed cells |", "|---|---|---:|---:|"]
    for (p, h), a in sorted(sm.items(), key=lambda kv: (gain(kv[1]) if gain(kv[1]) is not None else 9.0)):
        if gain(a) is not None:
            out.append(f"| {p} | {h} | {fmt(gain(a))} | {len(a['fails'])} of {a['cells']} |")
    c = rec["choice"]
    out += ["", f"Never backfire in every cell they ran: {', '.join(never) or 'none'}.", "",
            "Prediction-free: " + ", ".join(f"{p} {fmt(g)}" for p, g in free.items()) + ".", ""]
    if c:
        p = c["policy"]
        heads = {h: gain(a) for (q, h), a in sm.items() if q == p and h in ("mlp", "proxy")}
        outl = {q: gain(a, "outlets") for (q, h), a in sm.items() if h == "outlets"}
        best_free = min((g for g in free.values() if g is not None), default=None)
        out += [f"**Recommended default: `{p}`** ({c['failed_cells']} failed cells of {c['cells']} with the prefill "
                "heads, every workload and arrival).", "",
                "| goal | target | measured | met |", "|---|---|---:|---|",
                f"| never backfires | 0 failed cells | {c['failed_cells']} of {c['cells']} | "
                f"{'yes' if c['failed_cells'] == 0 else 'no'} |"]
        g = min((x for x in heads.values() if x is not None), default=None)
        out.append(f"| worth deploying: best prefill head, 1.1-1.2x | <= -40% | {fmt(g)} | "
                   f"{'yes' if g is not None and g <= -0.40 else 'no'} |")
        go = min((x for x in outl.values() if x is not None), default=None)
        who = min(outl, key=lambda q: outl[q] if outl[q] is not None else 9.0) if outl else "-"
        out.append(f"| worth deploying: OUTLETS re-predictions (best policy: {who}), 1.1-1.2x | <= -50% | {fmt(go)} | "
                   f"{'yes' if go is not None and go <= -0.50 else 'no'} |")
        out.append(f"| ahead of the best prediction-free policy | a margin | {fmt(g)} vs {fmt(best_free)} | "
                   f"{'yes' if g is not None and best_free is not None and g < best_free else 'no'} |")
    return out + [""]


def figures(rows: list[dict[str, Any]], sm: dict[tuple[str, str], dict[str, Any]], out: Path, pick: list[tuple[str, str]]
            ) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    loads = sorted({r["load"] for r in rows})
    for arr in ARRIVALS:
        sel = [r for r in rows if r["arrival"] == arr and r["workload"] == "sharegpt"]
        if not sel:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(13, 5))
        colors = plt.get_cmap("tab20").colors
        for i, arm in enumerate([BASELINE, *pick]):
            for ax, m in zip(axes, ("short_p99_s", "p99_s"), strict=True):
                ys = [np.mean([r[m] for r in sel if (r["policy"], r["predictor"]) == arm and r["load"] == x] or [np.nan])
                      for x in loads]
                ax.plot(loads, ys, marker="o", ms=3, label=f"{arm[0]} / {arm[1]}", color="k" if i == 0 else colors[i],
                        lw=2.5 if arm == BASELINE else 1.2)
        for ax, t in zip(axes, ("short requests", "all requests"), strict=True):
            ax.set_xlabel("load (x measured capacity)")
            ax.set_ylabel("P99 end-to-end latency (s)")
            ax.set_yscale("log")
            ax.set_title(f"{t}: ShareGPT, {arr} (mean of seeds)", fontsize=10)
            ax.grid(alpha=0.3)
        axes[1].legend(fontsize=7, loc="upper left")
        fig.tight_layout()
        paths.append(out / f"p99_vs_load_{arr}.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    fig, axes = plt.subplots(1, len(GOAL_LOADS), figsize=(13, 5))
    for ax, x in zip(np.atleast_1d(axes), GOAL_LOADS, strict=True):
        for (p, h), a in sm.items():
            m = a["mean"].get(("sharegpt", "poisson", x))
            if m is None or (p, h) == BASELINE:
                continue
            x0, y0 = 100 * m[1], 100 * m[0]
            xc, yc = min(max(x0, XLIM[0]), XLIM[1]), min(max(y0, YLIM[0]), YLIM[1])
            ok = not a["fails"]
            ax.scatter(xc, yc, s=26 if ok else 16, marker="o" if (xc, yc) == (x0, y0) else "^",
                       color="tab:green" if ok else "tab:red", zorder=3 if ok else 2)
            if ok or abs(x0) > 4 or abs(y0) > 4:
                ax.annotate(f"{p}/{h}", (xc, yc), fontsize=6)
        ax.axhline(0, color="k", lw=0.8)
        ax.axvline(0, color="k", lw=0.8)
        ax.set_xlim(XLIM[0] - 2, XLIM[1] + 2)
        ax.set_ylim(YLIM[0] - 2, YLIM[1] + 2)
        ax.set_xlabel("overall P99 change vs FCFS+RR (%; triangles: off the scale, drawn at its edge)")
        ax.set_ylabel("short-request P99 change vs FCFS+RR (%)")
        ax.set_title(f"{x:g}x, Poisson, ShareGPT (green: never backfires anywhere)", fontsize=10)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    paths.append(out / "pareto.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def write_report(jl: Path, out: Path) -> list[Path]:
    from lenpred.errors import DataError

    if not jl.is_file():
        raise DataError(f"no study results at {jl}", "run the study first (without --report-only)")
    rows = read_rows(jl)
    out.mkdir(parents=True, exist_ok=True)
    rows.sort(key=lambda r: tuple(str(r[k]) if isinstance(r[k], str) else r[k] for k in ("workload", "arrival", "seed",
                                                                                        "load", "policy", "predictor")))
    sm = summary(rows)
    rec = recommend(sm)
    (out / "policies.json").write_text(json.dumps(
        {"schema": list(SCHEMA), "recommended": rec, "rows": [{k: r[k] for k in SCHEMA} | {
            "dispatch": r.get("dispatch"), "n_requests": r.get("n_requests"), "rate_rps": r.get("rate_rps")}
            for r in rows]}, indent=1) + "\n")
    (out / "policies.md").write_text(md_report(rows, sm, rec))
    pick = [k for k in FIGURE_ARMS if k in sm]
    return [out / "policies.json", out / "policies.md", *figures(rows, sm, out, pick)]
