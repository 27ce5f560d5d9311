"""Why a length prediction adds little over the best scheduler that needs none (issue 37, part 3's
demonstration, per request).

The best prediction-free arm at batch 16 is late binding (one FCFS queue for the decode pool, a request
sent when an instance has a free slot: what ``lenpred route`` does with ``max_outstanding``). The only thing
a prediction can add on top is the order of that queue: shortest predicted first (SJF with aging 100 tokens/s
here, the yardstick's best real-predictor arm). How much that order is worth depends on two things this
benchmark measures per request, on the yardstick's own cells (same workload, seeds and capacity):

* **how much of a slow short request is queueing**: for the short requests (true output below the
  workload's median) above their P99 under late-binding FCFS, the share of their end-to-end latency spent
  between the first token and a decode slot (``t_decode_admit - t_first``: the wait any order could change);
* **how well the predictor ranks**: the AUC of short against long (the probability that a short request's
  prediction is below a long one's) over the steady window, for the committed prefill head (``mlp``), an
  ideal prompt-level predictor (``prompt-median``: the median length of the prompt's other samples, the best
  any predictor that reads only the prompt can do on average) and the true sizes; and under each SJF arm, the
  share of its slowest short requests that its predictor had called long (prediction above the median
  prediction): the requests the order pushed back.

Writes ``OUT/why.json`` and ``OUT/why.md``; resumable per (cell, seed) in ``WORK/why.jsonl``.

    .venv/bin/python -m benchmarks.bench_value_why --out docs/yardstick --work out/value-why
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import bench_yardstick as y
from benchmarks.bench_policies import make_tables, sources
from benchmarks.flags import int_list
from lenpred.errors import ConfigError, LenpredError

PROG = "python -m benchmarks.bench_value_why"
FREE = "fcfs late/-"
ARMS = ("fcfs/-:late", "sjf/prompt-median:aging=100:late", "sjf/mlp:aging=100:late", "sjf/true:aging=100:late")
CELLS = ("1+2|16|0.95", "1+2|16|0.99", "4+8|16|0.99")  # cluster | batch | load


def auc_short(pred: np.ndarray, short: np.ndarray) -> float | None:
    """P(a short request's prediction < a long one's), ties counted half (Mann-Whitney)."""
    from scipy.stats import rankdata

    n_s, n_l = int(short.sum()), int((~short).sum())
    if n_s == 0 or n_l == 0:
        return None
    r = rankdata(pred)
    u_long = r[~short].sum() - n_l * (n_l + 1) / 2  # pairs where the long one ranks above
    return float(u_long / (n_s * n_l))


def arm_evidence(res: Any, thr: float, pred_median: float) -> dict[str, Any]:
    """One arm's per-request evidence over the steady window."""
    from lenpred.sim.summary import latency_arrays
    from lenpred.sim.yardstick import steady_mask

    m = steady_mask(res) & np.isfinite(res.t_finish)
    e2e = latency_arrays(res)["e2e"]
    short = res.output < thr
    s = m & short
    p99 = float(np.percentile(e2e[s], 99))
    tail = s & (e2e >= p99)
    wait = np.where(np.isfinite(res.t_decode_admit), res.t_decode_admit - res.t_first, 0.0)
    return {"short_p99_s": p99, "p99_s": float(np.percentile(e2e[m], 99)), "n_short": int(s.sum()),
            "n_tail": int(tail.sum()), "tail_wait_share": float(np.median(wait[tail] / e2e[tail])),
            "all_short_wait_share": float(np.median(wait[s] / e2e[s])),
            "auc_short": auc_short(res.pred[m], short[m]),
            "tail_called_long": float(np.mean(res.pred[tail] >= pred_median))}


def committed_capacity(cluster: str, batch: int) -> float:
    """The capacity the committed yardstick cells measured for (cluster, batch): the same load scale."""
    from lenpred.report.yardstick import read_cells

    for r in read_cells(y.ROOT / "docs/yardstick/steady-cells.jsonl"):
        if r["cell"]["cluster"] == cluster and int(r["cell"]["batch"]) == batch:
            return float(r["capacity_rps"])
    raise ConfigError(f"no committed steady cell for {cluster} batch {batch}", f"pass cells among {', '.join(CELLS)}")


