"""Overload episodes, read as the issue's goal asks: per information level, the best short-request P99
an arm reaches while its overall P99 stays within 1.05x FCFS + round robin's (same cell and seed).

Levels, from an arm's predictor (``POLICY/PREDICTOR`` in WORK/cells.jsonl): ``none`` (``-``: FCFS,
MLFQ, UniBoost), ``prompt`` (the prefill heads ``mlp`` / ``proxy``, the prompt's other samples
``samples`` / ``prompt-median``), ``trajectory`` (``outlets``: OUTLETS re-predictions), ``true``.
Per cell and seed: each level's best arm (smallest short-P99 ratio among arms within the overall
constraint; FCFS + round robin itself, ratio 1, is always allowed), and the share of the true sizes'
cut the best real-predictor arm (prompt or trajectory) recovers, ``(1 - best real) / (1 - best true)``.
The goal (issue 30): >= 50% in every episode and seed, with the short P50 down >= 30%.

    .venv/bin/python -m benchmarks.report.yardstick_pareto --work out/yardstick-ep --out docs/yardstick
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lenpred.report.yardstick import BASELINE, MAX_OVERALL, read_cells  # the page applies the same constraint

LEVELS = {"-": "none", "mlp": "prompt", "proxy": "prompt", "samples": "prompt", "prompt-median": "prompt",
          "outlets": "trajectory", "true": "true"}
ORDER = ("none", "prompt", "trajectory", "true")
COLORS = {"none": "tab:gray", "prompt": "tab:blue", "trajectory": "tab:orange", "true": "tab:green"}
GOAL_SHARE, GOAL_P50 = 0.5, 0.7


def level(arm: str) -> str:
    return LEVELS.get(arm.rsplit("/", 1)[-1], "prompt")


def ratios(row: dict[str, Any]) -> dict[str, tuple[float, float, float]]:
    """arm -> (short P99, overall P99, short P50), each x FCFS + round robin in this cell and seed."""
    base = row["arms"][BASELINE]
    return {k: (v["short_p99_s"] / base["short_p99_s"], v["p99_s"] / base["p99_s"],
                v["short_p50_s"] / base["short_p50_s"]) for k, v in row["arms"].items()}


def best(r: dict[str, tuple[float, float, float]], levels: Sequence[str]) -> tuple[str, tuple[float, float, float]]:
    """The arm of these levels with the smallest short-P99 ratio within the overall constraint."""
    ok = [(v, k) for k, v in r.items() if level(k) in levels and v[1] <= MAX_OVERALL]
    ok.append(((1.0, 1.0, 1.0), BASELINE))
    v, k = min(ok)
    return k, v


def cell_summary(row: dict[str, Any]) -> dict[str, Any]:
    r = ratios(row)
    out: dict[str, Any] = {lv: dict(zip(("arm", "ratios"), best(r, (lv,)), strict=True)) for lv in ORDER}
    real_arm, real = best(r, ("prompt", "trajectory"))
    true_cut = 1.0 - out["true"]["ratios"][0]
    out["real"] = {"arm": real_arm, "ratios": real}
    out["share"] = (1.0 - real[0]) / true_cut if true_cut > 0 else None
    out["goal"] = out["share"] is not None and out["share"] >= GOAL_SHARE and real[2] <= GOAL_P50
    return out


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """(cluster, batch, episode, arrival) -> one summary per seed."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        c = row["cell"]
        if c["regime"] != "episode":
            continue
        key = f"{c['cluster']}|b{c['batch']}|{c['where']}|{c['arrival']}"
        groups[key].append({"seed": c["seed"], **cell_summary(row)})
    return dict(sorted(groups.items()))


def _mm(xs: Sequence[float]) -> str:
    return f"{min(xs):.2f}" if max(xs) - min(xs) < 0.005 else f"{min(xs):.2f}-{max(xs):.2f}"


