#!/usr/bin/env bash
# Every figure of the predictor-zoo issue on the extended reference run, in order (each step is
# resumable or cheap; rerun the script to redo what is missing). Needs the collected runs:
#   data/runs/collect_reference.sh     (ShareGPT, 2,400 prompts)
#   data/runs/collect_alpaca_eval.sh   (AlpacaEval, 200 prompts x 4: the transfer set)
# Measured on the 2-core CPU machine, complete run (2026-12-02 08:51 UTC, THREADS=1 on one pinned core):
# 9 min 8 s in all with features up to date (computing all 2,400 prompts' took ~36 min): 20 s the three
# bounds, 2 min training the 10 heads, 45 s the two benches, 2.5 min the simulator, 1.75 min the learning
# curve (LEARNING_CURVE=0: run it yourself, e.g. on the other core), 1.5 min latency. Outputs under out/; the figures docs/results.md renders are copied at the end into
# docs/results/ (committed, small: the JSON each benchmark writes, see results_page.py SOURCES) and the
# page is re-rendered from them. The heads the README, the demo and the benchmarks use are copied into
# data/heads/ (committed; COPY_HEADS=0 leaves data/heads alone).
set -euo pipefail
cd "$(dirname "$0")/.."
LENPRED=${LENPRED:-.venv/bin/lenpred}
PY=${PY:-.venv/bin/python}
RUN=data/runs/smollm2-sharegpt
FEATS=data/features/smollm2-sharegpt
ALP=data/runs/smollm2-alpaca-eval
AFEATS=data/features/smollm2-alpaca-eval
HEADS=${HEADS:-out/heads}
THREADS=${THREADS:-1}
PREDICTORS=${PREDICTORS:-"constant prompt-length ridge mlp softlabel egtp film moe probe proxy"}
export OMP_NUM_THREADS=$THREADS

