"""Sections of the report page about the run and its prefill predictors: the card, the bound, the
bench and transfer between prompt sets.

Each builder reads the typed result a verb wrote and reuses that verb's own tables
(:mod:`lenpred.report.bound`, :mod:`lenpred.report.bench`) and plots, so the page and the verb's
own report can never disagree on a figure.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lenpred.data.rundir import RunDir
from lenpred.errors import LenpredError
from lenpred.io.artifacts import Artifact
from lenpred.report import bench as bench_report
from lenpred.report import bound as bound_report
from lenpred.report.page.inputs import LoadedBench, bench_command, bound_command, command_line
from lenpred.report.page.model import Figure, Section, Verdict, figure_from_pyplot, figures_from_writer
from lenpred.report.table import Column, Table
from lenpred.stats.results import BoundSummary

__all__ = ["run_section", "bound_section", "bench_section", "transfer_section", "TITLES"]

# section id -> heading; the page keeps this order
TITLES = {
    "run": "The run card and what it fixes",
    "bound": "The prefill bound and the process laws",
    "bench": "Predictor bench",
    "transfer": "Transfer between prompt sets",
    "outlets": "OUTLETS: remaining length by progress",
    "value": "What the predictions are worth",
}
BOUND_PLOTS = {
    "hist_grid.png": "Per-prompt decode lengths against the fitted normal (blue: EOS, orange: truncated)",
    "sd_vs_mu.png": "Affine law: per-prompt sd against mean length, with the OLS and Theil-Sen fits",
    "hazard.png": "Stopping hazard by decode step and in normalised time, against a constant hazard",
    "mae_normal.png": "Normal law: per-prompt oracle MAE against its normal-law value sqrt(2/pi) sd",
}
BENCH_PLOTS = {
    "bench_mae_vs_bound.png": "MAE on the test prompts with 95% intervals; the band is the oracle bound",
    "bench_coverage.png": "Share of test samples inside each head's 80% interval",
    "bench_pred_vs_true.png": "Predicted against true length, one point per test sample",
}
CARD_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "frequency_penalty",
               "presence_penalty", "max_new_tokens", "seed")


# ------------------------------------------------------------------------------------------------ run
def _collect_commands(rd: RunDir) -> list[str]:
    """``lenpred collect`` lines with the card's settings as flags, one per collection target."""
    c = rd.card
    p, s = c.get("prompts", {}), c.get("sampling", {})
    base: list[Any] = ["lenpred", "collect", "--run", rd.path, "--model", c.get("model", {}).get("id"),
                       "--engine", c.get("engine", {}).get("name"), "--source", p.get("source")]
    if p.get("path"):
        base += ["--prompts-file", p["path"]]
    if p.get("max_prompt_tokens") is not None:
        base += ["--max-prompt-tokens", p["max_prompt_tokens"]]
    base += ["--prompt-seed", p.get("seed")]
    for k in CARD_FIELDS:
        if k in s:
            base += [f"--{k.replace('_', '-')}", s[k]]
    return [command_line([*base, "--prompts", t["prompts"], "--samples", t["samples"]])
            for t in c.get("targets", [])] or [command_line(base)]


def card_table(rd: RunDir) -> Table:
    c = rd.card
    m, p, s, e = (c.get(k, {}) for k in ("model", "prompts", "sampling", "engine"))
    tmpl = f"applied (sha256 {str(m.get('chat_template_sha256'))[:12]}...)" if p.get("chat_template") else "none"
    rows = [
        ("model", f"{m.get('id')} ({m.get('upstream') or 'local'})"),
        ("weight fingerprint", str(m.get("fingerprint"))),
        ("tokenizer / vocabulary / EOS", f"{m.get('tokenizer')} / {m.get('vocab_size')} / {m.get('eos_token')}"),
        ("chat template / system prompt", f"{tmpl} / {p.get('system_prompt') or 'default'}"),
        ("prompts", f"{p.get('source')} (sha256 {str(p.get('dataset_sha256'))[:12]}...), at most "
                    f"{p.get('max_prompt_tokens')} prompt tokens, seed {p.get('seed')}, dedup {p.get('dedup')}"),
        ("sampling", ", ".join(f"{k}={s[k]}" for k in CARD_FIELDS if k in s)),
        ("samples per prompt", "; ".join(f"first {t['prompts']} prompts x {t['samples']}" for t in c.get("targets", []))),
        ("engine", f"{e.get('name')} {e.get('version', '')} {e.get('weights', '')}".strip()),
        ("card hash", rd.card_hash),
    ]
    return Table("What the card fixes", (Column("field", "left"), Column("value", "left")), tuple(rows))


