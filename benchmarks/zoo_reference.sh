#!/usr/bin/env bash
# Every figure of the predictor-zoo issue on the extended reference run, in order (each step is
# resumable or cheap; rerun the script to redo what is missing). Needs the collected runs:
#   data/runs/collect_reference.sh     (ShareGPT, 2,400 prompts)
#   data/runs/collect_alpaca_eval.sh   (AlpacaEval, 200 prompts x 4: the transfer set)
# Measured on the 2-core CPU machine, complete run (2026-12-02): features up to date (computing all
# 2,400 prompts' took ~36 min), ~2 min training the 10 heads, ~1 min the two benches, ~3.5 min the
# simulator, ~1.5 min latency, ~4 min the learning curve (LEARNING_CURVE=0 and run it on the other
# core: ~8 min in all). Outputs under out/ (the README quotes them); the heads
# the README, the demo and the benchmarks use are copied into data/heads/ (committed).
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
"$PY" benchmarks/bench_transfer.py --home out/bench/smollm2-sharegpt --transfer out/bench/smollm2-alpaca-eval \
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
"$PY" benchmarks/bench_sim_real.py --run "$RUN" --predictions "$BEST=out/preds/$BEST.parquet" \
  --predictions proxy=out/preds/proxy.parquet --out out/sim/real_predictions

if [ "${LEARNING_CURVE:-1}" = 1 ]; then  # LEARNING_CURVE=0: run it yourself (e.g. on the other core, in parallel)
  step "learning curve (400 / 1,000 / all training prompts, 3 draws)"
  "$PY" benchmarks/bench_learning_curve.py --run "$RUN" --features "$FEATS" --sizes 400,1000,all --repeats 3 \
    --out out/bench/learning-curve
fi

step "training time and prediction latency"
"$PY" benchmarks/bench_predictors.py --features "$FEATS" --run "$RUN" --heads "${PREDICTORS// /,}" \
  --out out/bench/predictors/predictors.json

step "commit-size heads into data/heads (the demo / README / serve examples use them)"
for P in ridge proxy "$BEST"; do
  rm -rf "data/heads/$P-smollm2-sharegpt.tmp"
  cp -r "$HEADS/$P" "data/heads/$P-smollm2-sharegpt.tmp"
  rm -rf "data/heads/$P-smollm2-sharegpt"
  mv "data/heads/$P-smollm2-sharegpt.tmp" "data/heads/$P-smollm2-sharegpt"
done

step "the results page (docs/results.md) from its template and the committed figure files"
# The zoo's own tables are dated text in docs/results.template.md (their JSON lives in out/, not committed):
# update them there from the files below; the page's JSON-backed tables are re-rendered here.
"$PY" benchmarks/results_page.py
echo "done: out/bench/smollm2-sharegpt/bench.md, out/bench/transfer/transfer.md, out/sim/real_predictions/table.md,"
echo "      out/bench/learning-curve/learning_curve.md, out/bench/predictors/predictors.json"
