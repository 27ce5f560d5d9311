"""``lenpred bound RUN --out DIR``: the prefill oracle bound and the stochastic-process checks of a run.

Prints the bound (tokens and relative, with its bootstrap interval) for the three treatments of
truncated samples, the affine law (alpha, b, R^2), the segment-count CV, the normal-law agreement
and the hazard ramp, then writes bound.json, summary.md, per_prompt.csv and four plots into DIR.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from lenpred.errors import ConfigError
from lenpred.stats.config import CHOICES, SEGMENT_UNITS, BoundConfig

HELP = "per-prompt length statistics, the prefill oracle bound, normal / affine / hazard analysis"
EXAMPLE = "lenpred bound data/runs/smollm2-sharegpt --out out/bound"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = BoundConfig()
    parser.add_argument("run", help="run directory (made by `lenpred collect`)")
    parser.add_argument("--out", help="output directory (default: out/bound/<run name>)")
    parser.add_argument(
        "--headline",
        choices=CHOICES,
        default=d.headline,
        help="treatment of truncated samples for the headline bound: censoring-aware (normal tail imputed "
        "beyond the cap), EOS samples only, capped at max_new_tokens, or auto: censoring-aware unless the "
        "truncations are not a normal tail (repetition loops), then capped (default %(default)s)",
    )
    parser.add_argument(
        "--theory",
        choices=CHOICES,
        default=d.theory,
        help="variant for the normal-law and affine checks; auto: censoring-aware, or EOS-only when the "
        "truncations are a separate mode (default %(default)s)",
    )
    parser.add_argument(
        "--segments", choices=SEGMENT_UNITS, default=d.segment_unit, help="segment unit (default %(default)s)"
    )
    parser.add_argument("--segment-regex", help="separator regex for segments (overrides --segments)")
    parser.add_argument(
        "--min-samples", type=int, default=d.min_samples, help="samples a prompt needs (>= 2)"
    )
    parser.add_argument(
        "--boot", type=int, default=d.n_boot, help="bootstrap replicates (default %(default)s)"
    )
    parser.add_argument("--ci", type=float, default=d.ci, help="interval level (default %(default)s)")
    parser.add_argument(
        "--imputations", type=int, default=d.n_imputations, help="imputations of censored tails"
    )
    parser.add_argument(
        "--hazard-bin", type=int, default=d.hazard_bin, help="tokens per hazard bin (0 = auto)"
    )
    parser.add_argument(
        "--buckets", type=int, default=d.n_buckets, help="prompt-length buckets for the hazard"
    )
    parser.add_argument("--seed", type=int, default=d.seed, help="seed of bootstrap and imputation")
    parser.add_argument("--grid", type=int, default=16, help="prompts in the histogram grid")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")


def _config(args: argparse.Namespace) -> BoundConfig:
    return BoundConfig(
        headline=args.headline,
        theory=args.theory,
        min_samples=args.min_samples,
        segment_unit=args.segments,
        segment_regex=args.segment_regex,
        n_boot=args.boot,
        ci=args.ci,
        n_imputations=args.imputations,
        hazard_bin=args.hazard_bin,
        n_buckets=args.buckets,
        seed=args.seed,
    )


def _ci(ci: Any, fmt: str) -> str:
    lo, hi = ci
    return f"[{lo:{fmt}}, {hi:{fmt}}]"


def _print_normal_table(con: Any, nl: dict[str, Any]) -> None:
    from rich.table import Table

    from lenpred.stats.report import fmt

    o, r = nl["observed"], nl["if_normal"]
    nt = Table(title="Normal law (reference: same estimators on exactly normal prompts with the same K)")
    nt.add_column("check")
    nt.add_column("observed", justify="right")
    nt.add_column("if normal", justify="right")
    nt.add_row(
        "sum MAE_i / sum sqrt(2/pi) sd_i",
        f"{fmt(o['mae_ratio_aggregate'], '.3f')} {_ci(o['mae_ratio_aggregate_ci'], '.3f')}",
        f"{fmt(r['mae_ratio_aggregate'], '.3f')}",
    )
    nt.add_row(
        "MAE_i within 5% of normal law",
        f"{fmt(o['share_within_5pct'], '.1%')}",
        f"{fmt(r['share_within_5pct'], '.1%')}",
    )
    nt.add_row(
        "MAE_i within 10% of normal law",
        f"{fmt(o['share_within_10pct'], '.1%')}",
        f"{fmt(r['share_within_10pct'], '.1%')}",
    )
    nt.add_row("mean skewness", f"{fmt(o['skew_mean'], '+.3f')}", f"{fmt(r['skew_mean'], '+.3f')}")
    nt.add_row(
        "mean excess kurtosis",
        f"{fmt(o['excess_kurtosis_mean'], '+.3f')}",
        f"{fmt(r['excess_kurtosis_mean'], '+.3f')}",
    )
    nt.add_row(
        "mass within +-1 sd (68.3% limit)",
        f"{fmt(o['central_mass'], '.1%')}",
        f"{fmt(r['central_mass'], '.1%')}",
    )
    nt.add_row(
        "Shapiro-Wilk rejects at 5%",
        f"{fmt(o['shapiro_reject_share'], '.1%')}",
        f"{fmt(r['shapiro_reject_share'], '.1%')}",
    )
    con.print(nt)


def print_summary(summary: dict[str, Any], written: list[Path], elapsed: float) -> None:
    from rich.console import Console
    from rich.table import Table

    from lenpred.stats.summary_md import prompts_phrase

    con = Console()
    if not con.is_terminal:  # piped or captured: rich would assume 80 columns and squeeze the tables
        con = Console(width=150)
    c = summary["counts"]
    lvl = round(summary["config"]["ci"] * 100)
    con.print(
        f"[bold]lenpred bound[/bold] {summary['run']}  card {summary['card_hash']}  model {summary['model']}\n"
        f"{prompts_phrase(c)}, {c['samples']} samples ({c['samples_per_prompt']['min']}-{c['samples_per_prompt']['max']}"
        f" per prompt), {c['truncated_share']:.1%} truncated at max_new_tokens={c['max_new_tokens']}"
    )
    t = Table(title=f"Prefill oracle bound ({lvl}% bootstrap interval over prompts)")
    for col in (
        "variant",
        "prompts",
        "oracle MAE (tok)",
        "interval",
        "in-sample..LOO",
        "MAE / mean len",
        "mean |L-m|/L",
        "RMSE (tok)",
    ):
        t.add_column(col, justify="left" if col == "variant" else "right")
    for name, v in summary["variants"].items():
        label = v["label"] + (" *" if name == summary["headline"] else "")
        if not v.get("available"):
            t.add_row(label, "0", "n/a", "", "", "", "", "")
            continue
        t.add_row(
            label,
            str(v["n_prompts"]),
            f"{v['oracle_mae']:.1f}",
            _ci(v["oracle_mae_ci"], ".1f"),
            f"{v['oracle_mae_insample']:.1f}..{v['oracle_mae_loo']:.1f}",
            f"{v['relative_mae']:.3f} {_ci(v['relative_mae_ci'], '.3f')}",
            f"{v['mean_relative_error']:.3f}",
            f"{v['oracle_rmse']:.1f}",
        )
    con.print(t)

    af, seg = summary["affine"], summary["segments"]
    law = Table(title="Affine law sd = alpha*mu + b, segments")
    law.add_column("figure")
    law.add_column("value", justify="right")
    law.add_column("interval", justify="right")
    if af.get("available"):
        law.add_row("alpha (OLS, finite-K corrected)", f"{af['alpha']:.3f}", _ci(af["alpha_ci"], ".3f"))
        law.add_row("b (tokens)", f"{af['b']:.1f}", _ci(af["b_ci"], ".1f"))
        law.add_row("R^2 (denoised)", f"{af['r2']:.3f} ({af['r2_denoised']:.3f})", "")
        law.add_row(
            "alpha, b (Theil-Sen)",
            f"{af['robust']['alpha']:.3f}, {af['robust']['b']:.1f}",
            _ci(af["robust"]["alpha_ci"], ".3f"),
        )
    if seg.get("available"):
        law.add_row(f"{seg['unit']}-count CV", f"{seg['cv_mean']:.3f}", _ci(seg["cv_mean_ci"], ".3f"))
        avc = summary["alpha_vs_segment_cv"]
        if avc.get("available"):
            law.add_row("alpha / segment CV", f"{avc['ratio']:.2f}", "")
    else:
        law.add_row("segment-count CV", "n/a", seg.get("reason", ""))
    con.print(law)

    nl = summary["normal_law"]
    if nl.get("available"):
        _print_normal_table(con, nl)
    else:
        con.print(f"normal law: not available ({nl.get('reason')})")

    con.print(
        f"headline bound: {summary['variants'][summary['headline']]['label']}; theory checks on: "
        f"{summary['variants'][summary['theory_variant']]['label']} ({summary['variant_choice']})",
        highlight=False,
    )
    for claim, text in summary["verdicts"].items():
        con.print(f"[bold]{claim.replace('_', ' ')}[/bold]: {text}", highlight=False)
    for text in summary.get("cautions", []):
        con.print(f"[yellow]caution[/yellow]: {text}", highlight=False)
    con.print(f"wrote {', '.join(p.name for p in written)} to {written[0].parent} ({elapsed:.1f} s)")


def run(args: argparse.Namespace) -> int:
    from lenpred.stats.report import analyse_run, write_json, write_markdown, write_per_prompt

    config = _config(args)
    if args.grid < 1:
        raise ConfigError(f"--grid {args.grid} must be at least 1")
    out = Path(args.out) if args.out else Path("out/bound") / Path(args.run).resolve().name
    t0 = time.perf_counter()
    analysis = analyse_run(args.run, config)
    out.mkdir(parents=True, exist_ok=True)
    written = [write_json(analysis, out), write_per_prompt(analysis, out)]
    plots: list[Path] = []
    if not args.no_plots:
        from lenpred.report.bound_plots import write_bound_plots

        plots = write_bound_plots(analysis, out, args.grid)
    written += [write_markdown(analysis, out, plots), *plots]
    print_summary(analysis.summary, written, time.perf_counter() - t0)
    return 0
