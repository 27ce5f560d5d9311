"""Training time of every head, and its per-request prediction latency at batch 1 and batch 64.

Latency is the whole ``predict_dist`` call a service makes (input checks, standardisation, the
network, the distribution), in microseconds per request: the median over calls of one request
(batch 1, cycling through 64 held-out prompts) and of 64 requests divided by 64. For ``proxy`` it includes embedding the prompt
text with MiniLM (that is what the proxy costs a router). Beside them: one decode step of the target
(SmolLM2-135M, transformers, batch 1, KV cache after a 200-token prompt) on the same machine.

Data: real features (``--features FEATS --run RUN``: the run's train / val split) or, by default,
synthetic features of the reference run's shape (2,000 training prompts, blocks of width 576,
2 samples each; tests/predictors/synth.py's planted law).

    python benchmarks/bench_predictors.py                     # synthetic, every head
    python benchmarks/bench_predictors.py --features data/features/smollm2-sharegpt \\
        --run data/runs/smollm2-sharegpt --out out/bench/predictors-speed.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def _synthetic(n_train: int, d: int) -> dict[str, Any]:
    from predictors.synth import planted

    tr, va, te = planted(n_train, 2, seed=0, d=d), planted(max(n_train // 10, 8), 2, seed=1, d=d), planted(64, 2, seed=2, d=d)
    return {"train": (tr["X"], tr["y"], tr["text"]), "val": (va["X"], va["y"], va["text"]), "probe": (te["X"], te["text"])}


def _real(run: str, features: str) -> dict[str, Any]:
    from lenpred.data.lengths import sample_lengths
    from lenpred.data.rundir import RunDir
    from lenpred.data.split import load_split
    from lenpred.features.store import load_features
    from lenpred.predictors.pipeline import run_cap
    from lenpred.predictors.targets import Targets

    rd = RunDir.open(run)
    sp = load_split(rd, require_complete=False)
    f = load_features(features, card=rd.card)
    s = sample_lengths(rd, with_prompts=False)
    text = rd.prompts().set_index("prompt_id")["text"]
    out = {}
    for role in ("train", "val"):
        ids = sorted(sp.ids(role))
        out[role] = (f.subset(ids), Targets.from_lengths(s, ids, run_cap(rd.card)), text.loc[ids].tolist())
    ids = sorted(sp.test)[:64]
    out["probe"] = (f.subset(ids), text.loc[ids].tolist())
    return out


def _latency(fn: Any, reps: int) -> float:
    fn()  # warm-up
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def _decode_step_us(reps: int) -> dict[str, float] | None:
    import torch

    from lenpred.models import load

    try:
        m = load("smollm2-135m")
    except Exception as e:  # noqa: BLE001 - the benchmark reports what it could not measure
        print(f"(no decode-step figure: {e})")
        return None
    out = {}
    ids = torch.randint(10, 1000, (1, 200))
    for threads in (1, torch.get_num_threads()):
        torch.set_num_threads(threads)
        with torch.no_grad():
            past = m.model(ids, use_cache=True).past_key_values
            nxt = torch.tensor([[42]])

            def step(past: Any = past, nxt: torch.Tensor = nxt) -> None:
                m.model(nxt, past_key_values=past, use_cache=True)
                past.crop(-1)  # drop the new token again: every step sees the same 200-token cache

            out[f"{threads}_thread"] = 1e6 * _latency(step, reps)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run")
    ap.add_argument("--features")
    ap.add_argument("--n-train", type=int, default=2000, help="synthetic training prompts")
    ap.add_argument("--width", type=int, default=576, help="synthetic block width (SmolLM2-135M: 576)")
    ap.add_argument("--heads", default=None, help="comma-separated heads (default: all)")
    ap.add_argument("--reps", type=int, default=50, help="timed calls per latency figure")
    ap.add_argument("--no-target", action="store_true", help="skip the target's decode step")
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    a = ap.parse_args()

    import torch

    from lenpred.predictors.registry import PREDICTORS, make_predictor

    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])  # its first use imports torch._dynamo (~4 s): not a head's cost
    data = _real(a.run, a.features) if a.features else _synthetic(a.n_train, a.width)
    (Xtr, ytr, ttr), (Xva, yva, tva), (Xp, tp) = data["train"], data["val"], data["probe"]
    names = a.heads.split(",") if a.heads else PREDICTORS.names()
    rows = []
    for name in names:
        h = make_predictor(name)
        text = h.input_kind == "text"
        t0 = time.perf_counter()
        h.fit(ttr if text else Xtr, ytr, X_val=tva if text else Xva, y_val=yva)
        train_s = time.perf_counter() - t0
        many = tp[:64] if text else Xp
        singles = [tp[i:i + 1] if text else Xp.subset(Xp.prompt_ids[i:i + 1]) for i in range(len(tp[:64]))]
        # batch 1: one request at a time, cycling through the 64 probe prompts (their lengths differ)
        cycle = itertools.cycle(singles)
        b1 = _latency(lambda it=cycle, h=h: h.predict_dist(next(it)), a.reps)
        b64 = _latency(lambda many=many, h=h: h.predict_dist(many), max(a.reps // 5, 5)) / (len(many) if text else many.n)
        rows.append({"head": name, "train_s": train_s, "n_train": ytr.n, "batch1_us": 1e6 * b1, "batch64_us": 1e6 * b64,
                     "epochs": (getattr(h, "train_log_", None) or {}).get("epochs_run")})
        print(f"{name}: trained in {train_s:.1f} s", file=sys.stderr)
    decode = None if a.no_target else _decode_step_us(a.reps)

    t = Table(title=f"heads: training time and prediction latency ({'real' if a.features else 'synthetic'} features, "
                    f"{ytr.n} training prompts)")
    for c in ("head", "train (s)", "epochs", "batch 1 (us/request)", "batch 64 (us/request)"):
        t.add_column(c, justify="left" if c == "head" else "right")
    for r in rows:
        t.add_row(r["head"], f"{r['train_s']:.1f}", str(r["epochs"] or "-"), f"{r['batch1_us']:.0f}", f"{r['batch64_us']:.1f}")
    if decode:
        for k, v in decode.items():
            t.add_row(f"target decode step ({k.replace('_', ' ')})", "", "", f"{v:.0f}", "")
    Console().print(t)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps({"heads": rows, "decode_step_us": decode,
                                           "data": "real" if a.features else "synthetic"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
