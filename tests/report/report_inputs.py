"""Inputs of the report tests, made with the verbs on the committed runs (the fixtures are in conftest.py).

The reference run (data/runs/smollm2-sharegpt) and the AlpacaEval run under the same card are
committed, and so is an OUTLETS bench of the reference run (docs/outlets_real). The bound, the two
benches (two hand-made predictors whose figures a test can check), a small simulation, a policy
table and a hand-made yardstick cells file (known best arms) are made here, with few bootstrap
replicates to stay fast.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lenpred.cli import main
from lenpred.data.lengths import sample_lengths
from lenpred.data.rundir import RunDir
from lenpred.data.split import load_split
from lenpred.predictions import Predictions

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "data" / "runs" / "smollm2-sharegpt"
ALPACA = ROOT / "data" / "runs" / "smollm2-alpaca-eval"
OUTLETS = ROOT / "docs" / "outlets_real"
CONSTANT = 150.0  # the constant predictor's prediction (tokens)


@dataclass(frozen=True)
class Inputs:
    run: Path
    bound: Path
    bench: Path
    transfer: Path
    outlets: Path
    sim: Path
    policies: Path
    yardstick: Path


def _verb(*argv: object) -> None:
    assert main([str(a) for a in argv]) == 0, argv


def _predictions(run: Path, out: Path) -> list[str]:
    """Two predictors of the run's test prompts: a constant, and each prompt's own mean length."""
    rd = RunDir.open(run)
    split = load_split(rd, require_complete=False)
    s = sample_lengths(rd, with_prompts=False)
    test = s[s["prompt_id"].isin(split.test)]
    means = test.groupby("prompt_id")["n_tokens"].mean()
    out.mkdir(parents=True, exist_ok=True)
    made = []
    for name, pred in (("constant", np.full(len(means), CONSTANT)), ("prompt-mean", means.to_numpy(float))):
        df = pd.DataFrame({"prompt_id": means.index.astype(str), "sample_idx": -1, "pred_tokens": pred})
        if name == "prompt-mean":  # an 80% interval, so that the coverage plot is drawn
            df = df.assign(q10=0.5 * pred, q50=pred, q90=1.6 * pred)
        path = out / f"{name}.parquet"
        Predictions.from_frame(df, made_by=name, card=rd.card).write(path)
        made.append(f"{name}={path}")
    return made


def _sim_config(path: Path) -> Path:
    cfg = {
        "name": "tiny", "seed": 0,
        "cluster": {"n_prefill": 1, "n_decode": 2, "profile": "llama8b-h100"},
        "workload": {"n_requests": 300, "lengths": {"source": "rundir", "path": str(REFERENCE), "roles": ["test"]}},
        "prediction": {"model": "oracle"},
        "policies": [{"name": "fcfs+rr", "queue": "fcfs", "dispatch": "round-robin"},
                     {"name": "sjf+lpt", "queue": "sjf", "dispatch": "least-predicted-tokens"}],
        "sweep": {"loads": [0.8, 1.2], "load_unit": "capacity", "probe_requests": 200},
        "plots": False,
    }
    path.write_text(json.dumps(cfg))
    return path


def _policies(path: Path) -> Path:
    rows = [{"policy": pol, "predictor": pred, "arrival": "poisson", "workload": "test", "seed": seed, "load": load,
             "short_p99_s": base * load * (1.0 if pol == "fcfs" else 0.7) + 0.01 * seed}
            for pol in ("fcfs", "sjf") for pred, base in (("ridge", 2.0), ("oracle", 1.5))
            for load in (0.9, 1.0, 1.1) for seed in (0, 1)]
    rows += [{"policy": "las", "predictor": "-", "arrival": "poisson", "workload": "test", "seed": 0, "load": load,
              "short_p99_s": load} for load in (0.9, 1.0, 1.1)]  # a policy that reads no prediction
    path.write_text(json.dumps({"rows": rows, "command": "python -m benchmarks.policies --tiny"}))
    return path


# the hand-made yardstick group (steady, 1+2, batch 16): arm -> per seed (short P99, overall P99), the
# baseline's being (10, 20); ratios: gboost/mlp 0.8 / 0.95; sjf aging100/mlp 0.6 / 1.03 (the best real
# predictor within 1.05x); boost2 B=10/mlp 0.4 / 1.10 (better, but over 1.05x); gboost/outlets 0.5 with
# 1.00 and 1.06 (over in one seed); mlfq diverges; the ceiling is boost2 B=10/true (0.3 / 1.025), sjf/true
# (0.2 / 1.5) is over
YARDSTICK_ARMS = {
    "fcfs+rr/-": ((10.0, 20.0), (10.0, 20.0)),
    "fcfs late/-": ((10.0, 20.0), (10.0, 20.0)),  # the recommended default; ties FCFS + RR (the first is the reference)
    "uniboost/-": ((10.0, 20.0), (10.0, 20.0)),
    "mlfq/-": ((3.0, 400.0), (3.0, 500.0)),
    "gboost/mlp": ((8.0, 19.0), (8.0, 19.0)),
    "sjf aging100/mlp": ((6.0, 20.6), (6.0, 20.6)),
    "boost2 boost_s10 short_threshold224/mlp": ((4.0, 22.0), (4.0, 22.0)),
    "gboost/outlets": ((5.0, 20.0), (5.0, 21.2)),
    "sjf/true": ((2.0, 30.0), (2.0, 30.0)),
    "boost2 boost_s10 short_threshold224/true": ((3.0, 20.5), (3.0, 20.5)),
}


def yardstick_row(arms: dict[str, tuple[float, float]], *, seed: int = 0, regime: str = "steady",
                  cluster: str = "1+2", batch: int = 16, where: str = "0.95", **extra: object) -> dict[str, object]:
    """One cell row as benchmarks/bench_yardstick.py writes it: arm -> (short P99, overall P99); the short
    P50 is half the short P99, the SLO attainment 0.9."""
    figs = {a: {"short_p99_s": s, "p99_s": o, "short_p50_s": s / 2, "attain_all": 0.9, "n_window": 100}
            for a, (s, o) in arms.items()}
    return {"key": f"{regime}|{cluster}|b{batch}|{where}|poisson|s{seed}",
            "cell": {"regime": regime, "cluster": cluster, "batch": batch, "where": where, "arrival": "poisson",
                     "seed": seed}, "arms": figs, **extra}


def _yardstick(path: Path) -> Path:
    rows = [yardstick_row({a: v[seed] for a, v in YARDSTICK_ARMS.items()}, seed=seed, diverging=["mlfq/- p99_s"])
            for seed in (0, 1)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def make_inputs(d: Path) -> Inputs:
    _verb("bound", REFERENCE, "--out", d / "bound", "--n-boot", 50, "--n-boot-robust", 10, "--n-imputations", 2,
          "--n-normal-reference", 2, "--grid", 4)
    _verb("bench", "--run", REFERENCE, "--predictions", *_predictions(REFERENCE, d / "preds-ref"), "--n-boot", 20,
          "--out", d / "bench")
    _verb("bench", "--run", ALPACA, "--predictions", *_predictions(ALPACA, d / "preds-alpaca"), "--n-boot", 20,
          "--out", d / "bench-alpaca")
    _verb("simulate", "--config", _sim_config(d / "tiny.json"), "--out", d / "sim", "--quiet")
    return Inputs(REFERENCE, d / "bound", d / "bench", d / "bench-alpaca", OUTLETS, d / "sim",
                  _policies(d / "policies.json"), _yardstick(d / "steady-cells.jsonl"))


def make_page(inputs: Inputs, out: Path) -> Path:
    """The page with every section."""
    _verb("report", "--run", inputs.run, "--bound", inputs.bound, "--bench", inputs.bench, inputs.transfer,
          "--outlets", inputs.outlets, "--sim", inputs.sim, "--policies", inputs.policies,
          "--yardstick", inputs.yardstick, "--out", out)
    return out