def run_section(rd: RunDir) -> Section:
    from lenpred.data.summary import run_summary
    from lenpred.report.run_info import run_info_table

    sec = Section("run", TITLES["run"], commands=_collect_commands(rd), sources=[str(rd.path)])
    sec.paragraphs = [
        "Every figure on this page was computed under this card. Decode lengths depend on the model, the "
        "prompts and the sampling settings, so a bound or a bench figure is comparable only with one made "
        "under the same card; lenpred refuses to combine results of different cards.",
    ]
    sec.tables = [card_table(rd), run_info_table(run_summary(rd))]
    return sec


# ---------------------------------------------------------------------------------------------- bound
def bound_section(art: Artifact, s: BoundSummary) -> Section:
    v = s.headline_bound
    lo, hi = v.oracle_mae_ci
    rlo, rhi = v.relative_mae_ci
    sec = Section("bound", TITLES["bound"], commands=[bound_command(art)], sources=[str(art.path)])
    sec.paragraphs = [
        f"Headline: no prompt-only predictor can beat an MAE of {v.oracle_mae:.1f} tokens [{lo:.1f}, {hi:.1f}] "
        f"on this run, {v.relative_mae:.3f} [{rlo:.3f}, {rhi:.3f}] of the mean length ({v.label}).",
        bound_report.counts_sentence(s),
        f"{bound_report.choice_sentence(s)} {bound_report.tail_sentence(s)}",
        *[f"Read with care: {c}" for c in s.cautions],
    ]
    sec.verdicts = [Verdict(claim.replace("_", " "), v.status, v.detail) for claim, v in s.verdicts.items()]
    sec.tables = bound_report.tables(s)
    files = art.meta.get("files", {})
    sec.figures = [Figure(name, cap, art.file(name).read_bytes()) for name, cap in BOUND_PLOTS.items() if name in files]
    return sec


# ---------------------------------------------------------------------------------------------- bench
def bench_table(b: LoadedBench) -> Table:
    """The full bench table (every subset, every column): the console shows a narrower one."""
    rows = tuple(r.cells for r in bench_report.bench_table(b.result, ("all", "eos", "truncated")))
    cols = tuple(Column(c, "left" if c in ("predictor", "subset") else "right") for c in bench_report.COLUMNS)
    return Table(f"Bench on {b.run_name}, test split", cols, rows)


def _scatter(b: LoadedBench, rd: RunDir) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], list[str]]:
    """(true, predicted) per predictions table the bench read, where that table is still at its path."""
    from lenpred.data.lengths import sample_lengths
    from lenpred.data.split import load_split
    from lenpred.predictions import read_predictions

    entries = [(n, p) if sep else (None, n) for n, sep, p in (x.partition("=") for x in b.art.config.get("predictions") or [])]
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    notes: list[str] = []
    if not entries:
        return out, ["Predicted against true is drawn from the predictions tables a bench reads (`lenpred bench "
                     "--predictions`); this bench predicted its heads in memory and kept no per-sample predictions."]
    try:
        split = load_split(rd, b.art.config.get("split"), require_complete=False)
        s = sample_lengths(rd, with_prompts=False)
        test = s[s["prompt_id"].isin(split.test)].reset_index(drop=True)
    except LenpredError as e:
        return out, [f"Predicted against true not drawn: {e}"]
    for name, path in entries:
        try:
            p = read_predictions(path, card=rd.card)
            out[name or p.made_by] = (test["n_tokens"].to_numpy(float), p.for_samples(test)["pred_tokens"].to_numpy(float))
        except LenpredError as e:
            notes.append(f"Predicted against true for {name or path} not drawn: {e}")
    return out, notes


