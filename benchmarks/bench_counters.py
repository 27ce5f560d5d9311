"""Counter heads on the live series of every test sample (issue 38 part 3): what a server counts in the
answer so far, against the carried prefill heads, t-only and the carried oracle.

A counter head needs no trajectory (it reads the run's answers), so this bench scores all the test
prompts' samples at the rows a live server meets (t = 0, 16, 32, 64, ... below each L) -- six times the
384 samples of the OUTLETS live bench, which needs the teacher-forced states -- with the live bench's
own scoring (:func:`lenpred.outlets.livebench.score_live`: per-row MAE, paired 95% intervals over prompts,
short precision / recall at 64 tokens, 80% coverage per point). Prefill tables: ``lenpred predict
--roles train,val,test`` (the ``+mlp`` head reads the mlp table as a feature, so it must cover train
and val too)::

    lenpred predict --head data/heads/mlp-smollm2-sharegpt --run data/runs/smollm2-sharegpt \\
        --features data/features/smollm2-sharegpt --roles train,val,test --out out/preds/mlp.parquet
    lenpred predict --head data/heads/ngram-smollm2-sharegpt --run data/runs/smollm2-sharegpt \\
        --roles train,val,test --out out/preds/ngram.parquet
    lenpred outlets counters --run data/runs/smollm2-sharegpt --out data/outlets/counters/quantile
    lenpred outlets counters --run data/runs/smollm2-sharegpt --kind hazard --out data/outlets/counters/hazard
    lenpred outlets counters --run data/runs/smollm2-sharegpt --prefill-predictions mlp=out/preds/mlp.parquet \\
        --out data/outlets/counters/quantile-mlp
    python -m benchmarks.bench_counters --run data/runs/smollm2-sharegpt \\
        --prefill-predictions mlp=out/preds/mlp.parquet ngram=out/preds/ngram.parquet \\
        --counters data/outlets/counters/* --out docs/outlets_real/counters_live.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_counters", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--run", required=True)
    ap.add_argument("--counters", nargs="+", required=True, metavar="[NAME=]HEAD")
    ap.add_argument("--prefill-predictions", nargs="*", default=[], metavar="[NAME=]FILE")
    ap.add_argument("--split", default=None)
    ap.add_argument("--max-samples-per-prompt", type=int, default=None,
                    help="the first K samples of each test prompt (2: the OUTLETS live bench's subset)")
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="a JSON file (the live bench's format) and a .md beside it")
    args = ap.parse_args(argv)

    from lenpred.data.lengths import sample_lengths
    from lenpred.data.rundir import RunDir
    from lenpred.data.split import load_split
    from lenpred.errors import LenpredError
    from lenpred.outlets.baselines import CarriedConstant, carried_oracle, carry_prefill
    from lenpred.outlets.bench_files import counters_method, named
    from lenpred.outlets.counters import live_index
    from lenpred.outlets.evaluate import MethodInput, short_threshold_of
    from lenpred.outlets.features import live_tokens
    from lenpred.outlets.livebench import T_ONLY, score_live
    from lenpred.predictions import read_predictions
    from lenpred.predictors.pipeline import run_cap
    from lenpred.report.outlets import render_live_markdown
    from lenpred.stats.bootstrap import Bootstrap

    try:
        rd = RunDir.open(args.run)
        sp = load_split(rd, args.split)
        cap = run_cap(rd.card)
        lengths = sample_lengths(rd, with_prompts=False)
        if cap is not None:
            lengths["n_tokens"] = np.minimum(lengths["n_tokens"], int(cap))
        test = lengths[lengths["prompt_id"].isin(sp.test)]
        if args.max_samples_per_prompt is not None:
            test = test[test["sample_idx"] < args.max_samples_per_prompt]
        idx = live_index(test, cap)
        methods: list[Any] = []
        tables: dict[str, Any] = {}
        for name, path in named(args.prefill_predictions):
            p = read_predictions(path, card=rd.card)
            tables[name or p.made_by] = tables[p.made_by] = p
            nm = f"prefill-{name or p.made_by}"
            methods.append(MethodInput(nm, "prefill", str(path), carry_prefill(p, idx, cap, what=nm)))
        for name, path in named(args.counters):
            methods.append(counters_method(name or Path(path).name, path, idx, rd, tables))
        train = lengths[lengths["prompt_id"].isin(sp.train)]
        t = idx["t"].to_numpy()
        t_only = CarriedConstant(train["n_tokens"].to_numpy(dtype=np.float64)).predict(t)
        methods.append(MethodInput(T_ONLY, "baseline", "run", t_only))
        const = CarriedConstant.from_samples(train).predict(t)
        methods.append(MethodInput("oracle-prompt", "oracle", "run", carried_oracle(idx, test, fallback=const)))
        points = [0, *live_tokens(int(cap) if cap is not None else int(idx["length"].max()))]
        live = score_live(idx, methods, points, reference=None, boot=Bootstrap(n_boot=args.n_boot, seed=args.seed),
                          short_threshold=short_threshold_of(idx),
                          protocol={"run": str(rd.path), "card_hash": rd.card_hash,
                                    "trajectory": "none: counter heads read the run's answers",
                                    "trajectory_rows": "live"})
    except LenpredError as e:
        print(f"bench_counters: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    d = live.to_json_dict()
    d["samples_per_prompt"] = args.max_samples_per_prompt
    d["counters"] = list(args.counters)
    d["prefill_predictions"] = list(args.prefill_predictions)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(d, indent=1) + "\n")
    tmp.replace(out)
    md = render_live_markdown(live)
    out.with_suffix(".md").write_text(md)
    print(md)
    print(f"figures: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
