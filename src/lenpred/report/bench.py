"""Presentation of a :class:`~lenpred.bench.BenchResult`: one row model for console and Markdown,
plus plots (predicted vs true, MAE against the bound, interval coverage)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lenpred.bench.evaluate import BenchResult

__all__ = ["bench_table", "render_console", "render_markdown", "write_plots", "protocol_lines"]

COLUMNS = ("predictor", "subset", "samples", "MAE", "95% CI", "rel. MAE", "MAE / bound", "excess",
           "RMSE", "Kendall tau", "R2", "cover 80%", "pinball")


def _f(x: Any, fmt: str = "{:.1f}") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return fmt.format(x)


@dataclass(frozen=True)
class Row:
    cells: tuple[str, ...]
    is_bound: bool = False


def bench_table(res: BenchResult, subsets: tuple[str, ...] = ("all",)) -> list[Row]:
    """Rows, the bound first; every predictor's rows for the chosen subsets."""
    b = res.bound
    rows = [Row(("oracle bound", "all", str(b.n_samples), _f(b.oracle_mae),
                 f"{_f(b.oracle_mae_ci[0])}-{_f(b.oracle_mae_ci[1])}", _f(b.oracle_mae / b.mean_length, "{:.3f}"),
                 "1.000", "0.0", "-", "-", "-", "-", "-"), is_bound=True)]
    for r in res.rows:
        if r.subset not in subsets:
            continue
        m = r.metrics
        rows.append(Row((r.name, r.subset, str(m.n_samples), _f(m.mae), f"{_f(m.mae_ci[0])}-{_f(m.mae_ci[1])}",
                         _f(m.relative_mae, "{:.3f}"), _f(r.mae_over_bound, "{:.3f}"),
                         _f(r.excess_over_bound, "{:+.1f}"), _f(m.rmse), _f(m.kendall_tau, "{:.3f}"),
                         _f(m.r2, "{:.3f}"), _f(None if m.coverage80 is None else 100 * m.coverage80, "{:.1f}%"),
                         _f(m.pinball))))
    return rows


def protocol_lines(res: BenchResult) -> list[str]:
    p = res.protocol
    s = p.sampling
    samp = ", ".join(f"{k}={s[k]}" for k in ("temperature", "top_p", "top_k", "min_p", "frequency_penalty",
                                             "repetition_penalty", "max_new_tokens", "seed") if k in s)
    ks = ", ".join(f"{n} x K={k}" for k, n in p.samples_per_prompt.items())
    return [
        f"run: {p.run} (card {p.card_hash})",
        f"model: {p.model} ({p.model_fingerprint[:19]}...)",
        f"data: {p.dataset} (sha256 {p.dataset_sha256[:12]}...)",
        f"sampling: {samp}",
        f"test: {p.test_prompts} prompts, {p.test_samples} samples ({ks}); split {p.split_counts} (seed {p.split_seed})",
        "lengths as served (a sample cut at max_new_tokens counts as max_new_tokens); averages over prompts",
    ]


# columns the console leaves out first when the table is wider than the terminal (bench.md keeps all)
# (a single subset's column says the same on every row: it leaves first)
CONSOLE_DROP = ("subset", "pinball", "RMSE", "R2", "excess", "samples", "rel. MAE", "95% CI")


def render_console(res: BenchResult, subsets: tuple[str, ...] = ("all",), title: str = "bench",
                   console: Any = None) -> None:
    """The bench table on the console, narrowed to its width (100 columns when not a terminal)."""
    from rich.console import Console
    from rich.table import Table

    from lenpred.report.table import columns_that_fit

    con = console or Console()
    if console is None and not con.is_terminal:  # piped or captured: rich would assume 80 columns
        con = Console(width=100)
    rows = bench_table(res, subsets)

    def build(keep: list[int]) -> Table:
        t = Table(title=title, title_justify="left")
        for i in keep:
            t.add_column(COLUMNS[i], justify="left" if COLUMNS[i] in ("predictor", "subset") else "right", no_wrap=True)
        for r in rows:
            t.add_row(*(r.cells[i] for i in keep), style="bold" if r.is_bound else None)
        return t

    drop = [COLUMNS.index(c) for c in CONSOLE_DROP if c != "subset" or len(subsets) == 1]
    keep = columns_that_fit(build, len(COLUMNS), con.width, drop)
    for line in protocol_lines(res):
        con.print(line, highlight=False)
    con.print(build(keep))
    left_out = [c for i, c in enumerate(COLUMNS) if i not in keep]
    if left_out:
        con.print(f"(left out to fit {con.width} columns: {', '.join(left_out)}; the report shows all)",
                  highlight=False)


