"""Plots of a sweep (matplotlib, Agg backend): latency CDFs per policy, and P99 vs load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from lenpred.sim.sweep import SweepResult


def _plt():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _fmt_load(res: SweepResult, load: float | None) -> str:
    if load is None:
        return "as configured"
    if res.capacity_rps is not None:
        return f"{load:g}x capacity ({load * res.capacity_rps:.0f} req/s)"
    return f"{load:g} req/s"


def plot_cdfs(res: SweepResult, path: str | Path, dpi: int = 90) -> Path:
    """E2E latency CDFs per policy: one column per load, rows short and all requests."""
    plt = _plt()
    loads = res.loads()
    fig, axes = plt.subplots(2, len(loads), figsize=(3.6 * len(loads), 5.6), squeeze=False, sharey=True)
    for j, load in enumerate(loads):
        for i, group in enumerate(("short", "all")):
            ax = axes[i][j]
            for pol in res.policies():
                run = res.get(pol, load)
                x = run.e2e[np.isfinite(run.e2e)]
                if group == "short":
                    x = run.e2e[run.short & np.isfinite(run.e2e)]
                if x.size == 0:
                    continue
                x = np.sort(x)
                ax.plot(x, np.arange(1, x.size + 1) / x.size, label=pol, lw=1.4)
            ax.set_xscale("log")
            ax.grid(alpha=0.3, which="both")
            ax.axhline(0.99, color="grey", lw=0.6, ls=":")
            if i == 0:
                ax.set_title(_fmt_load(res, load), fontsize=9)
            if j == 0:
                ax.set_ylabel(f"CDF ({group} requests)")
            if i == 1:
                ax.set_xlabel("end-to-end latency (s)")
    axes[0][0].legend(fontsize=8, loc="lower right")
    fig.suptitle(f"{res.config.name}: E2E latency CDF (short = output < {res.short_threshold:g} tokens)",
                 fontsize=10)
    return _save(plt, fig, path, dpi)


def _save(plt: Any, fig: Any, path: str | Path, dpi: int) -> Path:
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    return out


def plot_p99_vs_load(res: SweepResult, path: str | Path, dpi: int = 90) -> Path:
    """P99 E2E latency vs load per policy: short requests solid, all requests dashed."""
    plt = _plt()
    loads = [x for x in res.loads() if x is not None]
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    for k, pol in enumerate(res.policies()):
        color = f"C{k}"
        for group, ls in (("short", "-"), ("all", "--")):
            ys = [res.get(pol, x).summary["latency"][group]["e2e"]["p99"] for x in loads]
            ax.plot(loads, [np.nan if y is None else y for y in ys], ls, marker="o", ms=3, color=color,
                    label=f"{pol} ({group})")
    ax.set_yscale("log")
    ax.set_xlabel("load (x saturation throughput)" if res.capacity_rps else "load (requests/s)")
    ax.set_ylabel("P99 end-to-end latency (s)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    ax.set_title(f"{res.config.name}: P99 vs load", fontsize=10)
    return _save(plt, fig, path, dpi)


def write_plots(res: SweepResult, out_dir: str | Path) -> list[Path]:
    d = Path(out_dir)
    return [plot_cdfs(res, d / "latency_cdf.png"), plot_p99_vs_load(res, d / "p99_vs_load.png")]
