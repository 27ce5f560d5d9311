"""Cost per cycle of an OUTLETS length head inside the speculative loop, against one target forward pass
measured in the same process (the issue's goal: under 1%).

    python -m benchmarks.bench_outlets_cost --draft DRAFT --heads HEAD [HEAD ...] [--new-tokens 80]
        [--prompts 4] [--out out/bench/outlets_cost.json]

SmolLM2-135M on the CPU, one torch thread, k = 3, greedy. Each head gets its own generations (the
only callback). Reports wall time (perf_counter) and this thread's CPU time (thread_time: what the
work costs without the waits a shared CPU adds), per cycle as medians, and the target pass as the
median single-token decoding pass at the generation's final context.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lenpred.draft.io import check_against_target, load_draft
from lenpred.draft.speculative import SpeculativeDecoder
from lenpred.draft.target import Target
from lenpred.models import load
from lenpred.outlets.online import OnlineLengthHead, read_head_spec
from lenpred.predictors.io import load_head

MSGS = ["Write a haiku about tea.", "Explain what a hash table is in two sentences.", "List three uses of copper.",
        "Give me a short recipe for pancakes."]


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draft", required=True)
    ap.add_argument("--heads", nargs="+", required=True)
    ap.add_argument("--new-tokens", type=int, default=80)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--out", default=None)
    return ap.parse_args(argv)


def target_pass(target: Target, ids: list[int], repeats: int = 20) -> list[tuple[float, float]]:
    """Single-token decoding passes at the final context: (wall, cpu) seconds each."""
    out = []
    with torch.inference_mode():
        kv = target.new_cache()
        target.forward(torch.tensor([list(ids[:-1])]), kv)
        last = torch.tensor([[int(ids[-1])]])
        for _ in range(repeats + 2):
            w0, c0 = time.perf_counter(), time.thread_time()
            target.forward(last, kv)
            out.append((time.perf_counter() - w0, time.thread_time() - c0))
            target.crop(kv, len(ids) - 1)
    return out[2:]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    torch.set_num_threads(1)
    lm = load("smollm2-135m")
    draft = load_draft(args.draft)
    layers = check_against_target(draft, lm.model.config, fingerprint=lm.spec.fingerprint)
    target = Target(lm.model, layers)
    heads = {p: (load_head(p), read_head_spec(p)) for p in args.heads}

    wall: dict[str, list[float]] = {p: [] for p in heads}
    parts: dict[str, dict[str, list[float]]] = {p: {"row": [], "head": []} for p in heads}
    cpu: dict[str, list[float]] = {p: [] for p in heads}
    fwd = []
    for m in MSGS[: args.prompts]:
        ids = lm.tokenizer(lm.tokenizer.apply_chat_template([{"role": "user", "content": m}], tokenize=False,
                           add_generation_prompt=True), add_special_tokens=False)["input_ids"]
        for p, (h, sp) in heads.items():
            cb = OnlineLengthHead(h, len(ids), layers, sp)

            def on_cycle(c: Any, cb: OnlineLengthHead = cb, p: str = p) -> None:
                w0, c0 = time.perf_counter(), time.thread_time()
                cb(c)
                cpu[p].append(time.thread_time() - c0)
                wall[p].append(time.perf_counter() - w0)
            dec = SpeculativeDecoder(target, draft.model, k=3, sampling=None, max_new_tokens=args.new_tokens,
                                     eos_ids=[lm.tokenizer.eos_token_id])
            g = dec.generate(list(ids), on_cycle=on_cycle)
            parts[p]["row"] += cb.row_seconds
            parts[p]["head"] += cb.head_seconds
            print(f"{p.split('/')[-1]} {m[:24]!r}: {len(g.tokens)} tokens, {len(cb.events)} cycles, fast path "
                  f"{getattr(cb, 'fast', None) is not None}", flush=True)
        fwd += target_pass(target, list(ids) + g.tokens)
    FW, FC = float(np.median([w for w, _ in fwd])), float(np.median([c for _, c in fwd]))
    res: dict[str, Any] = {"target_pass_wall_ms": 1e3 * FW, "target_pass_cpu_ms": 1e3 * FC, "target_passes": len(fwd),
                           "loadavg": Path("/proc/loadavg").read_text().split()[:3], "heads": {}}
    for p in heads:
        mw, mc = float(np.median(wall[p])), float(np.median(cpu[p]))
        res["heads"][p] = {"cycles": len(wall[p]), "wall_ms": 1e3 * mw, "cpu_ms": 1e3 * mc,
                           "wall_p90_ms": 1e3 * float(np.percentile(wall[p], 90)),
                           "share_wall": mw / FW, "share_cpu": mc / FC,
                           "row_ms": 1e3 * float(np.median(parts[p]["row"])),
                           "head_ms": 1e3 * float(np.median(parts[p]["head"]))}
        print(f"{p}: {1e3*mw:.3f} ms wall / {1e3*mc:.3f} ms CPU per cycle (median of {len(wall[p])} cycles) = "
              f"{100*mw/FW:.2f}% (wall) / {100*mc/FC:.2f}% (CPU) of one target forward pass "
              f"({1e3*FW:.1f} ms wall / {1e3*FC:.1f} ms CPU, median of {len(fwd)})")
    print(json.dumps(res, indent=1))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