def render_markdown(res: BenchResult, subsets: tuple[str, ...] = ("all", "eos", "truncated")) -> str:
    out = ["# Length-prediction bench", ""] + [f"- {x}" for x in protocol_lines(res)] + [""]
    out += ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" if i < 2 else "---:" for i in range(len(COLUMNS))) + "|"]
    for r in bench_table(res, subsets):
        cells = [f"**{c}**" if r.is_bound and i == 0 else c for i, c in enumerate(r.cells)]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def _legend_above_rows(ax: Any, n_rows: int) -> None:
    """A legend in headroom above the top of ``n_rows`` horizontal rows (y = 0 .. n_rows - 1), off the data."""
    ax.set_ylim(-0.7, n_rows - 1 + 1.6)
    ax.legend(loc="upper right", fontsize="small")


def write_plots(res: BenchResult, out: Path, scatter: dict[str, tuple[np.ndarray, np.ndarray]] | None = None) -> list[Path]:
    """MAE against the bound with intervals; coverage; predicted vs true (``scatter[name] = (y, pred)``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    rows = [r for r in res.rows if r.subset == "all"]
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(rows) + 1.5))
    ys = np.arange(len(rows))
    mae = np.array([r.metrics.mae for r in rows])
    lo = np.array([r.metrics.mae_ci[0] for r in rows])
    hi = np.array([r.metrics.mae_ci[1] for r in rows])
    ax.errorbar(mae, ys, xerr=[mae - lo, hi - mae], fmt="o", capsize=3)
    b = res.bound
    ax.axvspan(b.oracle_mae_ci[0], b.oracle_mae_ci[1], color="tab:green", alpha=0.2, label="oracle bound (95% CI)")
    ax.axvline(b.oracle_mae, color="tab:green")
    ax.set_yticks(ys, [r.name for r in rows])
    ax.set_xlabel("MAE (tokens), test prompts")
    _legend_above_rows(ax, len(rows))
    fig.tight_layout()
    paths.append(out / "bench_mae_vs_bound.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    cov = [(r.name, r.metrics.coverage80) for r in rows if r.metrics.coverage80 is not None]
    if cov:
        fig, ax = plt.subplots(figsize=(7, 0.45 * len(cov) + 1.5))
        ax.barh([c[0] for c in cov], [100 * c[1] for c in cov])
        ax.axvspan(75, 85, color="tab:green", alpha=0.2, label="75-85% target")
        ax.axvline(80, color="tab:green")
        ax.set_xlabel("share of test samples inside the 80% interval (%)")
        ax.set_xlim(min(50.0, 100 * min(c[1] for c in cov) - 5), 100)  # the bars differ by a few points
        _legend_above_rows(ax, len(cov))
        fig.tight_layout()
        paths.append(out / "bench_coverage.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    if scatter:
        n = len(scatter)
        cols = min(3, n)
        nrows = math.ceil(n / cols)
        fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 4 * nrows), squeeze=False)
        for ax, (name, (y, p)) in zip(axes.flat, scatter.items(), strict=False):
            ax.scatter(y, p, s=4, alpha=0.3)
            m = float(max(np.max(y), np.max(p)))
            ax.plot([0, m], [0, m], color="grey", lw=1)
            ax.set_title(name)
            ax.set_xlabel("true tokens")
            ax.set_ylabel("predicted tokens")
        for ax in list(axes.flat)[n:]:
            ax.axis("off")
        fig.tight_layout()
        paths.append(out / "bench_pred_vs_true.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths
