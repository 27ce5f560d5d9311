"""docs/results.md, rendered from its template and the committed figure files the benchmarks write.

The template (docs/results.template.md, Jinja2) holds the prose, and as dated text the figures that have
no committed JSON file behind them; every table this script renders comes from one of ``SOURCES``:

    python -m benchmarks.report.results_page            # write docs/results.md
    python -m benchmarks.report.results_page --check    # exit 1 (one line) if docs/results.md is not what it would write

Edit the template or rerun a benchmark (which rewrites its JSON), then rerun this script; the test suite
runs ``--check`` (tests/test_results_page.py). ``--root DIR`` renders another checkout (or a copy).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import ROOT
from benchmarks.report.results_figures import (
    bench_figures,
    bound_figures,
    curve_figures,
    draft_figures,
    outlets_figures,
    policies_figures,
    predictors_figures,
    sim_real_figures,
    transfer_figures,
)
from benchmarks.report.results_router import (
    AB_RUNS,
    OVERHEAD_FIXES,
    _overhead_file,
    _overhead_source,
    router_figures,
)

TEMPLATE = "docs/results.template.md"
PAGE = "docs/results.md"
COMMAND = "python -m benchmarks.report.results_page"


SOURCES: dict[str, tuple[str, str]] = {
    "policies": ("docs/policies/policies.json", "python -m benchmarks.bench_policies --out docs/policies"),
    "draft": ("docs/draft_bench.json", "python -m benchmarks.bench_spec ... --out docs/draft_bench.json"),
    "draft_k56": ("docs/draft_bench_k56.json", "python -m benchmarks.bench_spec ... --ks 5,6 --out docs/draft_bench_k56.json"),
    "outlets_bench": ("docs/outlets_real/outlets_bench.json", "lenpred outlets bench ... --out docs/outlets_real"),
    "outlets_meta": ("docs/outlets_real/meta.json", "lenpred outlets bench ... --out docs/outlets_real"),
    "outlets_schedule": ("docs/outlets_real/schedule.json", "lenpred outlets schedule ... (schedule.json)"),
    "outlets_cost": ("docs/outlets_real/cost.json", "python -m benchmarks.bench_outlets_cost ... (cost.json)"),
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
    "transfer": ("docs/results/transfer.json", "python -m benchmarks.bench_transfer ... (zoo_reference.sh)"),
    "learning_curve": ("docs/results/learning_curve.json",
                       "python -m benchmarks.bench_learning_curve ... (zoo_reference.sh)"),
    "predictors": ("docs/results/predictors.json", "python -m benchmarks.bench_predictors ... (zoo_reference.sh)"),
    "sim_real": ("docs/results/sim_real.json", "python -m benchmarks.bench_sim_real ... (zoo_reference.sh)"),
    # the router (bench_router.py on an idle machine, 2026-12-02; copied here with `logs` set to null, see the manifest)
    **{_overhead_source(fix, when, i): (f"docs/results/{_overhead_file(fix, when, i)}",
                                        "python -m benchmarks.bench_router overhead --rounds 6 --out OUT.json, then "
                                        f"python -m benchmarks.report.results_page --adopt OUT.json {_overhead_file(fix, when, i)}")
       for fix in OVERHEAD_FIXES for when in ("before", "after") for i in (1, 2)},
    **{f"router_ab_run{i}": (f"docs/results/router/ab-run{i}.json",
                             "python -m benchmarks.bench_router ab --requests 192 ... (the flags: docs/results.md, "
                             f"run {i}), then python -m benchmarks.report.results_page --adopt OUT.json router/ab-run{i}.json")
       for i in range(1, AB_RUNS + 1)},
}


class PageError(Exception):
    """A figure file that is missing or not what its benchmark writes: one line, exit 1."""


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
        except Exception as e:  # noqa: BLE001 - a figure file of another shape than its benchmark writes
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
