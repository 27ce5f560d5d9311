"""Speculative decoding with an EAGLE-3 head on a run's test prompts: tau, acceptance, speed-up.

For each test prompt (the run's split), greedy and under the run's sampling card, it decodes once
plainly (k = 0: one target pass per token, the same target and sampling code as the speculative
loop) and once per chain length k, and reports

* tau -- tokens committed per verifying target pass, the target's own token included (EAGLE's
  "acceptance length"; 1 = nothing accepted), the prefill's first token not counted;
* acceptance at chain position j -- the share of cycles reaching position j whose draft there was
  accepted (conditional), and the unconditional share of cycles accepting >= j drafts;
* speed-up -- generated tokens per second over plain decoding's, same prompts and mode (wall clock
  on this machine; under sampling the outputs differ run to run, so it is tokens/s that is compared);
  configurations run interleaved prompt by prompt, so load changes on a shared machine hit all alike;
* the cost split: one verifying pass and one cycle's drafting, each in units of a plain decoding
  pass (speed-up ~ tau / (verify + draft) when the rest is negligible).

    python -m benchmarks.bench_spec --run data/runs/smollm2-sharegpt --draft out/draft/smollm2 \\
        --prompts 8 --max-new-tokens 128 --ks 1,2,3,4,5,6 --trees '5,8,48' --out out/bench_spec.json

``--trees`` adds greedy rows with a dynamic draft tree (EAGLE-2's, as EAGLE-3 evaluates: ``k`` is then
the tree's depth and ``tree`` = [depth, top-k, nodes]); under sampling only chains run.

Writes the table to stdout and, with --out, a JSON file (schema in this docstring's keys:
``rows[] = {mode, k, tree, tau, tokens, seconds, tokens_per_s, speedup, target_forwards, target_seconds,
draft_seconds, verify_cost, draft_cost, accept_cond[], accept_uncond[]}``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from benchmarks.flags import int_list
from lenpred.data.rundir import RunDir
from lenpred.data.split import load_split
from lenpred.draft.io import check_against_target, load_draft
from lenpred.draft.sampling import sampling_from_card
from lenpred.draft.speculative import SpeculativeDecoder
from lenpred.draft.target import Target
from lenpred.draft.tree import TreeSpec
from lenpred.models import load


def _prompts(run: RunDir, n: int) -> list[tuple[str, list[int]]]:
    split = load_split(run, require_complete=False)
    p = run.prompts()
    p = p[p["prompt_id"].astype(str).isin(split.test)]
    return [(str(r.prompt_id), [int(x) for x in r.prompt_token_ids]) for r in p.head(n).itertuples()]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--model", help="default: the head's target")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--ks", type=int_list, default="1,2,3,4,5,6")
    ap.add_argument("--modes", default="greedy,sampling")
    ap.add_argument("--trees", default="",
                    help="greedy draft trees to add, ';'-separated DEPTH,TOPK,NODES (e.g. '5,8,48;6,10,60')")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = _parse(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    run = RunDir.open(a.run)
    head = load_draft(a.draft)
    lm = load(a.model or (head.meta or {}).get("target", {}).get("id") or run.card["model"]["id"])
    layers = check_against_target(head, lm.model.config, fingerprint=lm.spec.fingerprint)
    target = Target(lm.model, layers)
    eos = lm.tokenizer.convert_tokens_to_ids(run.card["model"].get("eos_token")) or lm.tokenizer.eos_token_id
    sampling = sampling_from_card(run.card["sampling"], max_new_tokens=a.max_new_tokens)
    card = sampling.to_dict()
    prompts = _prompts(run, a.prompts)
    ks = a.ks
    trees = [TreeSpec.parse(x) for x in a.trees.split(";") if x.strip()]
    rows = []
    for mode in a.modes.split(","):
        s = None if mode == "greedy" else sampling
        # a configuration: k (a chain of k drafts; 0 = plain decoding) or a tree (greedy only)
        configs: list[int | TreeSpec] = [0, *ks, *(trees if mode == "greedy" else [])]
        decs = {k: SpeculativeDecoder(target, head.model if k else None, k=k if isinstance(k, int) else 0,
                                      sampling=s, max_new_tokens=a.max_new_tokens, eos_ids=[eos],
                                      tree=k if isinstance(k, TreeSpec) else None) for k in configs}
        agg = {k: {"tok": 0, "secs": 0.0, "tsecs": 0.0, "dsecs": 0.0, "fwd": 0, "committed": 0, "cycles": 0,
                   "acc": []} for k in configs}
        # configurations interleaved prompt by prompt, so that a load change on this shared machine
        # hits all of them alike instead of whichever happened to run then
        for i, (_, ids) in enumerate(prompts):
            for k in configs:
                gen = torch.Generator().manual_seed(a.seed * 1000 + i)
                t = time.perf_counter()
                g = decs[k].generate(ids, generator=gen)
                x = agg[k]
                x["secs"] += time.perf_counter() - t
                x["tsecs"] += g.target_seconds
                x["dsecs"] += g.draft_seconds
                x["tok"] += len(g.tokens)
                x["fwd"] += g.target_forwards
                x["committed"] += sum(g.committed)
                x["cycles"] += len(g.committed)
                x["acc"].extend(g.accepted)
        base = agg[0]["tok"] / agg[0]["secs"]
        base_fwd_s = agg[0]["tsecs"] / max(agg[0]["fwd"], 1)
        for k in configs:
            x = agg[k]
            acc = x["acc"]
            depth = k if isinstance(k, int) else k.depth
            cond = [(sum(v >= j for v in acc) / max(sum(v >= j - 1 for v in acc), 1)) for j in range(1, depth + 1)]
            uncond = [sum(v >= j for v in acc) / max(len(acc), 1) for j in range(1, depth + 1)]
            tps = x["tok"] / x["secs"] if x["secs"] else 0.0
            tree = None if isinstance(k, int) else [k.depth, k.topk, k.nodes]
            row = {"mode": mode, "k": depth, "tree": tree, "tau": x["committed"] / max(x["cycles"], 1),
                   "tokens": int(x["tok"]),
                   "seconds": x["secs"], "tokens_per_s": tps, "speedup": tps / base if base else 1.0,
                   "target_forwards": x["fwd"], "target_seconds": x["tsecs"], "draft_seconds": x["dsecs"],
                   # cost of one verifying pass and of the drafting, in plain decoding passes
                   "verify_cost": (x["tsecs"] / max(x["fwd"], 1)) / base_fwd_s if base_fwd_s else None,
                   "draft_cost": (x["dsecs"] / max(x["cycles"], 1)) / base_fwd_s if base_fwd_s else None,
                   "accept_cond": cond, "accept_uncond": uncond}
            rows.append(row)
            label = f"k={k}" if tree is None else "tree " + ",".join(map(str, tree))
            print(f"{mode:8s} {label:12s} tau {row['tau']:.2f}  {tps:6.2f} tok/s  speed-up {row['speedup']:.2f}  "
                  f"verify {row['verify_cost'] or 0:.2f}x  draft {row['draft_cost'] or 0:.2f}x  "
                  f"accept@j {' '.join(f'{v:.2f}' for v in cond)}", flush=True)
    out = {"run": str(run.path), "draft": str(a.draft), "prompts": [p for p, _ in prompts],
           "max_new_tokens": a.max_new_tokens, "threads": torch.get_num_threads(), "rows": rows,
           "sampling": card}
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