def run(a: argparse.Namespace) -> list[dict[str, Any]]:
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    jl = work / "why.jsonl"
    rows = [json.loads(x) for x in jl.read_text().splitlines() if x.strip()] if jl.is_file() else []
    have = {r["key"] for r in rows}
    ya = y.resolve(y.parse(["--arms", ";".join(ARMS), "--work", str(work)]))
    src = sources(argparse.Namespace(alpaca_roles=None))["sharegpt"]
    tables: dict[str, str] | None = None
    for spec in a.cells:
        cluster, batch, load = spec.split("|")
        cap = committed_capacity(cluster, int(batch))
        for seed in a.seeds:
            key = f"{spec}|s{seed}"
            if key in have:
                continue
            if tables is None:
                tables = {**make_tables(src, work, None, "", "", y.say), "outlets": ya.outlets}
            runner = y.CellRunner(ya, y.Cell("steady", cluster, int(batch), load, "poisson", seed), cap, tables)
            res, thr = runner.simulate(runner.config(a.n), float(load) * cap)
            ev = {}
            for name, r in res.items():
                pm = float(np.median(r.pred[np.isfinite(r.pred)]))
                ev[name] = arm_evidence(r, thr, pm)
            row = {"key": key, "cluster": cluster, "batch": int(batch), "load": float(load), "seed": seed, "n": a.n,
                   "short_threshold_tokens": thr, "arms": ev}
            y.append_row(jl, row)
            rows.append(row)
            y.say(f"{key}: " + ", ".join(f"{k} {v['short_p99_s'] / ev[FREE]['short_p99_s']:.2f}x" for k, v in ev.items()))
    return [r for r in rows if any(r["key"] == f"{c}|s{s}" for c in a.cells for s in a.seeds)]


def _span(xs: Sequence[float | None], fmt: str = "{:.2f}") -> str:
    v = [x for x in xs if x is not None]
    if not v:
        return "-"
    lo, hi = fmt.format(min(v)), fmt.format(max(v))
    return lo if lo == hi else f"{lo}–{hi}"


def report(rows: list[dict[str, Any]], out: Path, n: int) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# Why a prediction adds little over late binding (issue 37)", "",
             f"`{PROG} --out {out}` ({len(rows)} cell-seed pairs, N = {n:,} requests each, the yardstick's "
             "capacities and workload; figures over the steady window, min–max over seeds). Short = true output "
             "below the workload's median. `wait share`: of the end-to-end latency of the short requests above "
             "their P99, the median share spent between the first token and a decode slot. `AUC`: P(a short "
             "request's prediction < a long one's). `tail called long`: of those slowest short requests, the share "
             "whose prediction was above the median prediction.", "",
             "| cell | arm | short P99 x late FCFS | P99 x late FCFS | wait share of the slowest shorts | AUC short vs long "
             "| tail called long |", "|---|---|---|---|---|---|---|"]
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(f"{r['cluster']} b{r['batch']} {r['load']:g}", []).append(r)
    summary = []
    for cell, rs in by.items():
        for arm in rs[0]["arms"]:
            e = [r["arms"][arm] for r in rs]
            f = [r["arms"][FREE] for r in rs]
            sh = [x["short_p99_s"] / b["short_p99_s"] for x, b in zip(e, f, strict=True)]
            ov = [x["p99_s"] / b["p99_s"] for x, b in zip(e, f, strict=True)]
            pred_arm = not arm.endswith("/-")
            summary.append({"cell": cell, "arm": arm, "seeds": [r["seed"] for r in rs], "short_p99_x_free": sh,
                            "p99_x_free": ov, "tail_wait_share": [x["tail_wait_share"] for x in e],
                            "auc_short": [x["auc_short"] for x in e] if pred_arm else None,
                            "tail_called_long": [x["tail_called_long"] for x in e] if pred_arm else None})
            lines.append(f"| {cell} | {arm} | {_span(sh)} | {_span(ov)} | {_span([x['tail_wait_share'] for x in e])} | "
                         + (f"{_span([x['auc_short'] for x in e], '{:.3f}')} | "
                            f"{_span([x['tail_called_long'] for x in e])} |" if pred_arm else "- | - |"))
    med = {a: statistics.median(x for s in summary if s["arm"] == a for x in s["auc_short"])
           for a in {s["arm"] for s in summary if s["auc_short"]}}
    lines += ["", "Median AUC over every pair: " + ", ".join(f"{a} {v:.3f}" for a, v in sorted(med.items())) + "."]
    js, md = out / "why.json", out / "why.md"
    js.write_text(json.dumps({"n": n, "free": FREE, "summary": summary, "rows": rows}, indent=1) + "\n")
    md.write_text("\n".join(lines) + "\n")
    return [js, md]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/yardstick")
    ap.add_argument("--work", default="out/value-why")
    ap.add_argument("--cells", default=",".join(CELLS), help="CLUSTER|BATCH|LOAD, comma-separated")
    ap.add_argument("--seeds", type=int_list, default="0,1,2,3,4")
    ap.add_argument("--n", type=int, default=32000, help="requests per cell")
    a = ap.parse_args(argv)
    try:
        a.cells = [c.strip() for c in a.cells.split(",") if c.strip()]
        for c in a.cells:
            parts = c.split("|")
            if len(parts) != 3 or parts[0] not in y.CLUSTERS or not parts[1].isdigit():
                raise ConfigError(f"--cells: {c!r} is not CLUSTER|BATCH|LOAD", "e.g. --cells '1+2|16|0.95'")
        if a.n < 100:
            raise ConfigError(f"--n {a.n}: too few requests for a P99", "pass --n 100 or more (32000 by default)")
        rows = run(a)
        for p in report(rows, Path(a.out), a.n):
            print(f"wrote {p}")
    except LenpredError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
