"""The tables bench_sim_real.py prints: the arms, the tail's anatomy and the predictions' errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _fmt(v: Any, pct: bool = False, nd: int = 3) -> str:
    if v is None:
        return "-"
    return f"{100 * v:+.1f}%" if pct else f"{v:.{nd}f}"


def _emit(title: str, header: list[str], rows: list[list[str]], left: int = 1) -> str:
    """Print a table with rich; return it as Markdown (the first ``left`` columns left-aligned)."""
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for i, h in enumerate(header):
        t.add_column(h, justify="left" if i < left else "right")
    md = ["| " + " | ".join(header) + " |", "|" + "---|" * left + "---:|" * (len(header) - left)]
    for cells in rows:
        t.add_row(*cells)
        md.append("| " + " | ".join(cells) + " |")
    Console(width=160).print(t)
    return "\n".join([title, "", *md])


def print_rows(summary: dict[str, Any]) -> str:
    """The per-arm table: one block of rows per load."""
    cap = summary["capacity_rps"]
    title = (f"P99 end-to-end latency (s): short requests (true output < {summary['short_threshold_tokens']:g} "
             f"tokens) and all; change vs {summary['baseline']}" + (f"; capacity {cap:.1f} req/s" if cap else ""))
    header = ["load", "arm", "policy", "predictor", "aging (tok/s)", "queue key", "short P99", "change",
              "all P99", "change"]
    cells = []
    for r in summary["rows"]:
        load = "-" if r["load"] is None else (f"{r['load']:g}x" if cap else f"{r['load']:g}")
        cells.append([load, r["arm"], r["policy"], r["predictor"], f"{r['aging']:g}", r["key"],
                      _fmt(r["short_p99_s"]), _fmt(r["short_change"], pct=True), _fmt(r["all_p99_s"]),
                      _fmt(r["all_change"], pct=True)])
    return _emit(title, header, cells, left=6)


def print_anatomy(summary: dict[str, Any]) -> str:
    tails = summary.get("tail_anatomy") or []
    if not tails:
        return ""
    load = tails[0]["load"]
    title = (f"the short-request tail at load {load:g}: short requests at or above their P99 (which prompts, "
             "where their prediction ranks, how long they queued, how many later arrivals started decoding first)")
    header = ["arm", "short P99 (s)", "tail requests", "prompts", "top-5 prompts' share", "pred percentile",
              "true tokens", "queue wait (s)", "wait / E2E", "overtakers", "of which short"]
    cells = []
    for t in tails:
        arm = t["arm"]
        if not t.get("n_tail"):
            cells.append([arm] + ["-"] * (len(header) - 1))
            continue
        cells.append([arm, _fmt(t["short_p99_s"]), str(t["n_tail"]), str(t["tail_prompts"]),
                      _fmt(t["top5_prompts_share"], nd=2), _fmt(t["pred_percentile_median"], nd=2),
                      f"{t['true_tokens_median']:.0f}", _fmt(t["queue_wait_median_s"], nd=2),
                      _fmt(t["wait_share_median"], nd=2), f"{t['overtakers_median']:.0f}",
                      _fmt(t["overtakers_short_share"], nd=2)])
    return _emit(title + " (medians over the tail)", header, cells)


def print_errors(summary: dict[str, Any]) -> str:
    """Each distinct prediction's error size and structure (aging arms share their plain arm's)."""
    b = summary["bound"]
    w = summary["workload"]
    st = summary.get("structure") or {}
    title = (f"predictions on the workload's {w['distinct_samples']} samples of {w['prompts']} prompts "
             f"(roles {', '.join(summary['roles']) or 'all'})"
             + (f"; oracle bound {b['oracle_mae']:.1f} tokens" if b else "")
             + "; tau / sd ratio / short in top decile are of the queue key")
    header = ["arm", "prediction", "MAE (tokens, over prompts)", "MAE / bound", "rel. MAE (samples)",
              "Kendall tau", "sd(key) / sd(true)", "short in top decile"]
    cells = []
    for e in summary["arms"]:
        p = e["prediction"]
        if p is None or " aging" in e["arm"]:
            continue
        what = f"table {Path(p['path']).name}" if p["model"] == "table" else p["model"]
        if p["model"] == "lognormal":
            what += f" (rel_mae {p['rel_mae']:g})"
        cells.append([e["arm"], what, "-" if e["mae"] is None else f"{e['mae']:.1f}",
                      _fmt(e.get("mae_over_bound")), _fmt(e["rel_mae_samples"]), _fmt(e["kendall_tau"]),
                      _fmt(e["sd_ratio"], nd=2), _fmt(e["short_in_top_decile"])])
    pm = st.get("prompt_median_in_sample")
    if pm:
        cells.append(["(any prompt-only ranking)", "prompt's own in-sample median", "-", "-", "-",
                      _fmt(pm["kendall_tau"]), _fmt(pm["sd_ratio"], nd=2), _fmt(pm["short_in_top_decile"])])
    md = _emit(title, header, cells, left=2)
    if st.get("within_prompt_variance_share") is not None:
        note = (f"within-prompt share of the true lengths' variance: {st['within_prompt_variance_share']:.3f} "
                "(no prompt-only predictor can rank that part)")
        print(note)
        md += "\n\n" + note
    return md
