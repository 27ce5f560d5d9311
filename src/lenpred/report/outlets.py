"""OUTLETS presentation: the bench's Markdown tables and plots, and the scheduling experiment's table.

Tables: remaining-length MAE at every point (one row per method, one column per point, the 95%
interval under each figure), 80% interval coverage along the trajectory, the summary (MAE averaged
over progress, its ratio to the best carried prefill head, from where each method beats the carried
oracle) and the total-length MAE at t = 0 against the prefill oracle bound. Plots: MAE vs progress
and vs tokens generated (one line per method, the carried oracle as a band), and coverage vs progress.

:func:`schedule_markdown`: the value-for-scheduling table (:func:`lenpred.outlets.schedule.schedule_table`
rows: short-request and overall P99 end-to-end latency per load and arm, their change against the
baseline, the decode load imbalance).

:func:`write_bench` and :func:`write_schedule` write what ``lenpred outlets bench`` / ``schedule``
computed (:mod:`lenpred.outlets.pipeline`) into its folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lenpred.outlets.evaluate import ORACLE, OutletsBench

__all__ = ["render_markdown", "render_live_markdown", "write_plots", "write_live_plots", "mae_rows", "schedule_markdown",
           "write_bench", "write_schedule"]


def _n(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def _ci(c: tuple[float | None, float | None], fmt: str = "{:.1f}") -> str:
    return "-" if c[0] is None or c[1] is None else f"{fmt.format(c[0])}-{fmt.format(c[1])}"


def _labels(res: OutletsBench) -> dict[str, str]:
    return {p.id: p.label for p in res.points}


def mae_rows(res: OutletsBench, ids: list[str]) -> list[list[str]]:
    """One row per method: its name, then "MAE (lo-hi)" at each point of ``ids``."""
    rows = []
    for m in res.methods:
        cells = [m.name]
        for i in ids:
            s = m.points.get(i)
            cells.append("-" if s is None else f"{_n(s.mae)} ({_ci(s.mae_ci)})")
        rows.append(cells)
    return rows


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def render_live_markdown(live: Any) -> str:
    """The live series (:class:`lenpred.outlets.livebench.LiveBench`): the headline tables."""
    ref = live.reference
    pts = [str(p) for p in live.points]
    shown = pts if len(pts) <= 12 else [p for p in pts if p == "0" or (int(p) >= 16 and int(p) & (int(p) - 1) == 0)]
    out = ["## The live series: rows a server meets (headline)", "",
           f"Every test sample at t = 0 and at each live point it reaches (t = {', '.join(pts[1:6])}"
           f"{', ...' if len(pts) > 6 else ''} tokens generated, t < L): {live.n_samples} samples of {live.n_prompts} "
           f"prompts, {live.rows} rows; trajectory rows: {live.trajectory_rows}. Reference: {ref}. Per row: every "
           "(sample, t) row weighs the same (a request that runs longer is met more often); per sample: each "
           f"sample's mean over its rows. {100 * live.ci_level:g}% intervals over {live.n_boot} prompt resamples, "
           "paired. `made for`: the rows a head was trained on (fraction rows are placed with the true length).", ""]
    rows = []
    for name, m in live.methods.items():
        c = m.clear_below_from
        rows.append([name, m.made_for, f"{_n(m.mae)} ({_ci(m.mae_ci)})", f"{_n(m.ratio, '{:.3f}')} ({_ci(m.ci, '{:.3f}')})",
                     f"{_n(m.per_sample.mae)} ({_ci(m.per_sample.mae_ci)})",
                     f"{_n(m.per_sample.ratio, '{:.3f}')} ({_ci(m.per_sample.ci, '{:.3f}')})",
                     f"{_n(m.short_at_64.get('precision'), '{:.2f}')} / {_n(m.short_at_64.get('recall'), '{:.2f}')}",
                     ", ".join(f"{b}: {'never' if v is None else v}" for b, v in c.items()) or "-"])
    out += _table(["method", "made for", "MAE per row", f"/ {ref}", "MAE per sample", f"/ {ref} (per sample)",
                   "short P / R at 64 tok", "CI-clear below from (tokens)"], rows) + [""]
    out += ["MAE by tokens generated (only samples still running; 95% interval):", ""]
    out += _table(["method"] + [f"{p} tok" for p in shown],
                  [[n] + [f"{_n(m.points[p].mae)} ({_ci(m.points[p].mae_ci)})" if p in m.points else "-" for p in shown]
                   for n, m in live.methods.items()]) + [""]
    out += [f"MAE / {ref} by tokens generated (paired 95% interval):", ""]
    out += _table(["method"] + [f"{p} tok" for p in shown],
                  [[n] + [f"{_n(m.points[p].ratio, '{:.3f}')} ({_ci(m.points[p].ratio_ci, '{:.2f}')})"
                          if p in m.points else "-" for p in shown] for n, m in live.methods.items()]) + [""]
    out += ["80% interval coverage by tokens generated (goal 75-85%):", ""]
    out += _table(["method"] + [f"{p} tok" for p in shown],
                  [[n] + [_n(None if p not in m.points or m.points[p].coverage80 is None else 100 * m.points[p].coverage80,
                             "{:.0f}%") for p in shown] for n, m in live.methods.items()]) + [""]
    out += [f"Label \"short\" (t + predicted remaining < {_n(live.short_threshold, '{:.0f}')} tokens, the test samples' "
            "median length), precision / recall among the requests still running:", ""]
    out += _table(["method"] + [f"{p} tok" for p in shown],
                  [[n] + [f"{_n(m.points[p].short_precision, '{:.2f}')} / {_n(m.points[p].short_recall, '{:.2f}')}"
                          if p in m.points else "-" for p in shown] for n, m in live.methods.items()]) + [""]
    out += ["Points: " + ", ".join(f"{p} tok: {next(iter(live.methods.values())).points[p].n_samples} samples"
                                   for p in shown), ""]
    return "\n".join(out)


def render_markdown(res: OutletsBench, live: Any = None) -> str:
    p = res.protocol
    lab = _labels(res)
    out = ["# OUTLETS: remaining-length prediction along the trajectory", "",
           f"- run: {p.run} (card {p.card_hash}); trajectory: {p.trajectory}",
           f"- test: {p.test_prompts} prompts, {p.test_samples} samples, {p.test_rows} trajectory rows; cap {p.cap}",
           f"- reference (best carried prefill head at t = 0): {p.reference or '-'}; "
           f"intervals: {100 * p.ci:g}% over {p.n_boot} prompt resamples (seed {p.seed})",
           "- MAE of the remaining length L - t in tokens, averaged over prompts; lengths as served "
           "(a sample cut at max_new_tokens counts as max_new_tokens)", ""]
    if live is not None:
        out += [render_live_markdown(live), "## Secondary: points at fractions of the true length and token points", "",
                "The progress series places rows at t = floor(f L): it uses each sample's true length L, which a "
                "server does not know. Averaged over prompts (each prompt's mean over its samples).", ""]
    made = {m.name: m.made_for for m in res.methods if m.made_for}
    if made:
        out += ["Heads and the rows they were trained on: " + ", ".join(f"{k}: {v}" for k, v in made.items()), ""]
    for s, ids in res.series.items():
        title = {"progress": "by progress (share of the sample's own length: uses the true length)",
                 "tokens": "by tokens generated (only samples longer than that)"}.get(s, s)
        out += [f"## Remaining-length MAE {title}", ""]
        out += _table(["method"] + [lab[i] for i in ids], mae_rows(res, ids)) + [""]
    out += ["## Points", ""]
    out += _table(["point", "prompts", "samples", "inexact rows", "max offset"],
                  [[pt.label, str(pt.n_prompts), str(pt.n_samples), str(pt.inexact), _n(pt.max_offset, "{:.0f}")]
                   for pt in res.points]) + [""]
    ids = res.series.get("progress", [])
    out += ["## 80% interval coverage along the trajectory", ""]
    rows = [[m.name] + [_n(None if m.points.get(i) is None or m.points[i].coverage80 is None
                           else 100 * m.points[i].coverage80, "{:.0f}%") for i in ids] for m in res.methods]
    out += _table(["method"] + [lab[i] for i in ids], rows) + [""]
    out += _scheduler_tables(res, lab)
    out += ["## Summary", ""]
    rows = []
    for m in res.methods:
        rows.append([m.name, _n(m.mean_mae_progress), _n(m.ratio_progress_vs_reference, "{:.3f}"),
                     _ci(m.ratio_progress_vs_reference_ci, "{:.3f}"),
                     ", ".join(f"{s}: {lab.get(v, '-') if v else 'never'}" for s, v in m.beats_oracle_from.items()),
                     ", ".join(f"{s}: {lab.get(v, '-') if v else 'never'}" for s, v in m.beats_oracle_from_ci.items()),
                     str(m.fallback_rows)])
    out += _table(["method", "MAE over progress", "/ reference", "95% CI", "below the carried oracle from",
                   "... with the interval below 1", "fallback rows"], rows) + [""]
    t = res.total_t0
    out += ["## Total length at t = 0 against the prefill oracle bound", ""]
    if t.bound is not None:
        b = t.bound
        out.append(f"Bound on the test prompts: {b.oracle_mae:.1f} tokens ({_ci(b.oracle_mae_ci)}; in-sample "
                   f"{b.oracle_mae_insample:.1f}, leave-one-out {b.oracle_mae_loo:.1f}), {b.n_prompts} prompts, "
                   f"{b.n_samples} samples.")
        out.append("")
    out += _table(["method", "MAE", "95% CI", "MAE / bound", "own point MAE", "own point / bound"],
                  [[r.name, _n(r.mae), _ci(r.mae_ci), _n(r.mae_over_bound, "{:.3f}"), _n(r.mae_point),
                    _n(r.mae_point_over_bound, "{:.3f}")] for r in t.rows]) + [""]
    notes = [f"- {m.name}: {m.note}" for m in res.methods if m.note]
    if notes:
        out += ["## Methods", ""] + notes + [""]
    return "\n".join(out)


def _scheduler_tables(res: OutletsBench, lab: dict[str, str]) -> list[str]:
    """Kendall tau and the label "short" (precision / recall) per point: what a scheduler reads."""
    thr = res.protocol.short_threshold
    out = ["## What a scheduler reads", "",
           "Kendall tau-b of predicted vs true remaining length over the rows at each point, and the label "
           f"\"short\" (t + predicted remaining < {_n(thr, '{:.0f}')} tokens, the test samples' median length) "
           "as precision / recall against the true class. On the tokens series the rows are the requests still "
           "running.", ""]
    for s, ids in res.series.items():
        rows = [[m.name] + [_n(m.points[i].kendall_tau if i in m.points else None, "{:.2f}") for i in ids]
                for m in res.methods]
        out += [f"Kendall tau, {s}:", ""] + _table(["method"] + [lab[i] for i in ids], rows) + [""]
        rows = []
        for m in res.methods:
            cells = []
            for i in ids:
                sc = m.points.get(i)
                cells.append("-" if sc is None else f"{_n(sc.short_precision, '{:.2f}')} / {_n(sc.short_recall, '{:.2f}')}")
            rows.append([m.name, *cells])
        out += [f"Label \"short\", precision / recall, {s}:", ""] + _table(["method"] + [lab[i] for i in ids], rows)
        out += [""]
    return out


def _x(res: OutletsBench, ids: list[str], kind: str) -> list[float]:
    by = {p.id: p for p in res.points}
    return [100 * by[i].value if kind == "progress" else by[i].value for i in ids]


def write_plots(res: OutletsBench, out: Path) -> list[Path]:
    """``outlets_mae_progress.png``, ``outlets_mae_tokens.png``, ``outlets_coverage.png`` in ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for s, ids in res.series.items():
        if len(ids) < 2:
            continue
        x = _x(res, ids, s)
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        for m in res.methods:
            pts = [m.points.get(i) for i in ids]
            y = [p.mae if p is not None and p.mae is not None else float("nan") for p in pts]
            if m.name == ORACLE:
                lo = [p.mae_ci[0] if p is not None and p.mae_ci[0] is not None else float("nan") for p in pts]
                hi = [p.mae_ci[1] if p is not None and p.mae_ci[1] is not None else float("nan") for p in pts]
                ax.fill_between(x, lo, hi, color="grey", alpha=0.3, label=f"{m.name} (95% CI)")
                ax.plot(x, y, color="grey", ls="--", lw=1)
            else:
                ax.plot(x, y, marker="o", ms=3, lw=1.5 if m.family == "outlets" else 1.0,
                        ls="-" if m.family in ("outlets", "probe") else ":", label=m.name)
        ax.set_xlabel("progress (% of the sample's length)" if s == "progress" else "tokens generated")
        ax.set_ylabel("remaining-length MAE (tokens)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        paths.append(out / f"outlets_mae_{s}.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    ids = res.series.get("progress", [])
    if len(ids) >= 2:
        x = _x(res, ids, "progress")
        fig, ax = plt.subplots(figsize=(7.5, 4.0))
        for m in res.methods:
            y = [100 * m.points[i].coverage80 if i in m.points and m.points[i].coverage80 is not None else float("nan")
                 for i in ids]
            ax.plot(x, y, marker="o", ms=3, label=m.name, ls="--" if m.name == ORACLE else "-")
        ax.axhspan(75, 85, color="tab:green", alpha=0.15)
        ax.axhline(80, color="tab:green", lw=1)
        ax.set_xlabel("progress (% of the sample's length)")
        ax.set_ylabel("rows inside the 80% interval (%)")
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        paths.append(out / "outlets_coverage.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths


def write_live_plots(live: Any, out: Path) -> list[Path]:
    """``outlets_mae_live.png`` (MAE vs tokens generated, one line per method, the carried oracle as its
    95% band) and ``outlets_coverage_live.png`` (80% interval coverage per live point) in ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    pts = [str(p) for p in live.points]
    x = list(range(len(pts)))
    paths = []
    tab20 = plt.get_cmap("tab20")
    colors = [tab20(i) for i in range(20)]  # more methods than the default cycle's 10 colours
    for what, ylabel, fname in (("mae", "remaining-length MAE (tokens)", "outlets_mae_live.png"),
                                ("coverage80", "rows inside the 80% interval (%)", "outlets_coverage_live.png")):
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        ax.set_prop_cycle(color=colors)
        for name, m in live.methods.items():
            sc = [m.points.get(p) for p in pts]
            scale = 100.0 if what == "coverage80" else 1.0
            y = [scale * getattr(s, what) if s is not None and getattr(s, what) is not None else float("nan") for s in sc]
            if name == "carried-oracle" and what == "mae":
                lo = [s.mae_ci[0] if s is not None and s.mae_ci[0] is not None else float("nan") for s in sc]
                hi = [s.mae_ci[1] if s is not None and s.mae_ci[1] is not None else float("nan") for s in sc]
                ax.fill_between(x, lo, hi, color="grey", alpha=0.3, label=f"{name} (95% CI)")
                ax.plot(x, y, color="grey", ls="--", lw=1)
            else:
                ax.plot(x, y, marker="o", ms=3, lw=1.5 if m.family in ("outlets", "probe", "counters") else 1.0,
                        ls="-" if m.family in ("outlets", "probe", "counters") else ":", label=f"{name} ({m.made_for})")
        if what == "coverage80":
            ax.axhspan(75, 85, color="tab:green", alpha=0.15)
            ax.axhline(80, color="tab:green", lw=1)
        else:
            ax.set_ylim(bottom=0)
        ax.set_xticks(x, pts, fontsize=7 if len(pts) > 12 else 9)
        ax.set_xlabel("tokens generated (live re-prediction points)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"live series: {live.n_samples} samples, {live.rows} rows", fontsize=9)
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        paths.append(out / fname)
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths


def schedule_markdown(rows: list[dict[str, Any]], res: Any) -> str:
    """``schedule.md``: one row per (load, arm) of :func:`lenpred.outlets.schedule.schedule_table`."""
    def f(x: Any, fmt: str) -> str:
        return "-" if x is None else fmt.format(x)

    out = ["# OUTLETS: value for scheduling (simulated, test prompts' samples)", "",
           f"- short requests: true output < {res.short_threshold:g} tokens; loads are multiples of the measured "
           f"capacity ({f(res.capacity_rps, '{:.2f}')} requests/s); baseline {res.baseline}", "",
           "| load | arm | short P99 E2E (s) | vs baseline | overall P99 E2E (s) | vs baseline | "
           "decode tokens max/mean | batch CV |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {f(r['load'], '{:g}')} | {r['arm']} | {f(r['short_p99_e2e_s'], '{:.3f}')} | "
                   f"{f(r['short_p99_change'], '{:+.1%}')} | {f(r['all_p99_e2e_s'], '{:.3f}')} | "
                   f"{f(r['all_p99_change'], '{:+.1%}')} | {f(r['tokens_max_over_mean'], '{:.3f}')} | "
                   f"{f(r['batch_cv'], '{:.3f}')} |")
    return "\n".join(out) + "\n"


def write_bench(run: Any, out: str | Path, plots: bool = True) -> tuple[Any, str]:
    """The ``outlets-bench`` artifact of a :class:`lenpred.outlets.pipeline.BenchRun` in ``out``
    (``outlets_bench.json``, its schema, ``outlets_bench.md`` and, with ``plots``, the plots);
    returns (the artifact, its Markdown)."""
    import tempfile

    from lenpred.io.artifacts import ArtifactHeader, write_artifact

    res, live = run.result, getattr(run, "live", None)
    md = render_markdown(res, live)
    files = {"outlets_bench.md": md.encode()}
    if plots:
        with tempfile.TemporaryDirectory() as tmp:
            for path in write_plots(res, Path(tmp)) + (write_live_plots(live, Path(tmp)) if live is not None else []):
                files[path.name] = path.read_bytes()
    json_files = {"outlets_bench.json": res.to_dict(), "outlets_bench.schema.json": OutletsBench.json_schema()}
    if live is not None:
        json_files["outlets_live.json"] = live.to_json_dict()
    art = write_artifact(Path(out), ArtifactHeader(kind="outlets-bench", schema_version=1, config=run.config,
                                                   card=run.card, card_scope="run"),
                         json_files=json_files, files=files)
    return art, md


def write_schedule(res: Any, out: str | Path) -> str:
    """``schedule.md`` (returned too) and, when the config asks for plots, the sweep's plots, beside what
    :func:`lenpred.outlets.schedule.run_schedule` wrote in ``out``."""
    from lenpred.outlets.schedule import schedule_table

    dest = Path(out)
    md = schedule_markdown(schedule_table(res), res)
    (dest / "schedule.md").write_text(md)
    if res.config.plots:
        from lenpred.report.sim_plots import write_plots as write_sim_plots

        write_sim_plots(res, dest)
    return md
