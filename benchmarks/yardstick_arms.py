"""Chosen arms of yardstick cells against each cell's best prediction-free arm, one table per group.

Reads cells files (``bench_yardstick`` rows, augmented or not), groups them (regime, cluster, batch), and
prints for each named arm the median (min-max) over the group's pairs of its short-request and overall P99
over the reference (:func:`lenpred.report.yardstick.reference`: the best stable prediction-free arm of
that cell and seed), how many pairs meet the goal (short <= 0.8x at overall <= 1.05x) and how many are
never worse (both <= 1.02x). The OUTLETS-arm check of issue 38 (counter heads' re-predictions with
quantiles)::

    python -m benchmarks.bench_yardstick --augment docs/yardstick/steady-cells.jsonl --regimes steady \\
        --clusters 1+2 --batches 16 --arms "gboost/counters:late;sjf/counters:aging=100:late" \\
        --work out/ys-counters-1p2
    python -m benchmarks.yardstick_arms out/ys-counters-*/cells.jsonl \\
        --arms "gboost late/counters,sjf aging100 late/counters,gboost late/outlets,sjf aging100 late/mlp"
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.yardstick_arms", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("cells", nargs="+", help="cells.jsonl files")
    ap.add_argument("--arms", required=True, help="comma-separated arm names as the rows hold them")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args(argv)

    from lenpred.report.yardstick import REFERENCE, arm_stats, load_cells

    rows = load_cells([Path(p) for p in args.cells])
    want = [a.strip() for a in args.arms.split(",") if a.strip()]
    groups: dict[tuple[str, str, int], list] = {}
    for r in rows:
        groups.setdefault((r.cell.regime, r.cell.cluster, r.cell.batch), []).append(r)
    out = {}
    for key, rs in sorted(groups.items()):
        refs: dict[str, int] = {}
        st = arm_stats(rs, refs)
        name = f"{key[0]} {key[1]} b{key[2]}"
        print(f"\n{name}: {len(rs)} pairs; reference (best prediction-free): "
              + ", ".join(f"`{a}` {n}" for a, n in sorted(refs.items(), key=lambda x: -x[1])))
        print("| arm | pairs | short P99 / reference | overall P99 / reference | goal | never worse |")
        print("|---|---:|---|---|---:|---:|")
        out[name] = {"pairs": len(rs), "references": refs, "arms": {}}
        for arm in [*want, REFERENCE]:
            s = st.get(arm)
            if s is None:
                print(f"| `{arm}` | 0 | - | - | - | - |")
                continue
            print(f"| `{arm}` | {s.pairs} | {s.short_p99.median:.3f} ({s.short_p99.lo:.3f}-{s.short_p99.hi:.3f}) | "
                  f"{s.overall_p99.median:.3f} ({s.overall_p99.lo:.3f}-{s.overall_p99.hi:.3f}) | {s.n_goal} | "
                  f"{s.n_never_worse} |")
            out[name]["arms"][arm] = {"pairs": s.pairs, "short": [s.short_p99.median, s.short_p99.lo, s.short_p99.hi],
                                      "overall": [s.overall_p99.median, s.overall_p99.lo, s.overall_p99.hi],
                                      "goal": s.n_goal, "never_worse": s.n_never_worse}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