def bench_section(b: LoadedBench, rd: RunDir) -> Section:
    res = b.result
    sec = Section("bench", TITLES["bench"], commands=[bench_command(b.art)], sources=[str(b.art.path)])
    sec.paragraphs = [
        *bench_report.protocol_lines(res),
        f"Oracle bound on these test prompts: {res.bound.oracle_mae:.1f} tokens [{res.bound.oracle_mae_ci[0]:.1f}, "
        f"{res.bound.oracle_mae_ci[1]:.1f}]. MAE / bound = 1 is the best any prompt-only predictor can do; the "
        "prompt-median row is that bound used as a predictor (each sample predicted by its prompt's other samples).",
    ]
    scatter, notes = _scatter(b, rd)
    sec.paragraphs += notes
    sec.tables = [bench_table(b)]
    sec.figures = figures_from_writer(lambda d: bench_report.write_plots(res, d, scatter=scatter or None), BENCH_PLOTS)
    return sec


# ------------------------------------------------------------------------------------------- transfer
def _ratios(b: LoadedBench) -> dict[str, tuple[float, float | None]]:
    """predictor -> (MAE, MAE / bound) on the bench's own test prompts."""
    return {r.name: (r.metrics.mae, r.mae_over_bound) for r in b.result.rows if r.subset == "all"}


def transfer_section(home: LoadedBench, others: list[LoadedBench]) -> Section:
    benches = [home, *others]
    sec = Section("transfer", TITLES["transfer"], commands=[bench_command(b.art) for b in benches],
                  sources=[str(b.art.path) for b in benches])
    sec.paragraphs = [
        "The same heads on another prompt set collected under the same model and sampling card. Absolute MAE "
        "moves with the prompts; MAE divided by each run's own oracle bound is the figure that stays comparable.",
        *[f"{'home' if b is home else 'transfer'}: {b.result.protocol.run} ({b.result.protocol.test_prompts} test "
          f"prompts, {b.result.protocol.test_samples} samples), oracle bound {b.result.bound.oracle_mae:.1f} tokens"
          for b in benches],
    ]
    ratios = [_ratios(b) for b in benches]
    names = list(ratios[0])
    cols = [Column("predictor", "left")]
    for b in benches:
        cols += [Column(f"{b.run_name} MAE"), Column(f"{b.run_name} MAE / bound")]
    rows = [("oracle bound", *[x for b in benches for x in (f"{b.result.bound.oracle_mae:.1f}", "1.000")])]
    for n in names:
        cells = [n]
        for r in ratios:
            mae, rel = r.get(n, (None, None))
            cells += ["-" if mae is None else f"{mae:.1f}", "-" if rel is None else f"{rel:.3f}"]
        rows.append(tuple(cells))
    sec.tables = [Table("MAE and MAE / bound on each run's test prompts", tuple(cols), tuple(rows))]
    sec.figures = [_transfer_plot(benches, ratios, names)]
    return sec


def _transfer_plot(benches: list[LoadedBench], ratios: list[dict[str, tuple[float, float | None]]],
                   names: list[str]) -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.4 * len(names) + 1.6))
    ys = np.arange(len(names))
    for i, (b, r) in enumerate(zip(benches, ratios, strict=True)):
        x = [np.nan if r.get(n, (0, None))[1] is None else r[n][1] for n in names]
        ax.plot(x, ys + (i - (len(benches) - 1) / 2) * 0.15, "o", label=b.run_name)
    ax.axvline(1.0, color="tab:green", label="oracle bound")
    ax.set_yticks(ys, names)
    ax.invert_yaxis()
    ax.set_xlabel("MAE / the run's own oracle bound (test prompts)")
    ax.legend(fontsize="small", loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=len(benches) + 1, frameon=False)
    return figure_from_pyplot(fig, "transfer.png", "MAE / bound of each head on each prompt set")
