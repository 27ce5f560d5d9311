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
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = "docs/results.template.md"
PAGE = "docs/results.md"
COMMAND = "python benchmarks/results_page.py"

# the figure files, by the name the template knows them under: (path from the root, what writes it)
SOURCES: dict[str, tuple[str, str]] = {
    "policies": ("docs/policies/policies.json", "python benchmarks/bench_policies.py --out docs/policies"),
    "draft": ("docs/draft_bench.json", "python benchmarks/bench_spec.py ... --out docs/draft_bench.json"),
    "draft_k56": ("docs/draft_bench_k56.json", "python benchmarks/bench_spec.py ... --ks 5,6 --out docs/draft_bench_k56.json"),
    "outlets_bench": ("docs/outlets_real/outlets_bench.json", "lenpred outlets bench ... --out docs/outlets_real"),
    "outlets_meta": ("docs/outlets_real/meta.json", "lenpred outlets bench ... --out docs/outlets_real"),
    "outlets_schedule": ("docs/outlets_real/schedule.json", "lenpred outlets schedule ... (schedule.json)"),
    "outlets_cost": ("docs/outlets_real/cost.json", "python benchmarks/bench_outlets_cost.py ... (cost.json)"),
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


FIGURES: dict[str, tuple[tuple[str, ...], Callable[..., dict[str, Any]]]] = {
    "policies": (("policies",), policies_figures),
    "draft": (("draft", "draft_k56"), draft_figures),
    "outlets": (("outlets_bench", "outlets_meta", "outlets_schedule", "outlets_cost"), outlets_figures),
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help=f"exit 1 if {PAGE} differs from what would be written")
    ap.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    args = ap.parse_args(argv)
    root = args.root.resolve()
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