def markdown(groups: dict[str, list[dict[str, Any]]]) -> str:
    lines = ["# Overload episodes: what each information level buys at overall P99 <= 1.05x FCFS + RR", "",
             f"Per cell, min-max over seeds of the best arm's short-request P99 / FCFS + RR's, at each information "
             f"level, among arms whose overall P99 stays <= {MAX_OVERALL}x; `share`: the part of the true sizes' cut the "
             "best real-predictor arm (prompt or trajectory) recovers; `goal`: seeds where it is >= 50% with the "
             "short P50 down >= 30%.", "",
             "| cluster, batch | episode | seeds | none | prompt | trajectory | true | share | short P50 (best real) | goal | best real arms |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, seeds in groups.items():
        cl, b, ep, arr = key.split("|")
        cols = [_mm([s[lv]["ratios"][0] for s in seeds]) for lv in ORDER]
        shares = [s["share"] for s in seeds if s["share"] is not None]
        share = _mm(shares) if shares else "n/a (no true cut)"
        p50 = _mm([s["real"]["ratios"][2] for s in seeds])
        goal = f"{sum(s['goal'] for s in seeds)}/{len(seeds)}"
        arms = ", ".join(sorted({s["real"]["arm"] for s in seeds}))
        lines.append(f"| {cl}, {b} | {ep} {arr} | {len(seeds)} | " + " | ".join(cols)
                     + f" | {share} | {p50} | {goal} | {arms} |")
    return "\n".join(lines) + "\n"


def plot(rows: Sequence[dict[str, Any]], dest: Path) -> list[Path]:
    """One figure per (cluster, batch): a panel per episode, every arm's mean (overall P99, short P99)
    ratio over seeds, coloured by information level, with each level's frontier."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by: dict[tuple[str, int], dict[str, dict[str, list[tuple[float, float]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list)))
    for row in rows:
        c = row["cell"]
        if c["regime"] == "episode":
            for arm, v in ratios(row).items():
                by[c["cluster"], c["batch"]][f"{c['where']} {c['arrival']}"][arm].append((v[1], v[0]))
    out = []
    for (cl, b), eps in sorted(by.items()):
        fig, axes = plt.subplots(2, (len(eps) + 1) // 2, figsize=(4.2 * ((len(eps) + 1) // 2), 7.5), squeeze=False)
        for ax, (ep, arms) in zip(axes.flat, sorted(eps.items()), strict=False):
            for lv in ORDER:
                pts = sorted((sum(x for x, _ in v) / len(v), sum(y for _, y in v) / len(v))
                             for k, v in arms.items() if level(k) == lv)
                if not pts:
                    continue
                ax.scatter(*zip(*pts, strict=True), s=14, color=COLORS[lv], label=lv)
                front, low = [], float("inf")
                for x, y in pts:
                    if y < low:
                        front.append((x, y))
                        low = y
                ax.step(*zip(*front, strict=True), where="post", color=COLORS[lv], lw=1)
            ax.axvline(MAX_OVERALL, color="k", ls=":", lw=0.8)
            ax.set(title=ep, xlabel="overall P99 / FCFS+RR", ylabel="short P99 / FCFS+RR", xlim=(0.9, 1.6), ylim=(0, 1.6))
            ax.grid(alpha=0.3)
        for ax in axes.flat[len(eps):]:
            ax.axis("off")
        axes.flat[0].legend(fontsize=8)
        fig.suptitle(f"Overload episodes, {cl}, batch {b} (mean over seeds)")
        fig.tight_layout()
        p = dest / f"pareto_{cl.replace('+', 'p')}_b{b}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        out.append(p)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="out/yardstick-ep", help="the folder holding cells.jsonl")
    ap.add_argument("--out", default="docs/yardstick", help="pareto.md, pareto.json and the figures")
    a = ap.parse_args(argv)
    rows = [r for r in read_cells(Path(a.work) / "cells.jsonl", partial=True) if BASELINE in r.get("arms", {})]
    if not rows:
        print(f"yardstick_pareto: error: no episode cells in {a.work}/cells.jsonl -- fix: run "
              "python -m benchmarks.bench_yardstick --regimes episode first", file=sys.stderr)
        return 1
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    groups = summarize(rows)
    (out / "pareto.json").write_text(json.dumps(groups, indent=1) + "\n")
    (out / "pareto.md").write_text(markdown(groups))
    for p in [out / "pareto.json", out / "pareto.md", *plot(rows, out)]:
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