step() { printf '\n=== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

step "split (roles of old prompts are kept; the test split does not change)"
"$LENPRED" split "$RUN"
"$LENPRED" split "$ALP" --test-min-samples 4 --test-share 1   # every AlpacaEval prompt is a test prompt

step "features (only prompts not computed yet)"
"$LENPRED" features --run "$RUN" --out "$FEATS" --threads "$THREADS" --no-progress
"$LENPRED" features --run "$ALP" --out "$AFEATS" --threads "$THREADS" --no-progress

step "the prefill bound: every prompt, the 384 with 8+ samples (the page's table), the 96 x 24"
"$LENPRED" bound "$RUN" --out out/bound/smollm2-sharegpt
"$LENPRED" bound "$RUN" --min-samples 8 --out out/bound/smollm2-sharegpt-k8
"$LENPRED" bound "$RUN" --min-samples 24 --out out/bound/smollm2-sharegpt-k24

step "train every head on the split's train prompts (early stopping on val)"
for P in $PREDICTORS; do
  if [ -f "$HEADS/$P/meta.json" ] && [ "$HEADS/$P/meta.json" -nt "$RUN/split.json" ]; then
    echo "$P: up to date"; continue
  fi
  if [ "$P" = proxy ]; then
    "$LENPRED" train --run "$RUN" --predictor proxy --out "$HEADS/$P"
  else
    "$LENPRED" train --run "$RUN" --features "$FEATS" --predictor "$P" --out "$HEADS/$P"
  fi
done
HEAD_ARGS=()
for P in $PREDICTORS; do HEAD_ARGS+=("$P=$HEADS/$P"); done

step "bench on the test split, and on AlpacaEval (transfer)"
"$LENPRED" bench --run "$RUN" --features "$FEATS" --heads "${HEAD_ARGS[@]}" --out out/bench/smollm2-sharegpt
"$LENPRED" bench --run "$ALP" --features "$AFEATS" --heads "${HEAD_ARGS[@]}" --out out/bench/smollm2-alpaca-eval
"$PY" -m benchmarks.bench_transfer --home out/bench/smollm2-sharegpt --transfer out/bench/smollm2-alpaca-eval \
  --out out/bench/transfer

# the best hidden-state head by MAE on the test split
BEST=$("$PY" - <<'EOF'
import json
rows = json.load(open("out/bench/smollm2-sharegpt/bench.json"))["rows"]
skip = {"constant", "prompt-length", "proxy"}
best = min((r for r in rows if r["subset"] == "all" and r["name"] not in skip and r["name"] in
            {"ridge", "mlp", "softlabel", "egtp", "film", "moe", "probe"}), key=lambda r: r["metrics"]["mae"])
print(best["name"])
EOF
)
echo "best hidden-state head: $BEST"

step "what a real prediction is worth: the simulator on the test prompts' samples"
"$LENPRED" predict --head "$HEADS/$BEST" --run "$RUN" --features "$FEATS" --roles test --out "out/preds/$BEST.parquet"
"$LENPRED" predict --head "$HEADS/proxy" --run "$RUN" --roles test --out out/preds/proxy.parquet
"$PY" -m benchmarks.bench_sim_real --run "$RUN" --predictions "$BEST=out/preds/$BEST.parquet" \
  --predictions proxy=out/preds/proxy.parquet --out out/sim/real_predictions

if [ "${LEARNING_CURVE:-1}" = 1 ]; then  # LEARNING_CURVE=0: run it yourself (e.g. on the other core, in parallel)
  step "learning curve (400 / 1,000 / all training prompts, 3 draws)"
  "$PY" -m benchmarks.bench_learning_curve --run "$RUN" --features "$FEATS" --sizes 400,1000,all --repeats 3 \
    --out out/bench/learning-curve
fi

step "training time and prediction latency"
"$PY" -m benchmarks.bench_predictors --features "$FEATS" --run "$RUN" --heads "${PREDICTORS// /,}" \
  --out out/bench/predictors/predictors.json

if [ "${COPY_HEADS:-1}" = 1 ]; then
  step "commit-size heads into data/heads (the demo / README / serve examples use them)"
  for P in ridge proxy "$BEST"; do
    rm -rf "data/heads/$P-smollm2-sharegpt.tmp"
    cp -r "$HEADS/$P" "data/heads/$P-smollm2-sharegpt.tmp"
    rm -rf "data/heads/$P-smollm2-sharegpt"
    mv "data/heads/$P-smollm2-sharegpt.tmp" "data/heads/$P-smollm2-sharegpt"
  done
fi

step "the figure files of the results page into docs/results/ (committed)"
# Each is the JSON its benchmark wrote above, less the parts named here (the bound's per-bin hazard tables,
# the data of its hazard plot: out/bound/*/bound.json keeps them; none holds per-sample arrays);
# docs/results/manifest.json says where each came from and when it was made (the source file's mtime).
# A figure whose benchmark did not run here (LEARNING_CURVE=0 and no out/bench/learning-curve yet)
# keeps its committed file.
"$PY" - <<'PYEOF'
import json
import time
from pathlib import Path

DEST = Path("docs/results")
HAZARD_BINS = ("hazard.pooled.table", "hazard.buckets.*.table", "hazard.normalized.table")
FILES = {  # committed name: (what the zoo wrote, parts left out: dotted paths, * = every list item)
    "bound-all.json": ("out/bound/smollm2-sharegpt/bound.json", HAZARD_BINS),
    "bound-k8.json": ("out/bound/smollm2-sharegpt-k8/bound.json", HAZARD_BINS),
    "bound-k24.json": ("out/bound/smollm2-sharegpt-k24/bound.json", HAZARD_BINS),
    "bench-smollm2-sharegpt.json": ("out/bench/smollm2-sharegpt/bench.json", ()),
    "bench-smollm2-alpaca-eval.json": ("out/bench/smollm2-alpaca-eval/bench.json", ()),
    "transfer.json": ("out/bench/transfer/transfer.json", ()),
    # the two pivot tables repeat "rows"
    "sim_real.json": ("out/sim/real_predictions/real_predictions.json", ("table_short_p99_e2e", "table_all_p99_e2e")),
    "learning_curve.json": ("out/bench/learning-curve/learning_curve.json", ()),
    "predictors.json": ("out/bench/predictors/predictors.json", ()),
}


def drop(d, path):
    """Remove the part at a dotted path of ``d`` (``*``: in every item of a list), where it exists."""
    head, _, rest = path.partition(".")
    if not rest:
        if isinstance(d, dict):
            d.pop(head, None)
        return
    inner = d if head == "*" and isinstance(d, list) else [d.get(head)] if isinstance(d, dict) else []
    for x in inner:
        drop(x, rest)


DEST.mkdir(parents=True, exist_ok=True)
mpath = DEST / "manifest.json"
manifest = json.loads(mpath.read_text()) if mpath.is_file() else {}
files = manifest.setdefault("files", {})
for name, (src, parts) in FILES.items():
    src_path = Path(src)
    if not src_path.is_file():
        print(f"{name}: {src} not written by this run, the committed file stays")
        continue
    d = json.loads(src_path.read_text())
    for path in parts:
        drop(d, path)
    text = json.dumps(d, indent=1) + "\n"
    (DEST / name).write_text(text)
    made = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(src_path.stat().st_mtime))
    files[name] = {"from": src, "made": made, "dropped": list(parts)}
    print(f"{name}: {len(text.encode()) / 1024:.1f} KB (from {src}, made {made})")
manifest["written_by"] = "bash benchmarks/zoo_reference.sh"
mpath.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
PYEOF

step "the results page (docs/results.md) from its template and the figure files"
"$PY" -m benchmarks.report.results_page
echo "done: docs/results.md from docs/results/*.json; the benchmarks' own reports: out/bench/smollm2-sharegpt/bench.md,"
echo "      out/bench/transfer/transfer.md, out/sim/real_predictions/table.md, out/bench/learning-curve/learning_curve.md"
