"""The scheduling part of "What the predictions are worth": the yardstick's five arms per regime group
(:mod:`lenpred.report.yardstick`), each against the best prediction-free arm of its cell and seed, one
Pareto figure and one compact table each.

The full tables (every arm, every cell) stay in docs/yardstick/ and docs/policies/; the page names them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lenpred.report.page.model import Figure, figure_from_pyplot
from lenpred.report.table import Column, Table
from lenpred.report.yardstick import (
    BASELINE,
    GOAL_SHORT,
    MAKE_COMMAND,
    MAX_OVERALL,
    NEVER_WORSE,
    REFERENCE,
    Group,
    Span,
    default_arm,
)

__all__ = ["FULL_TABLES", "pareto_figure", "yardstick_parts", "yardstick_paragraphs"]

FULL_TABLES = ("docs/yardstick/steady/yardstick.md", "docs/yardstick/yardstick.md", "docs/yardstick/pareto.md",
               "docs/policies/README.md")
# role -> (marker, colour, size, legend prefix)
STYLE = {
    "best prediction-free": ("^", "tab:purple", 11, "reference"),
    "FCFS + RR": ("s", "tab:gray", 9, "FCFS + RR"),
    "default": ("o", "tab:blue", 9, "default"),
    "best real predictor": ("D", "tab:orange", 8, "best real predictor"),
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
    """One matplotlib figure: each chosen arm at (overall P99, short P99) / the best prediction-free arm, median
    over the group's pairs with min-max whiskers; a dashed line at the overall constraint, a dotted one at the
    goal's short P99. Legend: one entry per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 5.6))
    xs = [MAX_OVERALL]
    for p in group.picks:
        marker, color, size, prefix = STYLE[p.role]
        s = p.stats
        hollow = p.role in ("best prediction-free", "FCFS + RR")
        ax.errorbar([s.overall_p99.median], [s.short_p99.median], xerr=_err(s.overall_p99), yerr=_err(s.short_p99),
                    fmt=marker, ms=size, color=color, mfc="none" if hollow else color, mew=1.6, capsize=3, lw=1.2,
                    label=f"{prefix}{'' if p.strict else f' ({s.n_within}/{s.pairs} within)'}: "
                          f"{'best of the /- arms' if s.arm == REFERENCE else pretty(s.arm)}")
        xs += [s.overall_p99.lo, s.overall_p99.hi]
    ax.axvline(MAX_OVERALL, color="k", ls="--", lw=1)
    ax.axhline(GOAL_SHORT, color="k", ls=":", lw=1)
    ax.text(MAX_OVERALL, 1.0, f" overall {MAX_OVERALL:g}x", transform=ax.get_xaxis_transform(), va="top", ha="left",
            fontsize=8)
    if max(xs) / max(min(xs), 1e-9) > 3:
        ax.set_xscale("log")
    ax.set_xlabel("overall P99 / best prediction-free arm (median, min-max)")
    ax.set_ylabel("short-request P99 / best prediction-free arm")
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
    cols = [Column("arm", "left"), Column("policy/predictor", "left"), Column("short P99 / best free"),
            Column("overall P99 / best free")]
    cols += [Column("short P50 / best free")] if has_p50 else []
    cols += [Column("SLO attainment %")] if has_slo else []
    cols += [Column(f"goal (<= {GOAL_SHORT:g}x short) / never worse (<= {NEVER_WORSE:g}x)"), Column("pairs (seeds)")]
    rows = []
    for p in group.picks:
        s = p.stats
        role = p.role if p.strict else f"{p.role} (within {MAX_OVERALL:g}x in {s.n_within} of {s.pairs})"
        row = [role, s.arm, _span(s.short_p99), _span(s.overall_p99)]
        row += [_span(s.short_p50)] if has_p50 else []
        row += [_span(s.attain, ".1f", 100.0)] if has_slo else []
        row += [f"{s.n_goal} / {s.n_never_worse}", f"{s.pairs} ({group.seeds})"]
        rows.append(tuple(row))
    title = (f"Yardstick, {group.label}: ratios to the best prediction-free arm in the same cell and seed, median "
             f"(min-max) over {group.pairs} pairs ({', '.join(group.places)})")
    refs = ", ".join(f"{a} in {n}" for a, n in group.references)
    notes = [*(f"Note: {n}." for n in group.notes)] + ([f"The best prediction-free arm was {refs}."] if refs else [])
    return Table(title, tuple(cols), tuple(rows), notes=tuple(notes))


def _caption(group: Group) -> str:
    refs = ", ".join(f"{a} ({n})" for a, n in group.references) or "-"
    return (f"Yardstick, {group.label}: short-request against overall P99, each a ratio to the best prediction-free "
            f"arm of the same cell and seed, median over {group.pairs} cell-seed pairs with min-max whiskers; dashed: "
            f"overall {MAX_OVERALL:g}x; dotted: the short-P99 goal {GOAL_SHORT:g}x. The reference was: {refs}.")


def yardstick_paragraphs(groups: Sequence[Group], paths: Sequence[str]) -> list[str]:
    """What the figures show and how the arms were chosen; or, without results, what to run."""
    if not groups:
        return [f"No scheduling yardstick results were found (docs/yardstick/*-cells.jsonl, or --yardstick). "
                f"Make them with: {MAKE_COMMAND}."]
    arms = {a for g in groups for p in g.picks for a in (p.stats.arm,)}
    default, own = default_arm(arms)
    why = (f"the recommended policy and the router's default, {default} (lenpred.sched.recommended: late binding, "
           "no prediction)" if own else f"the recommended policy {default} (late binding, no prediction) was not run "
           "in these rows")
    return [
        "Scheduling on the yardstick (issues 30 and 37, docs/yardstick/README.md): per regime group, five arms, each "
        "at its overall P99 and its short-request P99 as ratios to the best prediction-free arm of the same cell "
        "and seed (of the arms with no predictor that are stable there, those with an overall P99 within "
        f"{MAX_OVERALL:g}x of the lowest; of those the lowest short P99: join-shortest-queue, late binding, "
        f"power of two, least observed load or KV, ...). {BASELINE} stays as a reference column; the default: "
        f"{why}; the best real-predictor arm (mlp, samples or outlets; smallest median short-P99 ratio among arms "
        f"whose overall P99 stays within {MAX_OVERALL:g}x the reference's in every pair); and the true-length "
        f"ceiling (the best /true arm under the same overall constraint). 'goal' counts the pairs where an arm "
        f"cuts the short P99 to <= {GOAL_SHORT:g}x within that constraint, 'never worse' those where both P99s "
        f"are <= {NEVER_WORSE:g}x.",
        "Every arm, every cell and the per-seed goal are in the full tables: " + ", ".join(FULL_TABLES) + ".",
    ]


def yardstick_parts(groups: Sequence[Group]) -> tuple[list[Table], list[Figure]]:
    tables = [group_table(g) for g in groups]
    figures = [figure_from_pyplot(pareto_figure(g), f"yardstick_{g.slug}.png", _caption(g)) for g in groups]
    return tables, figures
