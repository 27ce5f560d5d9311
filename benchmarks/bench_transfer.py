"""Transfer: the same heads benched on their own run's test split and on another prompt source.

Issue 9 part 5 (seed 004's point): absolute MAE moves when the prompts change, MAE / that run's own
oracle bound should stay comparable. This script reads two `lenpred bench` reports -- the home run's
test split and a second run under the same model and sampling card (e.g. AlpacaEval prompts,
`data/runs/collect_alpaca_eval.sh`, split with `--test-min-samples 4 --test-share 1`) -- and prints them
side by side, with the change of each figure and how well each keeps the heads' ranking::

    lenpred bench --run data/runs/smollm2-sharegpt --heads out/heads/* --out out/bench/smollm2-sharegpt
    lenpred bench --run data/runs/smollm2-alpaca-eval --heads out/heads/* --out out/bench/smollm2-alpaca-eval
    python -m benchmarks.bench_transfer --home out/bench/smollm2-sharegpt \\
        --transfer out/bench/smollm2-alpaca-eval --out out/bench/transfer

Writes OUT/transfer.json (both bounds, one row per predictor, the summary) and OUT/transfer.md, and
OUT/transfer.png (MAE / bound on both runs, one point per head).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from scipy.stats import spearmanr


def _load(folder: str) -> dict[str, Any]:
    p = Path(folder) / "bench.json"
    if not p.is_file():
        sys.exit(f"error: {p} not found: pass a folder written by `lenpred bench --out`")
    d = json.loads(p.read_text())
    if not isinstance(d, dict) or "rows" not in d or "bound" not in d:
        sys.exit(f"error: {p} is not a lenpred bench report (no rows / bound)")
    return d


def _rows(d: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in d["rows"] if r.get("subset", "all") == "all"}


def compare(home: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    a, b = _rows(home), _rows(other)
    names = [n for n in a if n in b]
    if not names:
        raise SystemExit("error: the two reports share no predictor: bench the same heads on both runs")
    rows = []
    for n in names:
        ma, mb = a[n]["metrics"], b[n]["metrics"]
        rows.append({
            "predictor": n,
            "home_mae": ma["mae"], "home_mae_over_bound": a[n].get("mae_over_bound"),
            "transfer_mae": mb["mae"], "transfer_mae_over_bound": b[n].get("mae_over_bound"),
            "home_coverage80": ma.get("coverage80"), "transfer_coverage80": mb.get("coverage80"),
            "home_kendall_tau": ma.get("kendall_tau"), "transfer_kendall_tau": mb.get("kendall_tau"),
        })
    ba, bb = home["bound"]["oracle_mae"], other["bound"]["oracle_mae"]

    def spread(key: str) -> dict[str, float]:
        """How much a figure moves between runs: the mean absolute relative change over the heads."""
        ch = [abs(r[f"transfer_{key}"] / r[f"home_{key}"] - 1) for r in rows
              if r[f"home_{key}"] and r[f"transfer_{key}"] is not None]
        return {"mean_abs_rel_change": float(sum(ch) / len(ch)) if ch else math.nan}

    rank = spearmanr([r["home_mae_over_bound"] for r in rows], [r["transfer_mae_over_bound"] for r in rows])
    return {
        "home": {"protocol": home.get("protocol"), "bound": home["bound"]},
        "transfer": {"protocol": other.get("protocol"), "bound": other["bound"]},
        "bound_change": bb / ba - 1,
        "rows": rows,
        "summary": {
            "mae": spread("mae"),
            "mae_over_bound": spread("mae_over_bound"),
            "rank_spearman": float(rank.statistic) if len(rows) > 2 else math.nan,
        },
    }


def _f(x: Any, digits: int = 1) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _run_label(side: dict[str, Any]) -> str:
    p = side.get("protocol") or {}
    return str(p.get("run") or p.get("data", {}).get("source") or "?")


def render(res: dict[str, Any]) -> str:
    h, t = res["home"]["bound"], res["transfer"]["bound"]
    lines = [
        "# Transfer: the same heads on another prompt source",
        "",
        f"- home: {_run_label(res['home'])} ({h['n_prompts']} test prompts, {h['n_samples']} samples), "
        f"oracle bound {h['oracle_mae']:.1f}",
        f"- transfer: {_run_label(res['transfer'])} ({t['n_prompts']} prompts, {t['n_samples']} samples), "
        f"oracle bound {t['oracle_mae']:.1f} ({100 * res['bound_change']:+.1f}%)",
        "",
        "| predictor | home MAE | home MAE / bound | transfer MAE | transfer MAE / bound | MAE change | MAE / bound change |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| **oracle bound** | {h['oracle_mae']:.1f} | 1.000 | {t['oracle_mae']:.1f} | 1.000 | "
        f"{100 * res['bound_change']:+.1f}% | - |",
    ]
    for r in res["rows"]:
        ch = r["transfer_mae"] / r["home_mae"] - 1
        chr_ = (r["transfer_mae_over_bound"] / r["home_mae_over_bound"] - 1) if r["home_mae_over_bound"] else math.nan
        lines.append(f"| {r['predictor']} | {_f(r['home_mae'])} | {_f(r['home_mae_over_bound'], 3)} | "
                     f"{_f(r['transfer_mae'])} | {_f(r['transfer_mae_over_bound'], 3)} | {100 * ch:+.1f}% | "
                     f"{_f(100 * chr_)}% |")
    s = res["summary"]
    lines += [
        "",
        f"Mean absolute change over the heads: MAE {100 * s['mae']['mean_abs_rel_change']:.1f}%, "
        f"MAE / bound {100 * s['mae_over_bound']['mean_abs_rel_change']:.1f}%; "
        f"Spearman rank correlation of MAE / bound between the runs: {_f(s['rank_spearman'], 2)}.",
    ]
    return "\n".join(lines) + "\n"


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 5))
    xs = [r["home_mae_over_bound"] for r in res["rows"]]
    ys = [r["transfer_mae_over_bound"] for r in res["rows"]]
    ax.scatter(xs, ys)
    for r, x, y in zip(res["rows"], xs, ys, strict=True):
        ax.annotate(r["predictor"], (x, y), fontsize=8, xytext=(3, 3), textcoords="offset points")
    lo, hi = min(xs + ys + [1.0]) - 0.02, max(xs + ys) + 0.02
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="same MAE / bound")
    ax.set_xlabel(f"MAE / bound, home ({_run_label(res['home'])})")
    ax.set_ylabel(f"MAE / bound, transfer ({_run_label(res['transfer'])})")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--home", required=True, help="bench report folder of the heads' own run (test split)")
    ap.add_argument("--transfer", required=True, help="bench report folder of the other run (same card)")
    ap.add_argument("--out", default="out/bench/transfer")
    a = ap.parse_args(argv)
    home, other = _load(a.home), _load(a.transfer)
    ph, pt = home.get("protocol") or {}, other.get("protocol") or {}
    for key in ("model_fingerprint", "sampling"):
        if ph.get(key) != pt.get(key):
            sys.exit(f"error: the two reports differ in {key} ({ph.get(key)} vs {pt.get(key)}): "
                     "a transfer compares runs under the same model and sampling card")
    res = compare(home, other)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "transfer.json").write_text(json.dumps(res, indent=2, default=float) + "\n")
    md = render(res)
    (out / "transfer.md").write_text(md)
    plot(res, out / "transfer.png")
    print(md)
    print(f"written: {out}/transfer.json, transfer.md, transfer.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
