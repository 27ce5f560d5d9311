"""Teacher forcing on this machine: tokens/s of the target's forward pass by dtype, batching, threads and
LM head, the projected time of the whole run per setting, and how far bf16 rows lie from float32 rows.

    python -m benchmarks.bench_teacher_forcing [--run data/runs/smollm2-sharegpt] [--draft data/draft/smollm2-135m]
        [--tokens 6000] [--threads 1 2] [--out docs/results/teacher_forcing.json]

Settings (each on the same workload: whole prompts of the run with all their samples, every k-th prompt
sorted by samples per prompt, then id, so the mix of samples per prompt is the run's):

* ``draft-cache``: today's ``lenpred draft cache`` (batch 1, the prompt's cache reused, full model with
  logits, log-softmax over the vocabulary and a top-64 per response token), float32;
* ``states-b1``: the three captured states only (no layers above the highest, no LM head), one sample at a
  time, prompt recomputed per sample;
* ``states-prefix``: the same, the prompt once and its samples batched (right-padded) on its cache;
* ``full-prefix``: the whole model with its LM head (no log-softmax), batched exactly as ``states-prefix``;

each in float32 and bf16 autocast, at each thread count. bf16 runs only where the CPU has bf16 hardware
(``amx_bf16`` or ``avx512_bf16`` in /proc/cpuinfo, the test ``--compute-dtype auto`` makes); elsewhere
(an AVX2-only CPU, where torch emulates bf16 ~6x slower than float32) the bf16 settings are skipped with
a line saying so, or run with ``--emulated-bf16`` and labelled ``"bf16": "emulated"`` in their rows. Rate = the workload's response tokens / wall seconds;
projection = the run's response tokens (train, val and test) / rate.

Agreement: the trajectory rows (blocks draft, fused, target.j at the scheme's positions, through the draft
head) of ``states-prefix`` bf16 against float32 on the workload: relative L2 error per row
(||a - b|| / ||b||), median / p95 / max per block, and the committed ``outlets`` head's predicted remaining
tokens on both (median and p95 absolute difference, in tokens and relative).
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.flags import refuse_other_figures
from lenpred.data.rundir import RunDir
from lenpred.data.split import load_split
from lenpred.draft.io import check_against_target, load_draft
from lenpred.draft.states import StateCache
from lenpred.draft.target import Target
from lenpred.draft.teacher import StatesOnlyTarget, cpu_bf16, expand_cache, length_groups
from lenpred.models import load
from lenpred.outlets.features import positions, sample_rows
from lenpred.outlets.inputs import select_prompts


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The flags; an ``--out`` holding something else than this benchmark's figures exits before any work."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", default="data/runs/smollm2-sharegpt")
    ap.add_argument("--draft", default="data/draft/smollm2-135m")
    ap.add_argument("--head", default="data/outlets/smollm2-sharegpt/outlets", help="OUTLETS head for the agreement")
    ap.add_argument("--tokens", type=int, default=6000, help="response tokens in the workload (whole prompts)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--settings", nargs="+", default=["draft-cache", "states-b1", "states-prefix", "full-prefix"])
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    ap.add_argument("--emulated-bf16", action="store_true",
                    help="run the bf16 settings on a CPU without bf16 hardware too (emulated: slow; rows labelled so)")
    args = ap.parse_args(argv)
    refuse_other_figures(args.out, "teacher_forcing")
    return args


def cpu_model() -> str:
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return platform.processor() or "unknown"


class Bench:
    """The run's prompts, the workload (every k-th of them), the target and the draft head."""

    def __init__(self, args: argparse.Namespace) -> None:
        rd = RunDir.open(args.run)
        split = load_split(rd, require_complete=False)
        self.everything = select_prompts(rd, split, ("train", "val", "test"), None, None)
        self.run_resp = sum(len(r) for p in self.everything for _, r, _ in p.samples)
        self.run_prompt = sum(len(p.ids) for p in self.everything)
        self.run_samples = sum(len(p.samples) for p in self.everything)
        ordered = sorted(self.everything, key=lambda p: (len(p.samples), p.prompt_id))  # every k-th: stratified by K
        mean_resp = self.run_resp / len(ordered)
        self.k = max(1, int(len(ordered) * mean_resp / args.tokens))
        self.work = ordered[:: self.k]
        self.w_resp = sum(len(r) for p in self.work for _, r, _ in p.samples)
        self.w_samples = sum(len(p.samples) for p in self.work)
        print(f"run: {len(self.everything)} prompts, {self.run_samples} samples, {self.run_resp:,} response + "
              f"{self.run_prompt:,} prompt tokens")
        print(f"workload: every {self.k}-th prompt: {len(self.work)} prompts, {self.w_samples} samples, "
              f"{self.w_resp:,} response tokens")
        self.lm = load("smollm2-135m")
        head = load_draft(args.draft)
        self.layers = check_against_target(head, self.lm.model.config, fingerprint=self.lm.spec.fingerprint)
        self.draft = head.model
        self.draft.attach_embeddings(self.lm.model.get_input_embeddings())
        self.bf16 = cpu_bf16()
        print(f"CPU: {cpu_model()}; bf16 hardware: {self.bf16 or 'none'}; torch {torch.__version__}; "
              f"layers {self.layers}")
        self.dtypes = ("float32", "bfloat16") if self.bf16 or args.emulated_bf16 else ("float32",)
        if not self.bf16:
            print("bf16: this CPU has neither amx_bf16 nor avx512_bf16, so torch would emulate it (slower than "
                  "float32): " + ("running it anyway, rows labelled emulated (--emulated-bf16)" if args.emulated_bf16
                                  else "bf16 settings skipped (as --compute-dtype auto picks float32 here; "
                                  "--emulated-bf16 runs them)"))

    def run_draft_cache(self, work: list[Any] | None = None) -> None:
        work = self.work if work is None else work
        with tempfile.TemporaryDirectory() as d:
            c = StateCache.open_or_create(Path(d) / "c", {"target_fingerprint": "x", "layers": list(self.layers),
                                                          "topk": 64, "dtype": "float16", "card_hash": "x",
                                                          "max_seq_len": 4096})
            c.build(Target(self.lm.model, self.layers),
                    [(p.prompt_id, p.ids, [(i, r, "eos") for i, r, _ in p.samples]) for p in work],
                    prompts_per_shard=len(work))

    def run_states(self, dtype: str, prefix: bool, lm_head: bool, work: list[Any] | None = None) -> dict[Any, Any]:
        work = self.work if work is None else work
        st = StatesOnlyTarget(self.lm.model, self.layers, dtype)
        out = {}
        with torch.inference_mode():
            for p in work:
                if lm_head:
                    self.full_prefix(st, p)
                    continue
                if prefix:
                    aux = st.sample_states(p.ids, [r for _, r, _ in p.samples])
                else:
                    aux = [st.sample_states(p.ids, [r])[0] for _, r, _ in p.samples]
                for (i, _, _), a in zip(p.samples, aux, strict=True):
                    out[(p.prompt_id, i)] = a
        return out

    def full_prefix(self, st: StatesOnlyTarget, p: Any) -> None:
        """The whole model (every layer, final norm, LM head), batched exactly as ``states-prefix``: the prompt
        once, its samples right-padded in the same length groups on copies of its cache."""
        resp = [r for _, r, _ in p.samples if r]
        with st.autocast:
            cache = st.new_cache()
            self.lm.model(input_ids=torch.tensor([p.ids]), past_key_values=cache, use_cache=True)
            for g in length_groups([len(r) for r in resp]):
                T = max(len(resp[i]) for i in g)
                ids = torch.zeros((len(g), T), dtype=torch.long)
                for b, i in enumerate(g):
                    ids[b, : len(resp[i])] = torch.tensor(resp[i])
                self.lm.model(input_ids=ids, past_key_values=expand_cache(cache, len(g)), use_cache=True)


