"""The scheduling part of "What the predictions are worth": the yardstick's five arms per regime group
(:mod:`lenpred.report.yardstick`), one Pareto figure and one compact table each.

The full tables (every arm, every cell) stay in docs/yardstick/ and docs/policies/; the page names them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lenpred.report.page.model import Figure, figure_from_pyplot
from lenpred.report.table import Column, Table
from lenpred.report.yardstick import BASELINE, MAKE_COMMAND, MAX_OVERALL, Group, Span, default_arm

__all__ = ["FULL_TABLES", "pareto_figure", "yardstick_parts", "yardstick_paragraphs"]

FULL_TABLES = ("docs/yardstick/steady/yardstick.md", "docs/yardstick/yardstick.md", "docs/yardstick/pareto.md",
               "docs/policies/README.md")
# role -> (marker, colour, size, legend prefix)
STYLE = {
    "baseline": ("s", "tab:gray", 11, "FCFS + RR"),
    "default": ("o", "tab:blue", 9, "default"),
    "best real predictor": ("D", "tab:orange", 8, "best real predictor"),
    "prediction-free": ("^", "tab:purple", 7, "prediction-free"),
    "true-length ceiling": ("*", "tab:green", 13, "true-length ceiling"),
}


def pretty(arm: str) -> str:
    """An arm's name, shorter: ``boost2 boost_s10 short_threshold224/mlp`` -> ``boost2 B=10s thr=224/mlp``."""
    pol, _, pred = arm.rpartition("/")
    words = []
    for w in pol.split():
        if w.startswith("boost_s"):
            w = f"B={w[len('boost_s'):]}s"
        elif w.startswith("short_threshold"):
            w = f"thr={w[len('short_threshold'):]}"
        words.append(w)
    return f"{' '.join(words)}/{pred}"


def _err(s: Span) -> list[list[float]]:
    return [[s.median - s.lo], [s.hi - s.median]]


def pareto_figure(group: Group) -> Any:
    """One matplotlib figure: each chosen arm at (overall P99, short P99) / FCFS + RR, median over the
    group's pairs with min-max whiskers; a dashed line at the overall constraint. Legend: one entry per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 5.6))
    xs = [MAX_OVERALL]
    for p in group.picks:
        marker, color, size, prefix = STYLE[p.role]
        s = p.stats
        hollow = p.role == "baseline"
        ax.errorbar([s.overall_p99.median], [s.short_p99.median], xerr=_err(s.overall_p99), yerr=_err(s.short_p99),
                    fmt=marker, ms=size, color=color, mfc="none" if hollow else color, mew=1.6, capsize=3, lw=1.2,
                    label=f"{prefix}{'' if p.strict else f' ({s.n_within}/{s.pairs} within)'}: {pretty(s.arm)}")
        xs += [s.overall_p99.lo, s.overall_p99.hi]
    ax.axvline(MAX_OVERALL, color="k", ls="--", lw=1)
    ax.text(MAX_OVERALL, 1.0, f" overall {MAX_OVERALL:g}x", transform=ax.get_xaxis_transform(), va="top", ha="left",
            fontsize=8)
    if max(xs) / max(min(xs), 1e-9) > 3:
        ax.set_xscale("log")
    ax.set_xlabel("overall P99 / FCFS + RR (median, min-max)")
    ax.set_ylabel("short-request P99 / FCFS + RR")
    ax.set_title(f"{group.label}: {group.pairs} cell-seed pairs", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    return fig


def _span(s: Span | None, spec: str = ".2f", scale: float = 1.0) -> str:
    if s is None:
        return "-"
    return f"{scale * s.median:{spec}} ({scale * s.lo:{spec}}-{scale * s.hi:{spec}})"


def group_table(group: Group) -> Table:
    has_p50 = any(p.stats.short_p50 is not None for p in group.picks)
    has_slo = any(p.stats.attain is not None for p in group.picks)
    cols = [Column("arm", "left"), Column("policy/predictor", "left"), Column("short P99 / FCFS"),
            Column("overall P99 / FCFS")]
    cols += [Column("short P50 / FCFS")] if has_p50 else []
    cols += [Column("SLO attainment %")] if has_slo else []
    cols += [Column("pairs (seeds)")]
    rows = []
    for p in group.picks:
        s = p.stats
        role = p.role if p.strict else f"{p.role} (within {MAX_OVERALL:g}x in {s.n_within} of {s.pairs})"
        row = [role, s.arm, _span(s.short_p99), _span(s.overall_p99)]
        row += [_span(s.short_p50)] if has_p50 else []
        row += [_span(s.attain, ".1f", 100.0)] if has_slo else []
        row.append(f"{s.pairs} ({group.seeds})")
        rows.append(tuple(row))
    title = (f"Yardstick, {group.label}: ratios to FCFS + RR in the same cell and seed, median (min-max) over "
             f"{group.pairs} pairs ({', '.join(group.places)})")
    return Table(title, tuple(cols), tuple(rows), notes=tuple(f"Note: {n}." for n in group.notes))


def _caption(group: Group) -> str:
    free = next((p.stats.arm for p in group.picks if p.role == "prediction-free"), None)
    return (f"Yardstick, {group.label}: short-request against overall P99, each a ratio to FCFS + RR, median "
            f"over {group.pairs} cell-seed pairs with min-max whiskers; dashed: overall {MAX_OVERALL:g}x. "
            f"Prediction-free arm: {free or 'none (every one diverges)'}.")


def yardstick_paragraphs(groups: Sequence[Group], paths: Sequence[str]) -> list[str]:
    """What the figures show and how the arms were chosen; or, without results, what to run."""
    if not groups:
        return [f"No scheduling yardstick results were found (docs/yardstick/*-cells.jsonl, or --yardstick). "
                f"Make them with: {MAKE_COMMAND}."]
    arms = {p.stats.arm for g in groups for p in g.picks}
    default, own = default_arm(arms)
    why = ("the router's default (lenpred.sched.recommended)" if own else
           "the router's default (lenpred.sched.recommended: an FCFS queue with least-predicted-tokens dispatch) is "
           f"not a yardstick arm, so gamma-Boost on the prefill head, {default} (the router's priority.queue gboost, "
           "which docs/yardstick/README.md recommends), stands in for it")
    return [
        "Scheduling on the yardstick (issue 30, docs/yardstick/README.md): per regime group, five arms, each "
        f"at its overall P99 and its short-request P99 as ratios to {BASELINE} in the same cell and seed. The "
        f"baseline {BASELINE}; the default: {why}; the best real-predictor arm (mlp, samples or outlets; "
        f"smallest median short-P99 ratio among arms whose overall P99 stays within {MAX_OVERALL:g}x FCFS + RR in "
        f"every pair); the prediction-free arm (uniboost or mlfq, whichever does not diverge); and the "
        "true-length ceiling (the best /true arm under the same overall constraint).",
        "Every arm, every cell and the per-seed goal are in the full tables: " + ", ".join(FULL_TABLES) + ".",
    ]


def yardstick_parts(groups: Sequence[Group]) -> tuple[list[Table], list[Figure]]:
    tables = [group_table(g) for g in groups]
    figures = [figure_from_pyplot(pareto_figure(g), f"yardstick_{g.slug}.png", _caption(g)) for g in groups]
    return tables, figures
