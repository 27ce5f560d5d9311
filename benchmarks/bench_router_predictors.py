"""A frontier of router-side predictors: accuracy (MAE / bound) against the latency a router pays per request.

Every head here reads only the prompt's text -- what a router has without the target's hidden states:

* ``constant`` (the training median), ``prompt-length`` (the binned fit of lenpred's prompt-length head on
  the prompt's estimated tokens, characters / 4: the router has no tokenizer) and ``chars`` (the router's
  fallback today: prompt characters / 4 output tokens), fitted here on the run's train split;
* ``ngram`` and ``gbdt`` (lenpred.predictors.ngram / .gbdt), ``proxy`` (MiniLM + MLP) on its four encoder
  runtimes (torch fp32, torch-int8, onnx, onnx-int8: lenpred.predictors.proxy_runtime): trained heads.

Accuracy (``--part accuracy``): MAE / oracle bound on the reference ShareGPT run's test split and on
AlpacaEval (transfer), scored by lenpred.bench.evaluate exactly as ``lenpred bench`` scores every head
(lengths as served, per-prompt oracle bound of the same prompts); for a proxy runtime also the largest
and the 95th-percentile relative change of a prediction against the fp32 encoder on those prompts.
Latency (``--part latency``): benchmarks/router_predictors_timing.py, per request, in-process (inline,
head) and through ``lenpred serve`` (remote), one at a time and 200 at once. Results merge into ``--out``
(one JSON, rows keyed by head and mode), so parts and heads can be run separately::

    python -m benchmarks.bench_router_predictors --part accuracy
    flock /tmp/lenpred-heavy.lock python -m benchmarks.bench_router_predictors --part latency \\
        --heads ngram,gbdt,chars            # then --heads proxy,proxy-onnx ... (each run < 10 min)
    python -m benchmarks.bench_router_predictors --table   # the markdown table of docs/route.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HOME_RUN = "data/runs/smollm2-sharegpt"
TRANSFER_RUN = "data/runs/smollm2-alpaca-eval"
OUT = "docs/results/router_predictors.json"
# name: (head directory or None for the heads fitted here, proxy encoder runtime)
HEADS: dict[str, tuple[str | None, str]] = {
    "constant": (None, "torch"),
    "chars": (None, "torch"),
    "prompt-length": (None, "torch"),
    "ngram": ("data/heads/ngram-smollm2-sharegpt", "torch"),
    "gbdt": ("data/heads/gbdt-smollm2-sharegpt", "torch"),
    "proxy": ("data/heads/proxy-smollm2-sharegpt", "torch"),
    "proxy-torch-int8": ("data/heads/proxy-smollm2-sharegpt", "torch-int8"),
    "proxy-onnx": ("data/heads/proxy-smollm2-sharegpt", "onnx"),
    "proxy-onnx-int8": ("data/heads/proxy-smollm2-sharegpt", "onnx-int8"),
}
MODES = ("inline", "head", "remote", "remote-inline", "remote-nowait")
_SERVE_FLAGS = {"remote": ["--max-wait-ms", "2"], "remote-inline": ["--inline"], "remote-nowait": ["--max-wait-ms", "0"]}


# ---------------------------------------------------------------- data
def _run(path: str) -> tuple[Any, list[str], list[str]]:
    """The run, its test prompts' ids and texts."""
    from lenpred.data.rundir import RunDir
    from lenpred.data.split import load_split

    rd = RunDir.open(path)
    ids = sorted(load_split(rd, require_complete=False).test)
    text = rd.prompts().set_index("prompt_id")["text"].astype(str)
    return rd, ids, text.loc[ids].tolist()


def _train(rd: Any) -> tuple[list[str], Any]:
    from lenpred.data.lengths import sample_lengths
    from lenpred.data.split import load_split
    from lenpred.predictors.pipeline import run_cap
    from lenpred.predictors.targets import Targets

    ids = sorted(load_split(rd, require_complete=False).train)
    text = rd.prompts().set_index("prompt_id")["text"].astype(str)
    return text.loc[ids].tolist(), Targets.from_lengths(sample_lengths(rd, with_prompts=False), ids, run_cap(rd.card))


def _est_tokens(texts: list[str]) -> np.ndarray:
    return np.array([[len(t) / 4.0] for t in texts], dtype=np.float32)