def timings(b: Bench, args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One row per (threads, setting, dtype), and the states-prefix states by dtype (first thread count)."""
    rows = []
    states = {}
    for threads in args.threads:
        torch.set_num_threads(threads)
        for setting in args.settings:
            for dtype in b.dtypes:
                if setting == "draft-cache" and dtype == "bfloat16":
                    continue
                # untimed warm-up on the shortest prompt (kernel selection, allocator), then the timed workload
                warm = [min(b.work, key=lambda p: p.tokens)]
                if setting == "draft-cache":
                    b.run_draft_cache(warm)
                else:
                    b.run_states(dtype, prefix=setting != "states-b1", lm_head=setting == "full-prefix", work=warm)
                t0 = time.perf_counter()
                if setting == "draft-cache":
                    b.run_draft_cache()
                else:
                    got = b.run_states(dtype, prefix=setting != "states-b1", lm_head=setting == "full-prefix")
                    if setting == "states-prefix" and threads == args.threads[0]:
                        states[dtype] = got
                sec = time.perf_counter() - t0
                rate = b.w_resp / sec
                row = {"setting": setting, "dtype": dtype, "threads": threads, "seconds": round(sec, 2),
                       "response_tokens_per_s": round(rate, 1),
                       "projected_run_hours": round(b.run_resp / rate / 3600, 3),
                       "bf16_hardware": bool(b.bf16) if dtype == "bfloat16" else None,
                       "bf16": ("native" if b.bf16 else "emulated") if dtype == "bfloat16" else None}
                rows.append(row)
                print(f"{setting:14s} {dtype:9s} threads {threads}: {sec:7.1f} s, {rate:7.0f} response tokens/s, "
                      f"run ~{b.run_resp / rate / 3600:.2f} h")
    return rows, states


def agreement(bench: Bench, states: dict[str, Any], head_path: str) -> dict[str, Any]:
    """The trajectory rows of states-prefix bf16 against float32 (and the committed head's predictions on both)."""
    agree: dict[str, Any] = {}
    if {"float32", "bfloat16"} <= set(states):
        import pandas as pd

        from lenpred.outlets.store import Trajectory
        from lenpred.predictors.io import load_head

        errs: dict[str, list[float]] = {}
        blocks32, blocks16, index = {}, {}, []
        for p in bench.work:
            for i, r, tr in p.samples:
                ts = positions(len(r))
                toks = np.asarray(p.ids + r, dtype=np.int64)
                a = sample_rows(bench.draft, states["float32"][(p.prompt_id, i)].numpy(), toks, len(p.ids), ts, bench.layers)
                b = sample_rows(bench.draft, states["bfloat16"][(p.prompt_id, i)].numpy(), toks, len(p.ids), ts, bench.layers)
                for name in a:
                    blocks32.setdefault(name, []).append(a[name])
                    blocks16.setdefault(name, []).append(b[name])
                    e = np.linalg.norm(b[name] - a[name], axis=1) / np.maximum(np.linalg.norm(a[name], axis=1), 1e-12)
                    errs.setdefault(name, []).extend(e.tolist())
                index.append(pd.DataFrame({"prompt_id": p.prompt_id, "sample_idx": i, "t": ts, "length": len(r),
                                           "remaining": len(r) - ts, "truncated": bool(tr)}))
        for name, e in errs.items():
            e = np.asarray(e)
            agree[name] = {"rows": int(e.size), "rel_l2_median": float(np.median(e)), "rel_l2_p95": float(np.quantile(e, 0.95)),
                           "rel_l2_max": float(e.max())}
            print(f"rows {name:14s}: relative L2 error bf16 vs float32 median {np.median(e):.4f}, "
                  f"p95 {np.quantile(e, 0.95):.4f}, max {e.max():.4f} ({e.size} rows)")
        if Path(head_path).is_dir():
            h = load_head(head_path)
            idx = pd.concat(index, ignore_index=True)
            spec = h.feature_spec_ if hasattr(h, "feature_spec_") else None
            preds = []
            for blocks in (blocks32, blocks16):
                t = Trajectory(idx, {k: np.concatenate(v) for k, v in blocks.items()}, dict(spec or {}))
                preds.append(np.asarray(h.predict(t), dtype=float))
            d = np.abs(preds[1] - preds[0])
            rel = d / np.maximum(preds[0], 1.0)
            agree["head"] = {"head": head_path, "rows": int(d.size), "abs_tokens_median": float(np.median(d)),
                             "abs_tokens_p95": float(np.quantile(d, 0.95)), "rel_median": float(np.median(rel)),
                             "rel_p95": float(np.quantile(rel, 0.95)),
                             "mae_float32": float(np.mean(np.abs(preds[0] - idx["remaining"]))),
                             "mae_bfloat16": float(np.mean(np.abs(preds[1] - idx["remaining"])))}
            print(f"head {head_path}: |bf16 - float32| predicted remaining median {np.median(d):.2f} tokens, p95 "
                  f"{np.quantile(d, 0.95):.2f} (relative median {np.median(rel):.4f}, p95 {np.quantile(rel, 0.95):.4f}); "
                  f"MAE on these rows {agree['head']['mae_float32']:.1f} (float32) vs {agree['head']['mae_bfloat16']:.1f} (bf16)")
    return agree


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    b = Bench(args)
    rows, states = timings(b, args)
    agree = agreement(b, states, args.head)
    res = {"bench": "teacher_forcing", "cpu": cpu_model(), "bf16_hardware": b.bf16,
           "bf16": "native" if b.bf16 else ("emulated" if args.emulated_bf16 else "skipped"), "torch": torch.__version__,
           "run": args.run, "run_prompts": len(b.everything), "run_samples": b.run_samples,
           "run_response_tokens": b.run_resp, "run_prompt_tokens": b.run_prompt,
           "workload": {"every_kth_prompt": b.k, "prompts": len(b.work), "samples": b.w_samples,
                        "response_tokens": b.w_resp},
           "layers": list(b.layers), "rows": rows, "agreement": agree,
           "command": "python -m benchmarks.bench_teacher_forcing " + " ".join(
               f"--{k.replace('_', '-')}" + ("" if v is True else f" {' '.join(map(str, v)) if isinstance(v, list) else v}")
               for k, v in vars(args).items() if v is not None and v is not False and k != "out")}
    if args.out:
        from lenpred.io.fileio import atomic_write_json

        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(Path(args.out), res)
        print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
