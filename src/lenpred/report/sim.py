"""What ``lenpred simulate`` prints and writes from a sweep (:class:`lenpred.sim.sweep.SweepResult`): the
short-request P99 end-to-end latency table (console and Markdown), the ``sim`` artifact (results.json,
config.json, table.md and the plots) and the lines that close the run; what ``--list`` and
``--fit-profile`` print."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["KIND", "catalogue_lines", "print_table", "profile_lines", "result_lines", "write_sim"]

KIND = "sim"


def _fmt(v: Any, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v * 100:+.1f}%" if pct else f"{v:.3f}"


def print_table(res: Any) -> str:
    """Print the short-request P99 E2E table with rich; return it as Markdown too."""
    from rich.console import Console
    from rich.table import Table

    rows = res.table()
    pols = res.policies()
    cap = res.capacity_rps
    title = (f"{res.config.name}: P99 end-to-end latency (s) of short requests "
             f"(true output < {res.short_threshold:g} tokens = median); change vs {res.baseline}")
    t = Table(title=title, title_justify="left")
    header = ["load", "req/s"]
    for p in pols:
        header.append(p)
        if p != res.baseline:
            header.append(f"{p} change")
    for h in header:
        t.add_column(h, justify="right")
    md = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    for r in rows:
        load = "-" if r["load"] is None else (f"{r['load']:g}x" if cap else f"{r['load']:g}")
        cells = [load, "-" if r["rate_rps"] is None else f"{r['rate_rps']:.1f}"]
        for p in pols:
            cells.append(_fmt(r[p]))
            if p != res.baseline:
                cells.append(_fmt(r[f"{p} change"], pct=True))
        t.add_row(*cells)
        md.append("| " + " | ".join(cells) + " |")
    Console(width=max(100, 24 * len(header))).print(t)
    if cap:
        print(f"saturation throughput (probe): {cap:.1f} requests/s; loads are multiples of it")
    return "\n".join([title, "", *md])


def write_sim(res: Any, md: str, out: Path) -> Any:
    """results.json, config.json, table.md and the plots, as one artifact written atomically."""
    import tempfile

    from lenpred.io.artifacts import ArtifactHeader, write_artifact

    with tempfile.TemporaryDirectory() as tmp:
        res.write(tmp)
        (Path(tmp) / "table.md").write_text(md + "\n")
        if res.config.plots:
            from lenpred.report.sim_plots import write_plots

            write_plots(res, tmp)
        files = {p.name: p.read_bytes() for p in sorted(Path(tmp).iterdir()) if p.is_file()}
    return write_artifact(out, ArtifactHeader(kind=KIND, schema_version=1, config=res.config), files=files)


def result_lines(res: Any, art: Any, out: Path) -> list[str]:
    """Where the plots and results.json of the artifact ``art`` (in ``out``) are, the run's wall time,
    and a note when requests were rejected."""
    lines = [f"plot: {out / name}" for name in art.meta["files"] if name.endswith(".png")]
    lines.append(f"results: {out / 'results.json'} ({res.wall_s:.1f} s)")
    first = res.runs[0].summary
    if first["n_rejected"]:
        lines.append(f"note: {first['n_rejected']} request(s) rejected per run (prompt + output exceed one "
                     f"instance's KV capacity of {first['kv_capacity']} tokens)")
    return lines


def catalogue_lines() -> list[str]:
    """``lenpred simulate --list``: the latency profiles, queue policies, dispatchers and prediction models."""
    from lenpred.sched import DISPATCHERS, QUEUE_POLICIES
    from lenpred.sim.config import prediction_models
    from lenpred.sim.profiles import PROFILES

    def params(name: str) -> str:  # the policy's parameters and their defaults (its Params model)
        p = QUEUE_POLICIES.get(name).Params.model_validate({"name": name})
        return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in p.model_dump().items()
                         if k != "name")

    return ["profiles:", *(f"  {name:<18} {PROFILES.get(name).source}" for name in PROFILES),
            "queue policies (parameters and defaults; an arm's queue is {\"name\": POLICY, ...}):",
            *(f"  {name:<18} {params(name)}" for name in QUEUE_POLICIES.names()),
            "dispatchers:      " + ", ".join(DISPATCHERS.names()),
            "prediction models: " + ", ".join(prediction_models())]


def profile_lines(prof: Any, dest: Path) -> list[str]:
    """``lenpred simulate --fit-profile``: the fitted step-time formulas and where the profile is."""
    return [f"prefill t = {prof.prefill[0]:.4g} + {prof.prefill[1]:.4g} * sum(tokens) + "
            f"{prof.prefill[2]:.4g} * sum(tokens^2)  [s]",
            f"decode  t = {prof.decode[0]:.4g} + {prof.decode[1]:.4g} * sum(context) + "
            f"{prof.decode[2]:.4g} * batch  [s]",
            f"profile: {dest} (use it as cluster.profile)"]
