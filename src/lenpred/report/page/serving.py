"""Sections of the report page about serving: OUTLETS along the answer, and what the predictions are
worth to a scheduler: the scheduling yardstick's five arms per regime group
(:mod:`lenpred.report.page.schedule`), and P99 latency against load of ``lenpred simulate`` outputs.

OUTLETS figures come from :mod:`lenpred.report.outlets` (the plots ``lenpred outlets bench`` draws),
the simulator's from :mod:`lenpred.report.sim_plots`. The policy study's rows (``--policies``) are no
longer drawn: the page names them as the full table (docs/policies/).
"""

from __future__ import annotations

from typing import Any

from lenpred.io.artifacts import Artifact
from lenpred.outlets.evaluate import OutletsBench
from lenpred.report.page.inputs import LoadedSim, LoadedYardstick, outlets_command
from lenpred.report.page.model import Figure, Section, figures_from_writer
from lenpred.report.page.sections import TITLES
from lenpred.report.table import Column, Table

__all__ = ["outlets_section", "value_section"]

OUTLETS_PLOTS = {
    "outlets_mae_progress.png": "Remaining-length MAE by progress through the answer; the grey band is the "
                                "carried per-prompt oracle",
    "outlets_mae_tokens.png": "Remaining-length MAE by tokens generated (samples longer than that)",
    "outlets_coverage.png": "Share of trajectory rows inside each method's 80% interval, by progress",
    "outlets_mae_live.png": "The live series: remaining-length MAE at the rows a server meets (t = 0, 16, 32, ... "
                            "tokens, while running); the grey band is the carried per-prompt oracle",
    "outlets_coverage_live.png": "The live series: share of rows inside each method's 80% interval",
}


def _f(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def outlets_section(art: Artifact, res: OutletsBench, live_art: Artifact | None = None) -> Section:
    """The OUTLETS section of bench ``art``; the live series (the headline) from ``live_art`` where given."""
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
    live = _live_of(live_art if live_art is not None else art)
    if live_art is not None and live_art.path != art.path:
        sec.commands.insert(0, outlets_command(live_art))
        sec.sources.insert(0, str(live_art.path))
    if live is not None:  # the live series is the headline: its table and plots first
        from lenpred.report.outlets import write_live_plots

        ref = live.reference
        sec.paragraphs.append(
            f"Live series (the headline): every test sample at t = 0 and at each re-prediction point it reaches "
            f"({', '.join(str(x) for x in live.points[1:6])}{', ...' if len(live.points) > 6 else ''} tokens); "
            f"{live.n_samples} samples, {live.rows} rows; ratios to {ref}, per row (as a server meets them) and per "
            "sample. The progress table below places rows at fractions of each sample's true length.")
        rows = tuple((n, m.made_for, _f(m.mae), f"{_f(m.ratio, '.3f')} ({_f(m.ci[0], '.3f')}-{_f(m.ci[1], '.3f')})",
                      _f(m.per_sample.ratio, ".3f"),
                      f"{_f(m.short_at_64.get('precision'), '.2f')} / {_f(m.short_at_64.get('recall'), '.2f')}")
                     for n, m in live.methods.items())
        sec.tables.insert(0, Table(f"Live series: remaining-length MAE per row and its ratio to {ref} (95% interval)",
                                   (Column("method", "left"), Column("made for", "left"), Column("MAE per row"),
                                    Column(f"/ {ref}"), Column("/ ref. per sample"), Column("short P / R at 64")),
                                   rows))
        sec.figures = figures_from_writer(lambda d: write_live_plots(live, d), OUTLETS_PLOTS) + sec.figures
    return sec


def _live_of(art: Artifact) -> Any:
    """The bench's live series (``outlets_live.json``), or None for a bench made before it."""
    from lenpred.outlets.livebench import LiveBench

    if "outlets_live.json" not in (art.meta.get("files") or {}):
        return None
    return LiveBench.from_json_dict(art.read_json("outlets_live.json"), where=f"{art.path}/outlets_live.json")


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


def value_section(sims: list[LoadedSim], policies: tuple[list[dict[str, Any]], str | None] | None,
                  policies_path: str | None, yardstick: LoadedYardstick | None = None) -> Section:
    from lenpred.report.page.schedule import yardstick_paragraphs, yardstick_parts

    sec = Section("value", TITLES["value"])
    sec.paragraphs = [
        "A scheduler that runs short requests first and balances decode instances by predicted tokens cuts the "
        "tail latency of short requests, if the predictions rank requests well enough. Simulated prefill/decode "
        "serving.",
    ]
    if yardstick is not None:
        sec.sources += yardstick.paths
        sec.paragraphs += yardstick_paragraphs(yardstick.groups, yardstick.paths)
        tables, figs = yardstick_parts(yardstick.groups)
        sec.tables += tables
        sec.figures += figs
    if policies is not None:
        rows, cmd = policies
        if cmd:
            sec.commands.append(cmd)
        if policies_path:
            sec.sources.append(policies_path)
        sec.paragraphs.append(f"The policy study's {len(rows)} rows ({policies_path or 'policies table'}: short-request "
                              "P99 against load per policy, predictor and seed) are the full table behind it; "
                              "docs/policies/README.md reads them.")
    for sim in sims:
        res = sim.result
        sec.commands.append(sim.command)
        sec.sources.append(str(sim.path))
        cap = f"; saturation throughput {res.capacity_rps:.1f} requests/s" if res.capacity_rps else ""
        sec.paragraphs.append(
            f"{res.config.name}: {res.config.cluster.n_prefill} prefill + {res.config.cluster.n_decode} decode "
            f"instances ({res.config.cluster.profile}), workload {res.config.workload.lengths.source}"
            f"{' ' + res.config.workload.lengths.path if res.config.workload.lengths.path else ''}, "
            f"{res.config.workload.n_requests} requests, baseline {res.baseline}{cap}: P99 end-to-end latency of "
            "short requests against load.")
        sec.tables.append(_sim_table(sim))
        sec.figures += _sim_figures(sim)
    return sec
