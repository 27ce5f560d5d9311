"""Prefill-features throughput on this machine: prompts/s and tokens/s at a few batch sizes.

Feeds a seeded sample of a run's prompts (their ``prompt_token_ids``, shortest first, as
``lenpred features`` does) through :class:`lenpred.features.prefill.Extractor` with the default
spec (layers ~L/3, L/2, L; last / mean / entropy pools; chunked entropies). Model loading is not
timed. "Tokens" are real prompt tokens; the padding share is the fraction of fed positions that
were padding, and ``fed_per_s`` counts padding too. A small sample has sparse lengths, so its
padding share overstates the full run's (2,400 prompts sorted by length: 0.8% at batch 8).

    python -m benchmarks.bench_features --prompts 48 --batch-sizes 1,4,8,16 --threads 1
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from benchmarks.flags import int_list
from lenpred.data.rundir import RunDir
from lenpred.features.prefill import Extractor, FeatureConfig, plan_batches, resolve_layers
from lenpred.models.loading import hf_folder


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="data/runs/smollm2-sharegpt", help="run whose prompts to feed (read only)")
    ap.add_argument("--prompts", type=int, default=48, help="prompts sampled (seeded)")
    ap.add_argument("--batch-sizes", type=int_list, default="1,4,8,16")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the rows to this JSON file")
    a = ap.parse_args(argv)

    rd = RunDir.open(a.run)
    p = rd.prompts().sample(n=a.prompts, random_state=a.seed)
    seqs = sorted(([int(x) for x in s] for s in p["prompt_token_ids"]), key=len)
    spec, folder = hf_folder(rd.card["model"]["id"])
    from transformers import AutoConfig

    base = FeatureConfig(device=a.device, threads=a.threads)
    ext = Extractor.load(folder, base, resolve_layers(base, AutoConfig.from_pretrained(folder)))
    ext.features(seqs[:2])  # warm-up (first-call allocations)
    rows = []
    for bs in a.batch_sizes:
        ext.cfg = base.replace(batch_size=bs)
        batches = plan_batches([len(s) for s in seqs], bs, base.batch_tokens)
        fed = sum(len(b) * max(len(seqs[i]) for i in b) for b in batches)
        t = time.perf_counter()
        for b in batches:
            ext.features([seqs[i] for i in b])
        dt = time.perf_counter() - t
        tok = sum(len(s) for s in seqs)
        rows.append({"batch_size": bs, "prompts": len(seqs), "tokens": tok, "seconds": round(dt, 2),
                     "prompts_per_s": round(len(seqs) / dt, 2), "tokens_per_s": round(tok / dt, 1),
                     "padding_share": round(1 - tok / fed, 3), "fed_per_s": round(fed / dt, 1)})
    t = Table(title=f"lenpred features throughput ({spec.id}, {a.device}, threads {a.threads or 'default'})")
    for c in rows[0]:
        t.add_column(c, justify="right")
    for r in rows:
        t.add_row(*(str(v) for v in r.values()))
    Console().print(t)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
