"""Sections of the report page about serving: OUTLETS along the answer, and what the predictions are
worth to a scheduler (P99 latency against load, per policy).

OUTLETS figures come from :mod:`lenpred.report.outlets` (the plots ``lenpred outlets bench`` draws),
the simulator's from :mod:`lenpred.report.sim_plots`; the policies table (rows from the policy
study) is drawn here, one line per policy and predictor.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lenpred.io.artifacts import Artifact
from lenpred.outlets.evaluate import OutletsBench
from lenpred.report.page.inputs import LoadedSim, outlets_command
from lenpred.report.page.model import Figure, Section, figure_from_pyplot, figures_from_writer
from lenpred.report.page.sections import TITLES
from lenpred.report.table import Column, Table

__all__ = ["outlets_section", "value_section"]

OUTLETS_PLOTS = {
    "outlets_mae_progress.png": "Remaining-length MAE by progress through the answer; the grey band is the "
                                "carried per-prompt oracle",
    "outlets_mae_tokens.png": "Remaining-length MAE by tokens generated (samples longer than that)",
    "outlets_coverage.png": "Share of trajectory rows inside each method's 80% interval, by progress",
}


def _f(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def outlets_section(art: Artifact, res: OutletsBench) -> Section:
    from lenpred.report.outlets import mae_rows, write_plots

    p = res.protocol
    lab = {pt.id: pt.label for pt in res.points}
    ids = res.series.get("progress", [])
    sec = Section("outlets", TITLES["outlets"], commands=[outlets_command(art)], sources=[str(art.path)])
    sec.paragraphs = [
        "A small head on the EAGLE-3 draft decoder's state re-predicts the remaining length at every decoding "
        "cycle; a prefill prediction is carried along the answer by conditioning on survival.",
        f"run {p.run} (card {p.card_hash}); trajectory {p.trajectory}; test: {p.test_prompts} prompts, "
        f"{p.test_samples} samples, {p.test_rows} trajectory rows; cap {p.cap}; reference (best carried prefill head "
        f"at t = 0): {p.reference or '-'}; intervals {100 * p.ci:g}% over {p.n_boot} prompt resamples.",
    ]
    cols = (Column("method", "left"), *[Column(lab[i]) for i in ids])
    sec.tables = [Table("Remaining-length MAE (tokens) by progress, 95% interval in brackets", cols,
                        tuple(tuple(r) for r in mae_rows(res, ids)))]
    summary = [(m.name, _f(m.mean_mae_progress), _f(m.ratio_progress_vs_reference, ".3f"),
                ", ".join(f"{s}: {lab.get(v, '-') if v else 'never'}" for s, v in m.beats_oracle_from.items()))
               for m in res.methods]
    sec.tables.append(Table("Summary over progress", (Column("method", "left"), Column("MAE over progress"),
                                                      Column("/ reference"), Column("below the carried oracle from", "left")),
                            tuple(summary)))
    sec.figures = figures_from_writer(lambda d: write_plots(res, d), OUTLETS_PLOTS)
    return sec


# ---------------------------------------------------------------------------------------------- value
def _sim_table(sim: LoadedSim) -> Table:
    res = sim.result
    pols = res.policies()
    cols = [Column("load"), Column("req/s")]
    for pol in pols:
        cols.append(Column(pol))
        if pol != res.baseline:
            cols.append(Column(f"{pol} vs {res.baseline}"))
    rows = []
    for r in res.table():
        load = "-" if r["load"] is None else (f"{r['load']:g}x" if res.capacity_rps else f"{r['load']:g}")
        cells = [load, _f(r["rate_rps"])]
        for pol in pols:
            cells.append(_f(r[pol], ".3f"))
            if pol != res.baseline:
                ch = r[f"{pol} change"]
                cells.append("-" if ch is None else f"{100 * ch:+.1f}%")
        rows.append(tuple(cells))
    title = (f"{res.config.name}: P99 end-to-end latency (s) of short requests (true output < "
             f"{res.short_threshold:g} tokens)")
    return Table(title, tuple(cols), tuple(rows))


def _sim_figures(sim: LoadedSim) -> list[Figure]:
    from lenpred.report.sim_plots import plot_p99_vs_load

    if not any(x is not None for x in sim.result.loads()):
        return []
    caption = f"{sim.result.config.name}: P99 latency against load per policy (short requests solid, all dashed)"
    return figures_from_writer(lambda d: [plot_p99_vs_load(sim.result, d / "p99_vs_load.png", dpi=100)],
                               {"p99_vs_load.png": caption})


def _policy_groups(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[float, list[float]]]]:
    """scenario (arrival, workload) -> arm (policy, predictor) -> load -> short P99 per seed."""
    out: dict[str, dict[str, dict[float, list[float]]]] = {}
    for r in rows:
        scen = " / ".join(str(r[k]) for k in ("workload", "arrival") if r.get(k) is not None) or "all"
        pred = r.get("predictor")
        arm = str(r["policy"]) + (f" ({pred})" if pred not in (None, "", "-") else "")
        if r["short_p99_s"] is None:
            continue
        out.setdefault(scen, {}).setdefault(arm, {}).setdefault(float(r["load"]), []).append(float(r["short_p99_s"]))
    return out


def _policies_parts(rows: list[dict[str, Any]]) -> tuple[list[Table], list[Figure]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _policy_groups(rows)
    tables = []
    cols = min(3, len(groups))
    nrows = -(-len(groups) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.5 * cols, 4.2 * nrows), squeeze=False)
    for ax in axes.flat[len(groups):]:
        ax.axis("off")
    for ax, (scen, arms) in zip(axes.flat, groups.items(), strict=False):
        loads = sorted({x for a in arms.values() for x in a})
        trows = []
        for arm, by_load in arms.items():
            med = [float(np.median(by_load[x])) if x in by_load else np.nan for x in loads]
            ax.plot(loads, med, marker="o", ms=3, label=arm)
            trows.append((arm, *["-" if np.isnan(m) else f"{m:.3f}" for m in med]))
        ax.set_yscale("log")
        ax.set_xlabel("load")
        ax.set_ylabel("short-request P99 latency (s), median over seeds")
        ax.set_title(scen, fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=6, ncol=1 + len(arms) // 8)
        tables.append(Table(f"{scen}: short-request P99 (s), median over seeds", (Column("policy (predictor)", "left"),
                            *[Column(f"load {x:g}") for x in loads]), tuple(trows)))
    return tables, [figure_from_pyplot(fig, "policies.png", "Short-request P99 latency against load per policy")]


def value_section(sims: list[LoadedSim], policies: tuple[list[dict[str, Any]], str | None] | None,
                  policies_path: str | None) -> Section:
    sec = Section("value", TITLES["value"])
    sec.paragraphs = [
        "A scheduler that runs short requests first and balances decode instances by predicted tokens cuts the "
        "tail latency of short requests, if the predictions rank requests well enough. Simulated prefill/decode "
        "serving; P99 end-to-end latency of short requests against load.",
    ]
    for sim in sims:
        res = sim.result
        sec.commands.append(sim.command)
        sec.sources.append(str(sim.path))
        cap = f"; saturation throughput {res.capacity_rps:.1f} requests/s" if res.capacity_rps else ""
        sec.paragraphs.append(
            f"{res.config.name}: {res.config.cluster.n_prefill} prefill + {res.config.cluster.n_decode} decode "
            f"instances ({res.config.cluster.profile}), workload {res.config.workload.lengths.source}"
            f"{' ' + res.config.workload.lengths.path if res.config.workload.lengths.path else ''}, "
            f"{res.config.workload.n_requests} requests, baseline {res.baseline}{cap}.")
        sec.tables.append(_sim_table(sim))
        sec.figures += _sim_figures(sim)
    if policies is not None:
        rows, cmd = policies
        if cmd:
            sec.commands.append(cmd)
        if policies_path:
            sec.sources.append(policies_path)
        tables, figs = _policies_parts(rows)
        sec.tables += tables
        sec.figures += figs
    return sec