# ---------------------------------------------------------------- accuracy
class _Fitted:
    """The heads fitted here on the home run's train split (constant, prompt-length, chars)."""

    def __init__(self, home: Any) -> None:
        from lenpred.predictors.constant import ConstantHead
        from lenpred.predictors.prompt_length import PromptLengthHead

        texts, targets = _train(home)
        x = _est_tokens(texts)
        self.constant = ConstantHead().fit(x, targets)
        self.prompt_length = PromptLengthHead().fit(x, targets)

    def predict(self, name: str, texts: list[str]) -> tuple[np.ndarray, Any]:
        from lenpred.predictors.dist import Dist

        x = _est_tokens(texts)
        if name == "chars":  # the router's CharsEstimator: ceil(chars / 4) * factor 1, spread 0.5
            p = np.maximum(1.0, np.ceil(x[:, 0]))
            nan = np.full_like(p, np.nan)
            return p, Dist(p, 0.5 * p, nan, nan, nan)
        head = self.constant if name == "constant" else self.prompt_length
        return head.predict_with_dist(x)


def _head_predict(path: str, runtime: str, rd: Any, texts: list[str]) -> tuple[np.ndarray, Any]:
    from lenpred.predictors.io import read_head
    from lenpred.predictors.proxy_runtime import use_runtime

    head, _ = read_head(path, card=rd.card)
    if runtime != "torch":
        use_runtime(head, runtime)
    return head.predict_with_dist(head.encode(texts))


def accuracy(names: list[str], n_boot: int) -> dict[str, Any]:
    from lenpred.bench.evaluate import evaluate
    from lenpred.predictions import Predictions
    from lenpred.predictors.proxy_runtime import variant_deviation
    from lenpred.stats.bootstrap import Bootstrap

    runs = {"home": _run(HOME_RUN), "transfer": _run(TRANSFER_RUN)}
    fitted = _Fitted(runs["home"][0])
    rows: dict[str, dict[str, Any]] = {n: {"name": n, "head": HEADS[n][0], "runtime": HEADS[n][1]} for n in names}
    bounds = {}
    for side, (rd, ids, texts) in runs.items():
        preds, fp32 = [], None
        for n in names:
            path, runtime = HEADS[n]
            t0 = time.perf_counter()
            point, dist = fitted.predict(n, texts) if path is None else _head_predict(path, runtime, rd, texts)
            rows[n][f"{side}_predict_s"] = round(time.perf_counter() - t0, 2)
            frame = dist.frame(np.asarray(ids), point)
            preds.append(Predictions.from_frame(frame, made_by=n, config={"head": path, "runtime": runtime}, card=rd.card))
            if n == "proxy":
                fp32 = point
            if n.startswith("proxy-") and fp32 is not None:
                rel = np.abs(point - fp32) / np.maximum(fp32, 1.0)
                rows[n][f"{side}_max_rel_change"] = round(variant_deviation(fp32, point), 4)
                rows[n][f"{side}_p95_rel_change"] = round(float(np.quantile(rel, 0.95)), 4)
        res = evaluate(rd, preds, names=names, boot=Bootstrap(n_boot), reference_rows=False)
        bounds[side] = {"run": str(rd.path), "oracle_mae": round(res.bound.oracle_mae, 2),
                        "n_prompts": res.bound.n_prompts, "n_samples": res.bound.n_samples}
        for n in names:
            r = res.row(n, "all")
            rows[n][f"{side}_mae"] = round(r.metrics.mae, 2)
            rows[n][f"{side}_mae_over_bound"] = round(float(r.mae_over_bound), 4)
    return {"bounds": bounds, "rows": list(rows.values())}


# ---------------------------------------------------------------- latency
def _config(name: str, mode: str, url: str | None = None) -> Any:
    from lenpred.route.config import EstimatorConfig

    path, runtime = HEADS[name]
    if name == "chars":
        return EstimatorConfig(kind="chars")
    if mode.startswith("remote"):
        return EstimatorConfig(kind="remote", url=url, timeout_s=60.0)
    # the budget is lifted so that every head can be timed inline (the router refuses the slow ones)
    return EstimatorConfig(kind=mode, head=path, runtime=runtime, inline_p50_ms=1e9, inline_p99_ms=1e9,
                           inline_check_calls=1, runtime_tolerance=1e9)


def latency(names: list[str], modes: list[str], b1: int, bursts: int) -> list[dict[str, Any]]:
    from benchmarks.router_predictors_timing import Serve, time_estimator

    texts = _run(HOME_RUN)[2] + _run(TRANSFER_RUN)[2]  # distinct prompts: ShareGPT test, then AlpacaEval
    out = []
    for n in names:
        path, runtime = HEADS[n]
        if path is None and n != "chars":
            continue  # constant / prompt-length: no head to run, the router's chars estimator is their cost
        for mode in (["inline"] if n == "chars" else modes):
            t0 = time.perf_counter()
            if mode.startswith("remote"):  # lenpred serve (--inline, --max-wait-ms 0)
                assert path is not None
                extra = ["--runtime-tolerance", "1e9", *_SERVE_FLAGS[mode]]
                with Serve(path, runtime, extra) as srv:  # every runtime is timed, the refused ones too
                    figs = time_estimator(_config(n, mode, srv.url), texts, b1, bursts)
            else:
                figs = time_estimator(_config(n, mode), texts, b1, bursts)
            out.append({"name": n, "mode": mode, **figs, "seconds": round(time.perf_counter() - t0, 1)})
            print(f"{n:18s} {mode:7s} b1 p50 {figs['b1']['p50']:8.3f} p99 {figs['b1']['p99']:8.3f} | "
                  f"c200 p50 {figs['c200']['p50']:9.2f} p99 {figs['c200']['p99']:9.2f} ms", flush=True)
    return out


