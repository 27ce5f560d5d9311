"""The tables of docs/results.md (:mod:`results_page`) from the committed figure files: the policy study, the
draft head, OUTLETS and the predictor zoo (bound, bench, transfer, learning curve, latency, the simulator on
real predictions). Each ``*_figures`` function takes the parsed JSON of its ``SOURCES`` and returns the
template's values."""

from __future__ import annotations

from typing import Any

from benchmarks.report import policies_report as pr


# ----------------------------------------------------------------------------------------------- tables
def table(head: list[str], rows: list[list[str]], align: str | None = None) -> str:
    """A Markdown table; ``align`` one character per column (``l`` or ``r``), default: first left, rest right."""
    align = align or "l" + "r" * (len(head) - 1)
    rule = "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"
    return "\n".join(["| " + " | ".join(head) + " |", rule, *("| " + " | ".join(r) + " |" for r in rows)])


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def policies_figures(d: dict[str, Any]) -> dict[str, Any]:
    """The policy study (policies.json): short-request P99 change by load for the study's figure arms on
    ShareGPT / Poisson (as policies.md computes it), and the recommended default with its candidates."""
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
