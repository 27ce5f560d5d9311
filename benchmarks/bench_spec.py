"""Speculative decoding with an EAGLE-3 head on a run's test prompts: tau, acceptance, speed-up.

For each test prompt (the run's split), greedy and under the run's sampling card, it decodes once
plainly (k = 0: one target pass per token, the same target and sampling code as the speculative
loop) and once per chain length k, and reports

* tau -- tokens committed per verifying target pass, the target's own token included (EAGLE's
  "acceptance length"; 1 = nothing accepted), the prefill's first token not counted;
* acceptance at chain position j -- the share of cycles reaching position j whose draft there was
  accepted (conditional), and the unconditional share of cycles accepting >= j drafts;
* speed-up -- generated tokens per second over plain decoding's, same prompts and mode (wall clock
  on this machine; under sampling the outputs differ run to run, so it is tokens/s that is compared).

    python benchmarks/bench_spec.py --run data/runs/smollm2-sharegpt --draft out/draft/smollm2 \\
        --prompts 8 --max-new-tokens 128 --ks 1,2,3,4,5,6 --out out/bench_spec.json

Writes the table to stdout and, with --out, a JSON file (schema in this docstring's keys:
``rows[] = {mode, k, tau, tokens, seconds, tokens_per_s, speedup, accept_cond[], accept_uncond[]}``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from lenpred.collect.base import SamplingConfig
from lenpred.data.rundir import RunDir
from lenpred.data.split import load_split
from lenpred.draft.io import check_against_target, load_draft
from lenpred.draft.speculative import SpeculativeDecoder
from lenpred.draft.target import Target
from lenpred.models import load


def _prompts(run: RunDir, n: int) -> list[tuple[str, list[int]]]:
    split = load_split(run, require_complete=False)
    p = run.prompts()
    p = p[p["prompt_id"].astype(str).isin(split.test)]
    return [(str(r.prompt_id), [int(x) for x in r.prompt_token_ids]) for r in p.head(n).itertuples()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--model", help="default: the head's target")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--ks", default="1,2,3,4,5,6")
    ap.add_argument("--modes", default="greedy,sampling")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    run = RunDir.open(a.run)
    head = load_draft(a.draft)
    lm = load(a.model or (head.meta or {}).get("target", {}).get("id") or run.card["model"]["id"])
    layers = check_against_target(head, lm.model.config, fingerprint=lm.spec.fingerprint)
    target = Target(lm.model, layers)
    eos = lm.tokenizer.convert_tokens_to_ids(run.card["model"].get("eos_token")) or lm.tokenizer.eos_token_id
    card = {k: v for k, v in run.card["sampling"].items() if k in SamplingConfig.__dataclass_fields__}
    sampling = SamplingConfig(**{**card, "max_new_tokens": a.max_new_tokens})
    prompts = _prompts(run, a.prompts)
    ks = [int(x) for x in a.ks.split(",")]
    rows = []
    for mode in a.modes.split(","):
        s = None if mode == "greedy" else sampling
        base_tok = base_s = 0.0
        for k in [0, *ks]:
            dec = SpeculativeDecoder(target, head.model if k else None, k=k, sampling=s,
                                     max_new_tokens=a.max_new_tokens, eos_ids=[eos])
            tok = secs = 0.0
            committed = cycles = 0
            acc: list[int] = []
            for i, (_, ids) in enumerate(prompts):
                gen = torch.Generator().manual_seed(a.seed * 1000 + i)
                t = time.perf_counter()
                g = dec.generate(ids, generator=gen)
                secs += time.perf_counter() - t
                tok += len(g.tokens)
                committed += sum(g.committed)
                cycles += len(g.committed)
                acc.extend(g.accepted)
            if k == 0:
                base_tok, base_s = tok, secs
            cond = [(sum(x >= j for x in acc) / max(sum(x >= j - 1 for x in acc), 1)) for j in range(1, k + 1)]
            uncond = [sum(x >= j for x in acc) / max(len(acc), 1) for j in range(1, k + 1)]
            tps = tok / secs if secs else 0.0
            row = {"mode": mode, "k": k, "tau": committed / max(cycles, 1), "tokens": int(tok), "seconds": secs,
                   "tokens_per_s": tps, "speedup": tps / (base_tok / base_s) if base_s else 1.0,
                   "accept_cond": cond, "accept_uncond": uncond}
            rows.append(row)
            print(f"{mode:8s} k={k}  tau {row['tau']:.2f}  {tps:6.2f} tok/s  speed-up {row['speedup']:.2f}  "
                  f"accept@j {' '.join(f'{x:.2f}' for x in cond)}", flush=True)
    out = {"run": str(run.path), "draft": str(a.draft), "prompts": [p for p, _ in prompts],
           "max_new_tokens": a.max_new_tokens, "threads": torch.get_num_threads(), "rows": rows,
           "sampling": card}
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
