"""docs/results.md, rendered from its template and the committed figure files the benchmarks write.

The template (docs/results.template.md, Jinja2) holds the prose, and as dated text the figures that have
no committed JSON file behind them; every table this script renders comes from one of ``SOURCES``:

    python benchmarks/results_page.py            # write docs/results.md
    python benchmarks/results_page.py --check    # exit 1 (one line) if docs/results.md is not what it would write

Edit the template or rerun a benchmark (which rewrites its JSON), then rerun this script; the test suite
runs ``--check`` (tests/test_results_page.py). ``--root DIR`` renders another checkout (or a copy).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = "docs/results.template.md"
PAGE = "docs/results.md"
COMMAND = "python benchmarks/results_page.py"

# the router's overhead before and after each fix (two runs each), by the files' prefix, with the table's row
# names: "" the relay fix (commit 69b5b9c, the first machine), "fastpath-" the completion routes past FastAPI's
# middlewares (commit 3ab8c6c, the second machine)
OVERHEAD_FIXES = {"": ("before the fix", "after the fix"), "fastpath-": ("before", "after")}
AB_RUNS = 6  # the A/B runs of the router on two llama.cpp servers: docs/results/router/ab-run1..N.json

def _overhead_file(fix: str, when: str, i: int) -> str:
    """An overhead run's figure file under docs/results/ (``fix``: a key of OVERHEAD_FIXES)."""
    return f"router/overhead-{fix}{when}-{i}.json"


def _overhead_source(fix: str, when: str, i: int) -> str:
    """Its name in SOURCES (router_overhead_after_1, router_overhead_fastpath_before_2, ...)."""
    return f"router_overhead_{fix.replace('-', '_')}{when}_{i}"


# the figure files, by the name the template knows them under: (path from the root, what writes it)
SOURCES: dict[str, tuple[str, str]] = {
    "policies": ("docs/policies/policies.json", "python benchmarks/bench_policies.py --out docs/policies"),
    "draft": ("docs/draft_bench.json", "python benchmarks/bench_spec.py ... --out docs/draft_bench.json"),
    "draft_k56": ("docs/draft_bench_k56.json", "python benchmarks/bench_spec.py ... --ks 5,6 --out docs/draft_bench_k56.json"),
    "outlets_bench": ("docs/outlets_real/outlets_bench.json", "lenpred outlets bench ... --out docs/outlets_real"),
    "outlets_meta": ("docs/outlets_real/meta.json", "lenpred outlets bench ... --out docs/outlets_real"),
    "outlets_schedule": ("docs/outlets_real/schedule.json", "lenpred outlets schedule ... (schedule.json)"),
    "outlets_cost": ("docs/outlets_real/cost.json", "python benchmarks/bench_outlets_cost.py ... (cost.json)"),
    # the predictor zoo: `bash benchmarks/zoo_reference.sh` writes them under out/ and copies them here
    "zoo_manifest": ("docs/results/manifest.json", "bash benchmarks/zoo_reference.sh"),
    "bound_all": ("docs/results/bound-all.json",
                  "lenpred bound data/runs/smollm2-sharegpt --out out/bound/smollm2-sharegpt (zoo_reference.sh)"),
    "bound_k8": ("docs/results/bound-k8.json",
                 "lenpred bound data/runs/smollm2-sharegpt --min-samples 8 ... (zoo_reference.sh)"),
    "bound_k24": ("docs/results/bound-k24.json",
                  "lenpred bound data/runs/smollm2-sharegpt --min-samples 24 ... (zoo_reference.sh)"),
    "bench_home": ("docs/results/bench-smollm2-sharegpt.json",
                   "lenpred bench --run data/runs/smollm2-sharegpt ... (zoo_reference.sh)"),
    "bench_alpaca": ("docs/results/bench-smollm2-alpaca-eval.json",
                     "lenpred bench --run data/runs/smollm2-alpaca-eval ... (zoo_reference.sh)"),
    "transfer": ("docs/results/transfer.json", "python benchmarks/bench_transfer.py ... (zoo_reference.sh)"),
    "learning_curve": ("docs/results/learning_curve.json",
                       "python benchmarks/bench_learning_curve.py ... (zoo_reference.sh)"),
    "predictors": ("docs/results/predictors.json", "python benchmarks/bench_predictors.py ... (zoo_reference.sh)"),
    "sim_real": ("docs/results/sim_real.json", "python benchmarks/bench_sim_real.py ... (zoo_reference.sh)"),
    # the router (bench_router.py on an idle machine, 2026-12-02; copied here with `logs` set to null, see the manifest)
    **{_overhead_source(fix, when, i): (f"docs/results/{_overhead_file(fix, when, i)}",
                                        "python benchmarks/bench_router.py overhead --rounds 6 --out OUT.json, then "
                                        f"python benchmarks/results_page.py --adopt OUT.json {_overhead_file(fix, when, i)}")
       for fix in OVERHEAD_FIXES for when in ("before", "after") for i in (1, 2)},
    **{f"router_ab_run{i}": (f"docs/results/router/ab-run{i}.json",
                             "python benchmarks/bench_router.py ab --requests 192 ... (the flags: docs/results.md, "
                             f"run {i}), then python benchmarks/results_page.py --adopt OUT.json router/ab-run{i}.json")
       for i in range(1, AB_RUNS + 1)},
}


class PageError(Exception):
    """A figure file that is missing or not what its benchmark writes: one line, exit 1."""


