"""Training time of every head, and its per-request prediction latency at batch 1 and batch 64.

Latency is the whole ``predict_dist`` call a service makes (input checks, standardisation, the
network, the distribution), in microseconds per request: the median over calls of one request
(batch 1, cycling through 64 held-out prompts) and of 64 requests divided by 64. For ``proxy`` it
includes embedding the prompt text with MiniLM (that is what the proxy costs a router). Heads run on
one torch thread (lenpred.predictors.nn.one_thread).

Beside them, on the same machine: one decode step of the target -- one token on a KV cache of a
typical context (the run's median prompt tokens + half the output, i.e. a step in the middle of a
median answer; ``--context N`` to choose) -- with transformers (fp32, the cache cropped back after
each step) and with llama.cpp (the GGUF the reference run was collected with), each on one thread
and on every core. Logits included, sampling not.

Data: real features (``--features FEATS --run RUN``: the run's train / val split) or, by default,
synthetic features of the reference run's shape (2,000 training prompts, blocks of width 576,
2 samples each; lenpred.predictors.synthetic's planted law). The JSON records the machine and its load
average at the start and the end: on a shared CPU every figure is an upper bound.

    python -m benchmarks.bench_predictors                     # synthetic, every head
    python -m benchmarks.bench_predictors --features data/features/smollm2-sharegpt \\
        --run data/runs/smollm2-sharegpt --out out/bench/predictors-speed.json
    # --heads ridge,mlp  --target llamacpp (or '' / --no-target)  --context 512  --reps 50
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table


def _synthetic(n_train: int, d: int) -> dict[str, Any]:
    from lenpred.predictors.synthetic import planted

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


def typical_context(run: str | None) -> int:
    """Context length of a typical decode step: the median over the run's samples of prompt tokens
    plus half the sample's output (a step in the middle of an answer); 300 without a run."""
    if run is None:
        return 300
    from lenpred.data.lengths import sample_lengths

    s = sample_lengths(run)
    return int(round(float((s["n_prompt_tokens"] + s["n_tokens"] / 2).median())))


def _decode_hf(model_id: str, context: int, threads: list[int], reps: int) -> dict[str, float]:
    """One decode step of the target with transformers: one token on a KV cache of ``context`` tokens
    (the cache is cropped back after each step, so every step sees the same context), logits included."""
    import inspect
    import warnings

    import torch
    from transformers import DynamicCache

    from lenpred.models import load

    m = load(model_id)
    # transformers >= 5.2x names the argument `cache`; older versions `past_key_values`
    kw = "cache" if "cache" in inspect.signature(m.model.forward).parameters else "past_key_values"
    ids = torch.randint(10, 1000, (1, context), generator=torch.Generator().manual_seed(0))
    out = {}
    before = torch.get_num_threads()
    try:
        for t in threads:
            torch.set_num_threads(t)
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                try:
                    past = DynamicCache(config=m.model.config)
                except TypeError:  # older transformers
                    past = DynamicCache()
                m.model(ids, use_cache=True, **{kw: past})  # (1, context) prefill fills the cache
                nxt = torch.tensor([[42]])

                def step(past: Any = past, nxt: torch.Tensor = nxt) -> None:
                    m.model(nxt, use_cache=True, **{kw: past})
                    past.crop(-1)  # drop the new token again

                out[f"transformers fp32, {t} thread{'s' if t > 1 else ''}"] = 1e6 * _latency(step, reps)
    finally:
        torch.set_num_threads(before)
    return out


def _decode_llamacpp(model_id: str, context: int, threads: list[int], reps: int) -> dict[str, float]:
    """One decode step with llama.cpp (the engine and GGUF the reference run was collected with): one
    token after a ``context``-token prompt; the context grows by one token per timed step (``reps``
    tokens in all, negligible beside ``context``)."""
    import llama_cpp

    from lenpred.models import resolve

    gguf = resolve(model_id).gguf_path
    if gguf is None:
        raise RuntimeError(f"{model_id} has no GGUF file for llama.cpp")
    rng = np.random.default_rng(0)
    out = {}
    for t in threads:
        llm = llama_cpp.Llama(model_path=str(gguf), n_ctx=context + 2 * reps + 16, n_batch=512, n_threads=t,
                              n_threads_batch=t, verbose=False)
        llm.eval(rng.integers(10, 1000, context).tolist())
        toks = iter(rng.integers(10, 1000, 2 * reps + 4).tolist())
        quant = gguf.stem.rsplit(".", 1)[-1]  # SmolLM2-135M-Instruct.Q4_1 -> Q4_1
        out[f"llama.cpp {quant}, {t} thread{'s' if t > 1 else ''}"] = 1e6 * _latency(
            lambda llm=llm, toks=toks: llm.eval([next(toks)]), reps)
        if hasattr(llm, "close"):
            llm.close()
    return out


def decode_steps(engines: list[str], model_id: str, context: int, reps: int) -> dict[str, float]:
    """Decode-step latency (microseconds) per engine and thread count; what failed is reported, not fatal."""
    threads = sorted({1, os.cpu_count() or 1})
    out: dict[str, float] = {}
    for e in engines:
        fn = {"transformers": _decode_hf, "llamacpp": _decode_llamacpp}[e]
        try:
            out |= fn(model_id, context, threads, reps)
        except Exception as err:  # noqa: BLE001 - the benchmark reports what it could not measure
            print(f"(no {e} decode-step figure: {type(err).__name__}: {err})", file=sys.stderr)
    return out


def machine() -> dict[str, Any]:
    import platform

    import torch

    return {"cpus": os.cpu_count(), "load_average": list(os.getloadavg()), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(), "torch": torch.__version__,
            "python": platform.python_version()}