# ---------------------------------------------------------------- the report
def _machine() -> dict[str, Any]:
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
            "loadavg": [round(x, 2) for x in os.getloadavg()],
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def merge(out: Path, part: str, payload: Any) -> dict[str, Any]:
    d = json.loads(out.read_text()) if out.is_file() else {}
    if part == "accuracy":
        d["accuracy"] = payload | {"machine": _machine()}
    else:
        keep = {(r["name"], r["mode"]) for r in payload}
        old = [r for r in d.get("latency", {}).get("rows", []) if (r["name"], r["mode"]) not in keep]
        runs = d.get("latency", {}).get("runs", []) + [_machine() | {"rows": sorted(keep)}]
        d["latency"] = {"rows": old + payload, "runs": runs}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(d, indent=1) + "\n")
    tmp.replace(out)
    return d


def _f(x: Any, nd: int = 2) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def table(d: dict[str, Any]) -> str:
    acc = {r["name"]: r for r in d.get("accuracy", {}).get("rows", [])}
    lat: dict[tuple[str, str], Any] = {(r["name"], r["mode"]): r for r in d.get("latency", {}).get("rows", [])}
    lines = ["| predictor | MAE / bound ShareGPT | MAE / bound AlpacaEval | max change vs fp32 | "
             "inline b1 p50 / p99 | inline c200 p50 / p99 | head b1 p50 / p99 | head c200 p50 / p99 | "
             "serve (wait 2 ms) b1 p50 / p99 | serve (wait 2 ms) c200 p50 / p99 | serve --inline b1 p50 / p99 | "
             "serve --inline c200 p50 / p99 | serve --max-wait-ms 0 b1 p50 / p99 | serve --max-wait-ms 0 c200 p50 / p99 |",
             "|---|" + "---:|" * 13]
    for n in HEADS:
        a = acc.get(n, {})
        lat_name = "chars" if n in ("constant", "prompt-length") else n
        cells = []
        for mode in MODES:
            r = lat.get((lat_name, mode))
            for k in ("b1", "c200"):
                cells.append("-" if r is None else f"{_f(r[k]['p50'])} / {_f(r[k]['p99'])}")
        ch = a.get("home_max_rel_change")
        lines.append(f"| {n} | {_f(a.get('home_mae_over_bound'), 3)} | {_f(a.get('transfer_mae_over_bound'), 3)} | "
                     f"{'-' if ch is None else f'{100 * ch:.0f}%'} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=("accuracy", "latency"), help="what to measure (else only --table)")
    ap.add_argument("--heads", default=",".join(HEADS), help=f"comma-separated, of: {', '.join(HEADS)}")
    ap.add_argument("--modes", default=",".join(MODES), help=f"latency modes: {', '.join(MODES)}")
    ap.add_argument("--b1", type=int, default=392, help="sequential requests (distinct prompts)")
    ap.add_argument("--bursts", type=int, default=2, help="bursts of 200 concurrent requests")
    ap.add_argument("--n-boot", type=int, default=1000, help="bootstrap draws of the bench's intervals")
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--table", action="store_true", help="print the markdown table of --out")
    a = ap.parse_args(argv)
    names = [h.strip() for h in a.heads.split(",") if h.strip()]
    bad = [h for h in names if h not in HEADS] + [m for m in a.modes.split(",") if m not in MODES]
    if bad:
        sys.exit(f"error: unknown head or mode {bad[0]!r}: heads {', '.join(HEADS)}; modes {', '.join(MODES)}")
    if a.b1 < 10 or a.bursts < 1:
        sys.exit(f"error: --b1 must be >= 10 and --bursts >= 1, got {a.b1} and {a.bursts}")
    out = Path(a.out)
    d = json.loads(out.read_text()) if out.is_file() else {}
    if a.part == "accuracy":
        order = sorted(names, key=lambda n: n.startswith("proxy-"))  # the fp32 proxy before its variants
        d = merge(out, "accuracy", accuracy(order, a.n_boot))
    elif a.part == "latency":
        d = merge(out, "latency", latency(names, a.modes.split(","), a.b1, a.bursts))
    print(table(d))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