# ----------------------------------------------------------------------------------------------- tables
def table(head: list[str], rows: list[list[str]], align: str | None = None) -> str:
    """A Markdown table; ``align`` one character per column (``l`` or ``r``), default: first left, rest right."""
    align = align or "l" + "r" * (len(head) - 1)
    rule = "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"
    return "\n".join(["| " + " | ".join(head) + " |", rule, *("| " + " | ".join(r) + " |" for r in rows)])


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _policies_report() -> ModuleType:
    """benchmarks/policies_report.py, whose summary the study's own report (policies.md) is made of."""
    spec = importlib.util.spec_from_file_location("policies_report", Path(__file__).with_name("policies_report.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def policies_figures(d: dict[str, Any]) -> dict[str, Any]:
    """The policy study (policies.json): short-request P99 change by load for the study's figure arms on
    ShareGPT / Poisson (as policies.md computes it), and the recommended default with its candidates."""
    pr = _policies_report()
    rows = d["rows"]
    sm = pr.summary(rows)
    loads = sorted({r["load"] for r in rows})
    wl, arr = "sharegpt", "poisson"
    out = []
    for arm in pr.FIGURE_ARMS:
        a = sm.get(arm)
        if a is None:
            continue
        cells = [f"{pct(m[0])} ({pct(m[1])})" if (m := a["mean"].get((wl, arr, x))) else "-" for x in loads]
        out.append([arm[0], arm[1], *cells, str(sum(1 for c in a["fails"] if c[:2] == (wl, arr)))])
    by_load = table(["policy", "predictor", *(f"{x:g}x" for x in loads), "failed cells"], out, "ll" + "r" * (len(loads) + 1))
    cand = d["recommended"]["candidates"]
    rec = table(["policy", "failed cells", "cells", "short P99 change, best prefill head, 1.1-1.2x"],
                [[c["policy"], str(c["failed_cells"]), str(c["cells"]), pct(c["gain"])] for c in cand])
    seeds = sorted({r["seed"] for r in rows})
    return {"by_load": by_load, "candidates": rec, "choice": d["recommended"]["choice"], "cells": len(rows),
            "workloads": ", ".join(sorted({r["workload"] for r in rows})), "seeds": len(seeds),
            "loads": ", ".join(f"{x:g}" for x in loads)}


def draft_figures(main: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """EAGLE-3 speculative decoding (bench_spec.py's JSON): one row per mode and drafting; ``extra``'s chains
    (a second run with its own plain baseline) marked (*)."""
    def label(r: dict[str, Any]) -> str:
        if r["tree"]:
            return "tree " + ",".join(map(str, r["tree"]))
        return "plain (k = 0)" if r["k"] == 0 else f"chain k = {r['k']}"

    rows = [(r, "") for r in main["rows"]] + [(r, " (*)") for r in extra["rows"] if r["k"] > 0]
    order = {"greedy": 0, "sampling": 1}
    rows.sort(key=lambda rs: (order.get(rs[0]["mode"], 2), rs[0]["tree"] is not None, rs[0]["k"],
                              rs[0]["tree"] or []))
    out = []
    for r, mark in rows:
        out.append(["greedy" if r["mode"] == "greedy" else "card sampling", label(r) + mark, f"{r['tau']:.2f}",
                    ", ".join(f"{v:.2f}" for v in r["accept_cond"]), f"{r['verify_cost'] or 0:.2f}",
                    f"{r['draft_cost'] or 0:.2f}", f"{r['tokens_per_s']:.2f}", f"{r['speedup']:.2f}"])
    t = table(["mode", "drafting", "tau", "acceptance at depth 1, 2, 3, ... (conditional)", "verify / plain pass",
               "drafting / plain pass", "tokens/s", "speed-up"], out, "llrlrrrr")
    base = {r["mode"]: r["tokens_per_s"] for r in extra["rows"] if r["k"] == 0}
    return {"table": t, "prompts": len(main["prompts"]), "max_new_tokens": main["max_new_tokens"],
            "threads": main["threads"], "draft": main["draft"],
            "extra_baseline": " / ".join(f"{base[m]:.1f}" for m in ("greedy", "sampling") if m in base)}


def outlets_figures(bench: dict[str, Any], meta: dict[str, Any], schedule: list[dict[str, Any]],
                    cost: dict[str, Any]) -> dict[str, Any]:
    """OUTLETS (docs/outlets_real): remaining-length MAE by progress (outlets_bench.json, read through its
    schema), the value for scheduling (schedule.json) and the per-cycle cost (cost.json)."""
    from lenpred.outlets.evaluate import OutletsBench

    res = OutletsBench.model_validate(bench)
    ids = list(res.series.get("progress", []))
    labels = {p.id: p.label for p in res.points}
    rows = []
    for m in res.methods:
        cells = ["-" if m.points.get(i) is None or m.points[i].mae is None else f"{m.points[i].mae:.1f}" for i in ids]
        ratio = m.ratio_progress_vs_reference
        ci = m.ratio_progress_vs_reference_ci
        r = "-" if ratio is None else f"{ratio:.3f}" + (f" ({ci[0]:.3f}-{ci[1]:.3f})" if None not in ci else "")
        mean = "-" if m.mean_mae_progress is None else f"{m.mean_mae_progress:.1f}"
        rows.append([f"`{m.name}`", *cells, mean, r])
    mae = table(["method", *(labels[i] for i in ids), "mean over progress", f"/ {res.protocol.reference}"], rows)
    sched = table(["load", "arm", "short P99 E2E (s)", "vs baseline", "overall P99 E2E (s)", "vs baseline",
                   "decode tokens max/mean", "batch CV"],
                  [[f"{r['load']:g}", r["arm"], f"{r['short_p99_e2e_s']:.3f}", pct(r["short_p99_change"]),
                    f"{r['all_p99_e2e_s']:.3f}", pct(r["all_p99_change"]), f"{r['tokens_max_over_mean']:.3f}",
                    f"{r['batch_cv']:.3f}"] for r in schedule], "rlrrrrrr")
    c = table(["head", "cycles", "ms per cycle (wall)", "p90 (ms)", "share of a target pass"],
              [[f"`{h}`", str(v["cycles"]), f"{v['wall_ms']:.2f}", f"{v['wall_p90_ms']:.2f}", f"{100 * v['share_wall']:.2f}%"]
               for h, v in cost["heads"].items()])
    p = res.protocol
    return {"mae": mae, "schedule": sched, "cost": c, "created": meta.get("created_at", "?")[:10],
            "reference": p.reference, "test_prompts": p.test_prompts, "test_samples": p.test_samples,
            "target_pass_ms": f"{cost['target_pass_wall_ms']:.1f}", "n_boot": p.n_boot}


# ----------------------------------------------------------------------------------------- the predictor zoo
HIDDEN = ("ridge", "mlp", "softlabel", "egtp", "film", "moe", "probe")  # the hidden-state heads
LABELS = {"proxy": "proxy (MiniLM, text only)", "prompt-median (oracle)": "prompt-median (oracle, LOO)"}


def count(x: float) -> str:
    """A count with thousands separators."""
    return f"{x:,.0f}"


def rng(values: list[float], fmt: str = ".3f", sep: str = "-") -> str:
    """'lo-hi' of some figures (one figure when they agree at that precision)."""
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    return lo if lo == hi else f"{lo}{sep}{hi}"


def made(manifest: dict[str, Any], name: str) -> str:
    return str(manifest["files"][name]["made"])


def _bound_column(d: dict[str, Any]) -> dict[str, Any]:
    """One column of the bound table: the figures of one bound.json, as the page shows them."""
    v = d["variants"]
    cap = v["capped"]

    def mae(name: str) -> str:
        x = v[name]
        return f"{x['oracle_mae']:.0f}" if x.get("available", True) else "n/a"

    af, seg, nl = d["affine"], d["segments"], d["normal_law"]
    hz = (d["hazard"].get("normalized") or {})
    affine = "n/a"
    if af.get("available", True):
        affine = (f"alpha {af['alpha']:.2f} [{af['alpha_ci'][0]:.2f}, {af['alpha_ci'][1]:.2f}], b {af['b']:.0f} tokens "
                  f"[{af['b_ci'][0]:.0f}, {af['b_ci'][1]:.0f}], R^2 {af['r2']:.2f} (denoised {af['r2_denoised']:.2f}); "
                  f"Theil-Sen {af['robust']['alpha']:.2f}")
    segs = "n/a"
    if seg.get("available", True):
        segs = f"{seg['cv_mean']:.2f} [{seg['cv_mean_ci'][0]:.2f}, {seg['cv_mean_ci'][1]:.2f}] / {seg['length_cv_mean']:.2f}"
    normal = shape = "n/a"
    if nl.get("available", True):
        o = nl["observed"]
        ci = o.get("mae_ratio_aggregate_ci")
        normal = f"{o['mae_ratio_aggregate']:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
        shape = f"{100 * o['shapiro_reject_share']:.0f}%; {o['skew_mean']:+.2f}, {o['excess_kurtosis_mean']:+.2f}"
    ks = d["counts"]["samples_per_prompt"]
    return {
        "mae": f"{cap['oracle_mae']:.0f}", "mae_ci": f"[{cap['oracle_mae_ci'][0]:.0f}, {cap['oracle_mae_ci'][1]:.0f}]",
        "rel": f"{cap['relative_mae']:.3f}", "rel_ci": f"[{cap['relative_mae_ci'][0]:.3f}, {cap['relative_mae_ci'][1]:.3f}]",
        "eos_censored": f"{mae('eos')} / {mae('censored')} tokens", "rmse": f"{cap['oracle_rmse']:.0f} tokens",
        "affine": affine, "segments": segs, "normal": normal, "shape": shape,
        "hazard": "-" if hz.get("late_early_ratio") is None else f"{hz['late_early_ratio']:.2f}x",
        "k": str(ks["min"]) if ks["min"] == ks["max"] else f"{ks['min']}-{ks['max']}",
    }


def bound_figures(manifest: dict[str, Any], all_: dict[str, Any], k8: dict[str, Any], k24: dict[str, Any],
                  bench: dict[str, Any]) -> dict[str, Any]:
    """The prefill bound (lenpred bound's bound.json): the 8+-sample prompts against the 24-sample ones,
    every prompt of the complete run in a sentence, and the figures the prose quotes."""
    a, b = _bound_column(k8), _bound_column(k24)
    hz = k8["hazard"].get("normalized") or {}
    early, late = hz.get("early_window_u", [0.4, 0.8]), hz.get("late_window_u", [1.2, 1.6])
    rows = [
        ["oracle MAE on served (capped) lengths, the headline", f"**{a['mae']} tokens** {a['mae_ci']}",
         f"{b['mae']} {b['mae_ci']}"],
        ["oracle MAE / mean length", f"**{a['rel']}** {a['rel_ci']}", f"{b['rel']} {b['rel_ci']}"],
        ["EOS-only / censoring-aware oracle MAE", a["eos_censored"], b["eos_censored"]],
        ["oracle RMSE (capped)", a["rmse"], b["rmse"]],
        [f"affine law sd = alpha mu + b ({k8['variants'][k8['theory_variant']]['label']} samples, finite-K corrected)", a["affine"], b["affine"]],
        [f"CV of the {k8['config']['segment_unit']} count / of the length, per prompt", a["segments"], b["segments"]],
        ["sum MAE_i / sum sqrt(2/pi) sd_i (1 if normal)", a["normal"], b["normal"]],
        ["Shapiro-Wilk rejects (5% if normal); skew, excess kurtosis", a["shape"], b["shape"]],
        [f"hazard at t/median in [{late[0]:g}, {late[1]:g}) vs [{early[0]:g}, {early[1]:g}) (1 if constant)",
         a["hazard"], b["hazard"]],
    ]
    c8, c24 = k8["counts"], k24["counts"]
    t = table(["figure (95% bootstrap interval over prompts)", f"{count(c8['prompts'])} prompts (K = {a['k']})",
               f"{count(c24['prompts'])} prompts x {b['k']}"], rows, "lll")
    cap_all = all_["variants"]["capped"]
    by_k = cap_all.get("by_k") or {}
    af, seg, nl, tc = k8["affine"], k8["segments"], k8["normal_law"], k8["tail_check"]
    ratios = [x["hazard"]["normalized"]["late_early_ratio"] for x in (k8, k24) if x["hazard"].get("normalized")]
    cap8 = k8["variants"]["capped"]
    return {
        "table": t, "made": made(manifest, "bound-k8.json"),
        "k8_prompts": count(c8["prompts"]), "k8_samples": count(c8["samples"]), "k8_truncated": f"{100 * c8['truncated_share']:.1f}%",
        "k24_prompts": count(c24["prompts"]),
        "all_prompts": count(all_["counts"]["prompts"]), "all_samples": count(all_["counts"]["samples"]),
        "all_k2": count(by_k["2"]["n_prompts"]) if "2" in by_k else "0",
        "all_mae": f"{cap_all['oracle_mae']:.0f}",
        "all_ci": f"[{cap_all['oracle_mae_ci'][0]:.0f}, {cap_all['oracle_mae_ci'][1]:.0f}]",
        "all_rel": f"{cap_all['relative_mae']:.2f}", "bench_bound": f"{bench['bound']['oracle_mae']:.1f}",
        "mae": f"{cap8['oracle_mae']:.0f}", "rel_pct": f"{100 * cap8['relative_mae']:.0f}%",
        "alpha": f"{af['alpha']:.2f}", "b": f"{af['b']:.0f}", "r2": f"{af['r2']:.2f}", "r2_denoised": f"{af['r2_denoised']:.2f}",
        "hazard": rng(ratios, ".1f"), "normal_over": f"{100 * (1 - nl['observed']['mae_ratio_aggregate']):.0f}%",
        "tail_observed": count(tc["observed_truncated"]), "tail_prompts": count(tc["n_prompts"]),
        "tail_expected": f"{tc['expected_truncated']:.0f}",
        "segment_cv": f"{seg['cv_mean']:.2f}", "length_cv": f"{seg['length_cv_mean']:.2f}",
    }


def _is_ref(r: dict[str, Any]) -> bool:
    return r["made_by"] == "oracle"


def bench_figures(manifest: dict[str, Any], d: dict[str, Any], curve: dict[str, Any]) -> dict[str, Any]:
    """The predictor bench on the test split (lenpred bench's bench.json): the table (floors, hidden-state
    heads, the prompt-median oracle) and the figures the bullets quote; the seed spread from the learning
    curve's draws at all training prompts."""
    rows = [r for r in d["rows"] if r["subset"] == "all"]
    floors = [r for r in rows if r["name"] not in HIDDEN and not _is_ref(r)]
    hidden = [r for r in rows if r["name"] in HIDDEN]
    refs = [r for r in rows if _is_ref(r)]
    best = min(hidden, key=lambda r: r["metrics"]["mae"])
    b = d["bound"]
    out = [["**oracle bound**", f"**{b['oracle_mae']:.1f}**", f"{b['oracle_mae_ci'][0]:.1f}-{b['oracle_mae_ci'][1]:.1f}",
            "1.000", "0.0", "-", "-", "-", "-"]]

    def f(x: float | None, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    for r in floors + hidden + refs:
        m = r["metrics"]
        bold = r is best
        name = LABELS.get(r["name"], r["name"])
        out.append([f"**{name}**" if bold else name, f"**{m['mae']:.1f}**" if bold else f"{m['mae']:.1f}",
                    f"{m['mae_ci'][0]:.1f}-{m['mae_ci'][1]:.1f}",
                    f"**{r['mae_over_bound']:.3f}**" if bold else f"{r['mae_over_bound']:.3f}",
                    f"{r['excess_over_bound']:+.1f}", f(m["kendall_tau"], ".3f") if r["name"] != "constant" else "-",
                    f(m["r2"], ".3f"), "-" if m["coverage80"] is None else f"{100 * m['coverage80']:.1f}%",
                    f(m["pinball"], ".1f")])
    t = table(["predictor", "MAE", "95% CI", "MAE / bound", "excess", "Kendall tau", "R^2", "80% coverage", "pinball"],
              out)
    rel = {r["name"]: r["mae_over_bound"] for r in rows}
    ranked = sorted(hidden, key=lambda r: r["mae_over_bound"])
    p = d["protocol"]
    lc_all = max(curve["sizes"])
    seeds = {s["head"]: s for s in curve["summary"] if s["size"] == lc_all and s.get("mae_over_bound_sd") is not None}
    seed_heads = [r["name"] for r in ranked if r["name"] in seeds][:2]
    pm = next((r for r in refs if r["name"].startswith("prompt-median")), None)
    const = rel.get("constant")
    cov = [r["metrics"]["coverage80"] for r in floors + hidden if r["metrics"]["coverage80"] is not None]
    ks = p["samples_per_prompt"]
    weak = [r for r in hidden if r["name"] in ("egtp", "probe")]
    strong = [r["mae_over_bound"] for r in hidden if r["name"] not in ("egtp", "probe")]
    train_samples = sorted({c["n_train_samples"] for c in curve["cells"] if c["size"] == lc_all})
    return {
        "table": t, "made": made(manifest, "bench-smollm2-sharegpt.json"), "best": best["name"],
        "best_rel": f"{best['mae_over_bound']:.3f}", "goal_met": best["mae_over_bound"] <= 1.10,
        "four_best": ", ".join(f"{r['name']} {r['mae_over_bound']:.3f}" for r in ranked[:4]),
        "seeds": ", ".join(f"{h} {seeds[h]['mae_over_bound']:.3f} +- {seeds[h]['mae_over_bound_sd']:.3f}" for h in seed_heads),
        "prompt_median": "-" if pm is None else f"{pm['mae_over_bound']:.3f}",
        "constant": f"{const:.3f}",
        "closed": "-" if pm is None or const is None else
        f"{100 * (const - best['mae_over_bound']) / (const - pm['mae_over_bound']):.0f}%",
        "prompt_length": f"{rel['prompt-length']:.3f}", "proxy": f"{rel['proxy']:.3f}",
        "hidden_range": rng(strong, ".2f"), "weak": ", ".join(f"{r['name']} {r['mae_over_bound']:.3f}" for r in weak),
        "coverage": rng([100 * c for c in cov], ".1f"), "coverage_met": all(0.75 <= c <= 0.85 for c in cov),
        "egtp_coverage": f"{100 * next(r for r in hidden if r['name'] == 'egtp')['metrics']['coverage80']:.1f}%",
        "train_prompts": count(p["split_counts"]["train"]), "val_prompts": count(p["split_counts"]["val"]),
        "train_samples": "/".join(count(x) for x in train_samples),
        "test_prompts": count(p["test_prompts"]), "test_samples": count(p["test_samples"]),
        "ks": ", ".join(f"{c} x K={k}" for k, c in ks.items()),
    }


def transfer_figures(manifest: dict[str, Any], d: dict[str, Any]) -> dict[str, Any]:
    """The same heads on their own run and on AlpacaEval (bench_transfer.py's transfer.json)."""
    hb, tb = d["home"]["bound"], d["transfer"]["bound"]
    out = [["**oracle bound**", f"{hb['oracle_mae']:.1f}", "1.000", f"{tb['oracle_mae']:.1f}", "1.000",
            f"{100 * d['bound_change']:+.1f}%", "-"]]
    ch_mae, ch_rel, covs = [], {}, []
    floors = [r for r in d["rows"] if r["predictor"] not in HIDDEN and not r["predictor"].startswith("prompt-median")]
    refs = [r for r in d["rows"] if r["predictor"].startswith("prompt-median")]
    for r in floors + [r for r in d["rows"] if r["predictor"] in HIDDEN] + refs:
        c = r["transfer_mae"] / r["home_mae"] - 1
        cr = r["transfer_mae_over_bound"] / r["home_mae_over_bound"] - 1
        ch_mae.append(c)
        ch_rel[r["predictor"]] = cr
        if r.get("transfer_coverage80") is not None:
            covs.append(100 * r["transfer_coverage80"])
        out.append([r["predictor"], f"{r['home_mae']:.1f}", f"{r['home_mae_over_bound']:.3f}", f"{r['transfer_mae']:.1f}",
                    f"{r['transfer_mae_over_bound']:.3f}", f"{100 * c:+.1f}%", f"{100 * cr:+.1f}%"])
    t = table(["predictor", "ShareGPT test MAE", "MAE / bound", "AlpacaEval MAE", "MAE / bound", "MAE change",
               "MAE / bound change"], out)
    heads = {k: v for k, v in ch_rel.items() if not k.startswith("prompt-median")}
    lo = min(heads, key=lambda k: heads[k])
    pm = next((r for r in d["rows"] if r["predictor"].startswith("prompt-median")), None)
    s = d["summary"]
    tp = (d["transfer"].get("protocol") or {})
    return {
        "table": t, "made": made(manifest, "transfer.json"),
        "prompts": count(tb["n_prompts"]), "samples": count(tb["n_samples"]), "k": tp.get("samples_per_prompt", {}),
        "mae_falls": rng([-100 * c for c in ch_mae], ".0f"), "all_fall": all(c < 0 for c in ch_mae),
        "bound_change": f"{-100 * d['bound_change']:.1f}%",
        "rel_moves": f"{100 * s['mae_over_bound']['mean_abs_rel_change']:.1f}%",
        "mae_moves": f"{100 * s['mae']['mean_abs_rel_change']:.1f}%", "spearman": f"{s['rank_spearman']:.2f}",
        "rises": sum(1 for v in heads.values() if v > 0), "heads": len(heads),
        "least": f"{lo} ({100 * heads[lo]:+.1f}%)",
        "floors": "+" + rng([100 * heads[r["predictor"]] for r in floors], ".1f") + "%",
        "probe": f"{100 * heads['probe']:+.1f}%" if "probe" in heads else "-",
        "pm_home": "-" if pm is None else f"{pm['home_mae_over_bound']:.3f}",
        "pm_transfer": "-" if pm is None else f"{pm['transfer_mae_over_bound']:.3f}",
        "coverage": rng(covs, ".1f"),
    }


def curve_figures(manifest: dict[str, Any], d: dict[str, Any]) -> dict[str, Any]:
    """The learning curve (bench_learning_curve.py): MAE / bound by training prompts, mean +- sd over draws."""
    by = {(s["size"], s["head"]): s for s in d["summary"]}
    samples: dict[int, list[int]] = {}
    for c in d["cells"]:
        samples.setdefault(c["size"], []).append(c["n_train_samples"])
    rows = []
    for size in d["sizes"]:
        cells = []
        for h in d["heads"]:
            s = by[(size, h)]
            sd = s.get("mae_over_bound_sd")
            cells.append(f"{s['mae_over_bound']:.3f}" + ("" if sd is None else f" ± {sd:.3f}"))
        rows.append([count(size), count(sum(samples[size]) / len(samples[size])), *cells])
    t = table(["training prompts", "samples", *d["heads"]], rows, "r" * (2 + len(d["heads"])))
    hidden = [h for h in d["heads"] if h in HIDDEN]
    excess = [min(by[(size, h)]["mae_over_bound"] for h in hidden) - 1 for size in d["sizes"]]
    ridge = [by[(size, "ridge")]["mae_over_bound"] - 1 for size in d["sizes"]] if "ridge" in d["heads"] else []
    return {
        "table": t, "made": made(manifest, "learning_curve.json"), "bound": f"{d['bound']['oracle_mae']:.1f}",
        "test_prompts": count(d["protocol"]["test_prompts"]), "train_prompts": count(d["split_train_prompts"]),
        "repeats": d["repeats"], "sizes": " to ".join(count(x) for x in d["sizes"]),
        "excess": " -> ".join(f"{x:.2f}" for x in excess), "ridge": " -> ".join(f"{x:.3f}" for x in ridge),
        "prompt_median": f"{d['prompt_median_oracle']['mae_over_bound']:.3f}",
    }


def predictors_figures(manifest: dict[str, Any], d: dict[str, Any]) -> dict[str, Any]:
    """Training time and prediction latency (bench_predictors.py), heads by their batch-1 latency."""
    heads = sorted(d["heads"], key=lambda r: r["batch1_us"])
    label = {"proxy": "proxy (MiniLM)"}
    t = table(["", *(label.get(r["head"], r["head"]) for r in heads)], [
        ["training (s)", *(f"{r['train_s']:.1f}" for r in heads)],
        ["batch 1 (us / request)", *(count(r["batch1_us"]) for r in heads)],
        ["batch 64 (us / request)", *(f"{r['batch64_us']:.1f}" if r["batch64_us"] < 1000 else count(r["batch64_us"])
                                      for r in heads)],
    ])
    dec = d["decode_step_us"]
    fastest = min(dec.values()) if dec else None
    engines: dict[str, list[str]] = {}  # "llama.cpp Q4_1, 2 threads" -> llama.cpp Q4_1: "16,730 us (2 threads)"
    for k, v in dec.items():
        engine, _, threads = k.rpartition(", ")
        engines.setdefault(engine or k, []).append(f"{count(v)} us" + (f" ({threads})" if engine else ""))
    hid = {r["head"]: r for r in heads if r["head"] in HIDDEN}

    def share(us: float) -> str:
        return f"{100 * us / fastest:.1f}%" if fastest else "-"

    proxy = next((r for r in heads if r["head"] == "proxy"), None)
    return {
        "table": t, "made": made(manifest, "predictors.json"), "n_train": count(d["n_train"]),
        "load": f"{d['machine']['load_average'][0]:.1f}", "context": d["context_tokens"],
        "decode": ", ".join(f"{e} {' / '.join(v)}" for e, v in engines.items()),
        "hidden_b1": rng([100 * r["batch1_us"] / fastest for r in hid.values()], ".1f") + "%" if fastest else "-",
        "hidden_b64": f"{max(100 * r['batch64_us'] / fastest for r in hid.values()):.1f}%" if fastest else "-",
        "ridge": share(hid["ridge"]["batch1_us"]) if "ridge" in hid else "-",
        "mlp": share(hid["mlp"]["batch1_us"]) if "mlp" in hid else "-",
        "proxy_steps": f"{proxy['batch1_us'] / fastest:.2f}" if proxy and fastest else "-",
    }


def sim_real_figures(manifest: dict[str, Any], d: dict[str, Any], bench: dict[str, Any]) -> dict[str, Any]:
    """What a real prediction is worth (bench_sim_real.py's real_predictions.json): short-request P99 by
    load for the page's arms, the first predictions table being the best head and the second the proxy."""
    rows = d["rows"]
    base = d["baseline"]
    tables = [a for a in d["arms"] if a["prediction"] and a["prediction"]["model"] == "table"
              and a["arm"].startswith("sjf+lpt ") and " aging" not in a["arm"] and not a["arm"].endswith(" q10")]
    best, proxy = tables[0]["arm"].split(" ", 1)[1], (tables[1]["arm"].split(" ", 1)[1] if len(tables) > 1 else None)
    arms = {a["arm"]: a for a in d["arms"]}
    noise = next(a for a in d["arms"] if a["prediction"] and a["prediction"]["model"] == "lognormal"
                 and " aging" not in a["arm"])
    rel = {r["name"]: r["mae_over_bound"] for r in bench["rows"] if r["subset"] == "all"}
    loads = [x for x in sorted({r["load"] for r in rows}) if x >= 1]
    cell = {(r["load"], r["arm"]): r for r in rows}
    page = [(base, f"{base} (no prediction)", False), (f"fcfs+lpt {best}", f"fcfs + least-predicted dispatch, {best}", False),
            (f"sjf+lpt {best}", f"SJF + lpt, {best} (best head, MAE / bound {rel[best]:.3f})", True),
            (f"sjf+lpt {best} aging100", f"SJF + lpt, {best}, aging 100 tokens/s", False)]
    if proxy:
        page.append((f"sjf+lpt {proxy}", f"SJF + lpt, {proxy} (MiniLM, {rel[proxy]:.3f})", False))
    pm = rel.get("prompt-median (oracle)")
    page += [("sjf+lpt prompt-median", "SJF + lpt, prompt-median oracle (the bound as a predictor"
              + (f", {pm:.3f})" if pm is not None else ")"), False),
             (noise["arm"], f"SJF + lpt, lognormal noise at {best}'s relative MAE ({noise['prediction']['rel_mae']:.3f})",
              False),
             ("sjf+lpt true lengths", "SJF + lpt, true lengths", False)]
    out = []
    for arm, label, bold in page:
        if arm == base:
            cells = [f"{cell[(x, arm)]['short_p99_s']:.2f}" for x in loads]
        else:
            cells = [pct(cell[(x, arm)]["short_change"]) for x in loads]
        out.append([f"**{label}**" if bold else label, *(f"**{c}**" if bold else c for c in cells)])
    t = table(["arm", *(f"{x:g}x" for x in loads)], out)
    below = [abs(r["short_change"]) for r in rows if r["load"] < 1 and r["short_change"] is not None]
    aging = [cell[(x, f"sjf+lpt {best} aging100")]["short_change"] for x in loads]
    st = d["structure"]
    tail = next((x for x in d["tail_anatomy"] if x["arm"] == f"sjf+lpt {best}"), None)
    return {
        "table": t, "made": made(manifest, "sim_real.json"), "best": best, "proxy": proxy or "-",
        "test_prompts": count(d["workload"]["prompts"]), "samples": count(d["workload"]["distinct_samples"]),
        "requests": count(d["workload"]["n_requests"]), "capacity": f"{d['capacity_rps']:.1f}",
        "short": f"{d['short_threshold_tokens']:g}", "below": f"{100 * max(below):.0f}%" if below else "-",
        "below_loads": "-".join(f"{x:g}" for x in sorted({r["load"] for r in rows}) if x < 1) + "x",
        "within": f"{100 * st['within_prompt_variance_share']:.0f}%",
        "tau_best": f"{arms[f'sjf+lpt {best}']['kendall_tau']:.3f}",
        "tau_pm": f"{arms['sjf+lpt prompt-median']['kendall_tau']:.3f}",
        "tau_ceiling": f"{st['prompt_median_in_sample']['kendall_tau']:.3f}",
        "tau_noise": f"{noise['kendall_tau']:.3f}",
        "aging": f"{100 * max(aging):+.0f} to {100 * min(aging):+.0f}%",
        "tau_proxy": "-" if proxy is None else f"{arms[f'sjf+lpt {proxy}']['kendall_tau']:.2f}",
        "tail_n": "-" if tail is None else count(tail["n_tail"]), "tail_prompts": "-" if tail is None else count(tail["tail_prompts"]),
        "tail_pct": "-" if tail is None or tail["pred_percentile_median"] is None else
        f"{100 * tail['pred_percentile_median']:.0f}th",
        "tail_load": "-" if tail is None else f"{tail['load']:g}x",
    }


# --------------------------------------------------------------------------------------------- the router
SPREAD_LIMIT = 0.05  # bench_router.py ab warns above this spread of the servers' speed between arms


def _goal_ms(goal: str) -> float:
    """The overhead goal's bound from its text ("p99 added latency under 5 ms")."""
    m = re.search(r"under ([0-9.]+) ms", goal)
    if m is None:
        raise ValueError(f"goal {goal!r} names no 'under N ms'")
    return float(m.group(1))


def _arm_label(arm: str) -> str:
    """bench_router.py ab's arm names as the page says them."""
    again = arm.endswith("-again")
    base = arm.removesuffix("-again")
    if base == "round-robin":
        label = "round robin"
    elif base.startswith("recommended-"):
        label = f"recommended ({base.removeprefix('recommended-')})"
    elif base.startswith("lpt-"):
        label = f"least predicted tokens, {base.removeprefix('lpt-')}"
    else:
        label = base
    return label + (" again" if again else "")


def _policy_arms(arms: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The arms that run a policy against round robin: the router's default with its queue in front of the
    slots (recommended-HEAD) or with every request sent on at once (lpt-HEAD)."""
    return [(a, f) for a, f in arms.items() if a.startswith(("recommended-", "lpt-"))]


def _ab_flags(d: dict[str, Any]) -> str:
    """The run's command-line flags that shaped it, from the arguments it recorded."""
    a = d.get("args") or {}
    flags = [f"--requests {d['requests']}", f"--rate {d['rate_rps']:g}", f"--arms {a.get('arms', 'rr,lpt')}"]
    if a.get("seed"):
        flags.append(f"--seed {a['seed']}")
    flags += [f"--{k.replace('_', '-')}" for k in ("repeat_first", "same_estimator") if a.get(k)]
    if (a.get("blocks") or 1) > 1:
        flags.append(f"--blocks {a['blocks']}")
    if a.get("slots", 1) != 1 and "recommended" in a.get("arms", ""):
        flags.append(f"--slots {a['slots']}")
    return " ".join(flags)


def _ab_desc(d: dict[str, Any]) -> str:
    """What a run did differently, from the arguments it recorded."""
    a = d.get("args") or {}
    out = []
    if a.get("same_estimator"):
        out.append("`--same-estimator` (round robin asks the proxy head too, so every arm pays its CPU)")
    if (a.get("blocks") or 1) > 1:
        order = " ".join("A" if arm == "round-robin" else "B" for _, arm in d["blocks"]["order"])
        out.append(f"`--blocks {a['blocks']}`: {d['requests'] // a['blocks']} requests per block, every arm on "
                   f"every block, arms in the order {order} (A round robin): the machine's drift falls on both")
    elif a.get("repeat_first"):
        out.append("A-B-A (round robin again at the end)")
    return "; ".join(out)


def _ab_run(d: dict[str, Any]) -> dict[str, Any]:
    """One A/B run: its table, and the reading computed from it (the policy arm against the mean of
    the round-robin runs; whether the servers ran at one speed in every arm)."""
    arms = d["arms"]

    def sec(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f} s"

    rows = []
    for arm, f in arms.items():
        busy = (f.get("utilization") or {}).get("mean")
        rows.append([_arm_label(arm), "-" if busy is None else f"{busy:.2f}",
                     "-" if f["decode_tok_s_median"] is None else f"{f['decode_tok_s_median']:.1f} tok/s",
                     sec(f["short_p50_e2e_s"]), f"**{sec(f['short_p99_e2e_s'])}**", sec(f["p99_e2e_s"]),
                     sec(f["mean_e2e_s"])])
    t = table(["arm", "busy share", "servers' speed", "short P50", "**short P99**", "P99 e2e", "mean e2e"], rows)
    rr = [f for a, f in arms.items() if a.removesuffix("-again") == "round-robin"]
    rec = _policy_arms(arms)
    reading = []
    if rr and rec:
        rr_short = statistics.fmean(f["short_p99_e2e_s"] for f in rr)
        rr_p99 = statistics.fmean(f["p99_e2e_s"] for f in rr)
        against = ("round robin's" if len(rr) == 1 else
                   f"the mean of the {({2: 'two', 3: 'three'}).get(len(rr), str(len(rr)))} round-robin runs")
        for a, f in rec:
            reading.append(f"The {_arm_label(a)} arm: short P99 {f['short_p99_e2e_s']:.1f} s against {rr_short:.1f} s, "
                           f"{against} (**{pct(f['short_p99_e2e_s'] / rr_short - 1)}**); "
                           f"P99 e2e {pct(f['p99_e2e_s'] / rr_p99 - 1)}, mean e2e "
                           f"{pct(f['mean_e2e_s'] / statistics.fmean(x['mean_e2e_s'] for x in rr) - 1)}.")
        if len(rr) > 1:
            s = [f["short_p99_e2e_s"] for f in rr]
            reading.append(f"The round-robin runs' short P99 differ by {100 * (max(s) / min(s) - 1):.0f}% among "
                           "themselves.")
    blocks = d.get("blocks")
    if blocks and rec:
        per = blocks["short_p99_per_block"]
        a = rec[0][0]
        won = blocks["blocks_won_vs_first_arm"].get(a)
        reading.append(f"Per block, short P99 round robin {', '.join(sec(x) for x in per['round-robin'])}; "
                       f"{_arm_label(a)} {', '.join(sec(x) for x in per[a])} (lower in {won} of {len(per[a])} "
                       "blocks).")
    lost = [f"{f['requests'] - f['ok']} of {f['requests']} requests in the {_arm_label(a)} arm" for a, f in arms.items()
            if f["ok"] < f["requests"]]
    if lost:
        reading.append(f"Not completed (left out of the figures): {', '.join(lost)}.")
    spread = d.get("server_speed_spread")
    if spread is None:
        comparable = "The servers' speed was not measured in every arm: comparability unknown."
    elif spread > SPREAD_LIMIT:
        comparable = (f"**The arms are not comparable**: the servers' speed differed by {100 * spread:.1f}% between "
                      f"arms (over {100 * SPREAD_LIMIT:.0f}%)")
        speeds = {a: f["decode_tok_s_median"] for a, f in arms.items() if f["decode_tok_s_median"]}
        if rec and speeds and rr:
            a, f = rec[0]
            rr_speed = statistics.fmean(x["decode_tok_s_median"] for x in rr)
            rank = ("the slowest" if speeds[a] == min(speeds.values()) else
                    "the fastest" if speeds[a] == max(speeds.values()) else "neither the slowest nor the fastest")
            comparable += (f"; the servers were {rank} in the {_arm_label(a)} arm, {pct(speeds[a] / rr_speed - 1)} "
                           "against the round-robin mean")
        comparable += "."
    else:
        comparable = (f"The servers' speed differed by {100 * spread:.1f}% between arms (within "
                      f"{100 * SPREAD_LIMIT:.0f}%): the arms are comparable.")
    if blocks and blocks.get("neighbour_speed_gap") is not None:
        comparable += (f" Between the two arms of one block the servers' speed differed by up to "
                       f"{100 * blocks['neighbour_speed_gap']:.0f}% (the drift the interleaving spreads over both).")
    rec_vs_rr = None  # the policy arm's servers' speed against the round-robin mean
    if rec and rr and all(f["decode_tok_s_median"] for f in arms.values()):
        rec_vs_rr = rec[0][1]["decode_tok_s_median"] / statistics.fmean(x["decode_tok_s_median"] for x in rr) - 1
    return {"table": t, "reading": " ".join(reading) or "-", "comparable": comparable,
            "rec_vs_rr": rec_vs_rr, "desc": _ab_desc(d),
            "load": f"{d['load_vs_decode_capacity']:.2f}", "short": f"{d['short_threshold_tokens']:g}",
            "busy_missing": all((f.get("utilization") or {}).get("mean") is None for f in arms.values())}


def _overhead(before: list[dict[str, Any]], after: list[dict[str, Any]], names: tuple[str, str]) -> dict[str, Any]:
    """One fix's overhead table (two runs before, two after) and the goal's verdicts."""
    def added(d: dict[str, Any], k: str, p50: str) -> str:
        o = d["overhead_ms"][k]
        return f"{o['p50']:+{p50}} / {o['p99']:+.1f} ms"

    runs = [(f"{names[0]}, {i}", d) for i, d in enumerate(before, 1)] + \
           [(f"**{names[1]}, {i}**", d) for i, d in enumerate(after, 1)]
    t = table(["run", "first token added p50 / p99", "per chunk added p50 / p99", "router CPU / request"],
              [[name, added(d, "first_token", ".1f"), added(d, "per_chunk", ".2f"), f"{d['router_cpu_ms_per_request']:.2f} ms"]
               for name, d in runs])
    goal = _goal_ms(after[0]["goal"])

    def verdict(kind: str, ds: list[dict[str, Any]]) -> str:
        p99 = [d["overhead_ms"][kind]["p99"] for d in ds]
        met = all(x < goal for x in p99)
        return f"{'met' if met else 'not met'} ({rng(p99, '+.1f', ' to ')} ms)"

    cpu = [d["router_cpu_ms_per_request"] for d in before], [d["router_cpu_ms_per_request"] for d in after]
    return {"table": t, "first_after": verdict("first_token", after), "chunk_after": verdict("per_chunk", after),
            "first_before": verdict("first_token", before), "chunk_before": verdict("per_chunk", before),
            "cpu_change": pct(statistics.fmean(cpu[1]) / statistics.fmean(cpu[0]) - 1),
            "cpu_model": (after[0].get("machine") or {}).get("cpu_model")}


def router_figures(manifest: dict[str, Any], *files: dict[str, Any]) -> dict[str, Any]:
    """The router (bench_router.py): added latency and CPU before and after each fix (overhead, four files per
    fix in OVERHEAD_FIXES order), and the A/B runs on two llama.cpp servers, one entry of ``ab`` per run."""
    n = 4 * len(OVERHEAD_FIXES)
    fixes, ab_runs = files[:n], files[n:]

    def span(fix: str) -> str:
        m = sorted(made(manifest, _overhead_file(fix, w, i)) for w in ("before", "after") for i in (1, 2))
        return f"{m[0][:16]}-{m[-1][11:]}" if m[0][:10] == m[-1][:10] else f"{m[0]} to {m[-1]}"  # "DAY HH:MM-HH:MM UTC"

    # four files per fix, in OVERHEAD_FIXES' order: before 1, before 2, after 1, after 2
    ov = {fix: {**_overhead(list(fixes[4 * k:4 * k + 2]), list(fixes[4 * k + 2:4 * k + 4]), names), "made": span(fix)}
          for k, (fix, names) in enumerate(OVERHEAD_FIXES.items())}
    relay, after1 = ov[""], fixes[2]

    ab = [{**_ab_run(d), "made": made(manifest, f"router/ab-run{i}.json"), "flags": _ab_flags(d)}
          for i, d in enumerate(ab_runs, 1)]
    speeds = [r["rec_vs_rr"] for r in ab]
    return {
        "overhead": relay["table"], "goal": after1["goal"], "goal_ms": f"{_goal_ms(after1['goal']):g}",
        "first_after": relay["first_after"], "chunk_after": relay["chunk_after"],
        "first_before": relay["first_before"], "chunk_before": relay["chunk_before"],
        "fast": ov["fastpath-"],
        "streams": after1["streams"], "rounds": after1["rounds"], "measured": count(after1["router"]["requests"]),
        "tokens": after1["tokens"], "tok_s": f"{after1['tokens_per_s']:g}",
        "router_core": ",".join(map(str, (after1["placement"] or {}).get("router", []))) or "-",
        "made": relay["made"],
        "ab": ab,
        # runs 1-3 (the router's queue in front of one slot): the policy arm's servers' speed against round robin's
        "rec_speed_first3": ", ".join("-" if r is None else pct(r) for r in speeds[:3]),
    }


FIGURES: dict[str, tuple[tuple[str, ...], Callable[..., dict[str, Any]]]] = {
    "policies": (("policies",), policies_figures),
    "draft": (("draft", "draft_k56"), draft_figures),
    "outlets": (("outlets_bench", "outlets_meta", "outlets_schedule", "outlets_cost"), outlets_figures),
    "bound": (("zoo_manifest", "bound_all", "bound_k8", "bound_k24", "bench_home"), bound_figures),
    "bench": (("zoo_manifest", "bench_home", "learning_curve"), bench_figures),
    "transfer": (("zoo_manifest", "transfer"), transfer_figures),
    "curve": (("zoo_manifest", "learning_curve"), curve_figures),
    "latency": (("zoo_manifest", "predictors"), predictors_figures),
    "sim_real": (("zoo_manifest", "sim_real", "bench_home"), sim_real_figures),
    "router": (("zoo_manifest", *(_overhead_source(f, w, i) for f in OVERHEAD_FIXES for w in ("before", "after")
                                  for i in (1, 2)),
                *sorted(k for k in SOURCES if k.startswith("router_ab_"))), router_figures),
}


# ----------------------------------------------------------------------------------------------- the page
def read_source(root: Path, name: str) -> Any:
    rel, made_by = SOURCES[name]
    path = root / rel
    if not path.is_file():
        raise PageError(f"{rel} is missing -- fix: rerun `{made_by}` (or restore the committed file)")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise PageError(f"{rel} is not valid JSON ({e}) -- fix: rerun `{made_by}`") from None


def render(root: Path = ROOT, template: str = TEMPLATE) -> str:
    import jinja2

    tpath = root / template
    if not tpath.is_file():
        raise PageError(f"{template} is missing -- fix: restore the template of {PAGE}")
    ctx: dict[str, Any] = {"command": COMMAND, "template": Path(template).name,
                           "sources": {k: v[0] for k, v in SOURCES.items()}}
    for key, (names, make) in FIGURES.items():
        try:
            ctx[key] = make(*(read_source(root, n) for n in names))
        except PageError:
            raise
        except Exception as e:  # a figure file of another shape than its benchmark writes
            raise PageError(f"cannot read the figures of {', '.join(SOURCES[n][0] for n in names)} "
                            f"({type(e).__name__}: {e}) -- fix: rerun the benchmark that writes them") from None
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    try:
        return env.from_string(tpath.read_text()).render(**ctx)
    except jinja2.TemplateError as e:
        raise PageError(f"{template}: {type(e).__name__}: {e}") from None


def first_difference(a: str, b: str) -> int:
    la, lb = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(la, lb, strict=False), 1):
        if x != y:
            return i
    return min(len(la), len(lb)) + 1


def adopt(root: Path, src: Path, name: str) -> None:
    """docs/results/NAME := SRC (a benchmark's JSON, its scratch `logs` path nulled), and its manifest entry."""
    dest = (root / "docs/results" / name).resolve()
    if not dest.is_relative_to(root / "docs/results") or dest.suffix != ".json":
        raise PageError(f"--adopt NAME {name!r} is not a .json path inside docs/results/ -- fix: e.g. router/ab-run5.json")
    if dest.name == "manifest.json":
        raise PageError(f"--adopt NAME {name!r} is the manifest itself -- fix: name the figure file, e.g. router/ab-run7.json")
    try:
        d = json.loads(src.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise PageError(f"--adopt {src}: not a readable JSON file ({e}) -- fix: the JSON a benchmark wrote (--out)") from e
    if dest.is_file():  # replace only a figure of the same benchmark (its JSON's "bench" field), never another kind
        old = json.loads(dest.read_text())
        kind, new_kind = old.get("bench") if isinstance(old, dict) else None, d.get("bench") if isinstance(d, dict) else None
        if kind is None or kind != new_kind:
            raise PageError(f"--adopt: docs/results/{name} holds {kind or 'figures of another kind'}, {src} holds "
                            f"{new_kind or 'no bench field'} -- fix: a new NAME, or the same benchmark's JSON")
    nulled = [k for k in ("logs",) if d.get(k) is not None]
    for k in nulled:
        d[k] = None
    mpath = root / "docs/results/manifest.json"
    manifest = json.loads(mpath.read_text())
    made = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(src.stat().st_mtime))
    manifest["files"][name] = {"from": str(src), "made": made, "dropped": [], "nulled": nulled}
    dest.parent.mkdir(parents=True, exist_ok=True)
    for path, text in ((dest, json.dumps(d, indent=1) + "\n"),
                       (mpath, json.dumps(manifest, indent=1, sort_keys=True) + "\n")):
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    print(f"adopted {src} as docs/results/{name} (made {made})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help=f"exit 1 if {PAGE} differs from what would be written")
    ap.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    ap.add_argument("--adopt", nargs=2, metavar=("SRC", "NAME"),
                    help="copy a benchmark's JSON into docs/results/NAME (e.g. router/ab-run5.json) with its manifest "
                         "entry (where from, made = SRC's mtime), its `logs` folder nulled; then render")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    if args.adopt:
        try:
            adopt(root, Path(args.adopt[0]), args.adopt[1])
        except PageError as e:
            print(f"results_page: {e}", file=sys.stderr)
            return 1
    try:
        page = render(root)
    except PageError as e:
        print(f"results_page: {e}", file=sys.stderr)
        return 1
    out = root / PAGE
    if args.check:
        old = out.read_text() if out.is_file() else ""
        if old != page:
            print(f"{PAGE} is out of date with {TEMPLATE} and its figure files (first difference at line "
                  f"{first_difference(old, page)}) -- fix: run `{COMMAND}`", file=sys.stderr)
            return 1
        print(f"{PAGE} is up to date")
        return 0
    tmp = out.with_suffix(".md.tmp")
    tmp.write_text(page)
    tmp.replace(out)
    print(f"wrote {PAGE} ({len(page.splitlines())} lines) from {TEMPLATE} and {len(SOURCES)} figure files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