def bench_heads(names: list[str], data: dict[str, Any], reps: int, say: Any = print) -> list[dict[str, Any]]:
    """Per head: training time (``fit`` on the training prompts, early stopping on val) and the latency
    of ``predict_dist`` per request at batch 1 (cycling through the probe prompts) and batch 64."""
    from lenpred.predictors.registry import make_predictor

    (Xtr, ytr, ttr), (Xva, yva, tva), (Xp, tp) = data["train"], data["val"], data["probe"]
    rows = []
    for name in names:
        h = make_predictor(name)
        text = h.input_kind == "text"
        t0 = time.perf_counter()
        h.fit(ttr if text else Xtr, ytr, X_val=tva if text else Xva, y_val=yva)
        train_s = time.perf_counter() - t0
        many = tp[:64] if text else Xp
        n_many = len(many) if text else many.n
        singles = [tp[i:i + 1] if text else Xp.subset(Xp.prompt_ids[i:i + 1]) for i in range(len(tp[:64]))]
        # batch 1: one request at a time, cycling through the probe prompts (their lengths differ)
        cycle = itertools.cycle(singles)
        b1 = _latency(lambda it=cycle, h=h: h.predict_dist(next(it)), reps)
        b64 = _latency(lambda many=many, h=h: h.predict_dist(many), max(reps // 5, 5)) / n_many
        rows.append({"head": name, "train_s": train_s, "n_train": ytr.n, "batch1_us": 1e6 * b1, "batch64_us": 1e6 * b64,
                     "batch": n_many, "epochs": (getattr(h, "train_log_", None) or {}).get("epochs_run")})
        say(f"{name}: trained in {train_s:.1f} s, batch 1 {1e6 * b1:.0f} us, batch {n_many} {1e6 * b64:.1f} us/request")
    return rows


def render(result: dict[str, Any]) -> None:
    rows, decode = result["heads"], result["decode_step_us"]
    ref = min(decode.values()) if decode else None
    m = result["machine"]
    con = Console(width=160)
    t = Table(title=f"heads: training time and per-request prediction latency ({result['data']} features, "
                    f"{result['n_train']} training prompts); {m['cpus']} CPUs, load average "
                    f"{m['load_average'][0]:.1f} at the start (shared CPU: figures are upper bounds); target decode step: "
                    f"{result['target_model']}, one token on a {result['context_tokens']}-token KV cache", title_justify="left")
    cols = ["head", "train (s)", "epochs", "batch 1 (us/request)", "batch 64 (us/request)"]
    if ref:
        cols.append("batch 1 / fastest decode step")
    for c in cols:
        t.add_column(c, justify="left" if c == "head" else "right")
    for r in rows:
        cells = [r["head"], f"{r['train_s']:.1f}", str(r["epochs"] or "-"), f"{r['batch1_us']:.0f}", f"{r['batch64_us']:.1f}"]
        if ref:
            cells.append(f"{100 * r['batch1_us'] / ref:.2f}%")
        t.add_row(*cells)
    for k, v in decode.items():
        cells = [f"target decode step: {k}", "", "", f"{v:.0f}", ""]
        if ref:
            cells.append(f"{100 * v / ref:.0f}%")
        t.add_row(*cells, style="bold")
    con.print(t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run")
    ap.add_argument("--features")
    ap.add_argument("--n-train", type=int, default=2000, help="synthetic training prompts")
    ap.add_argument("--width", type=int, default=576, help="synthetic block width (SmolLM2-135M: 576)")
    ap.add_argument("--heads", default=None, help="comma-separated heads (default: all)")
    ap.add_argument("--reps", type=int, default=50, help="timed calls per latency figure")
    ap.add_argument("--target", default="transformers,llamacpp",
                    help="engines for the target's decode step: transformers, llamacpp (comma-separated; '' for none)")
    ap.add_argument("--no-target", action="store_true", help="skip the target's decode step")
    ap.add_argument("--model", default=None, help="target model (default: the run's, else smollm2-135m)")
    ap.add_argument("--context", type=int, default=None,
                    help="KV-cache length of the decode step (default: the run's median prompt + half output, else 300)")
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    a = ap.parse_args(argv)
    if a.features and not a.run:
        ap.error("--features needs --run (the split and the lengths)")

    import torch

    from lenpred.predictors.registry import PREDICTORS

    engines = [] if a.no_target else [e.strip() for e in a.target.split(",") if e.strip()]
    bad = sorted(set(engines) - {"transformers", "llamacpp"})
    if bad:
        ap.error(f"unknown --target engine(s) {bad}: use transformers, llamacpp")
    info = machine()
    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])  # its first use imports torch._dynamo (~4 s): not a head's cost
    data = _real(a.run, a.features) if a.features else _synthetic(a.n_train, a.width)
    names = a.heads.split(",") if a.heads else PREDICTORS.names()
    rows = bench_heads(names, data, a.reps, say=lambda msg: print(msg, file=sys.stderr))
    model = a.model
    if model is None:
        model = "smollm2-135m"
        if a.run:
            from lenpred.data.rundir import RunDir

            model = str(RunDir.open(a.run).card["model"].get("id") or model)
    context = a.context if a.context is not None else typical_context(a.run)
    decode = decode_steps(engines, model, context, a.reps)
    info["load_average_end"] = list(os.getloadavg())
    result = {"data": "real" if a.features else "synthetic", "run": a.run, "features": a.features,
              "n_train": data["train"][1].n, "heads": rows, "decode_step_us": decode, "target_model": model,
              "context_tokens": context, "reps": a.reps, "machine": info}
    render(result)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
