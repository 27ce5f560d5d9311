#!/usr/bin/env bash
# Issue 38 part 2: OUTLETS heads trained on rows as a live server meets them (t = 0, 16, 32, 64, ...
# tokens while the answer runs), not at fractions of the true length. Every step is resumable (rerun the
# script after a stop: finished steps are skipped, the trajectory pass continues from its last chunk).
#
#   bash experiments/outlets/live_rows.sh
#
# 1. the training and validation prompts' live rows, every sample (states-only pass, SHARDS processes of
#    one thread; nothing else should run beside it);
# 2. the head variants on them, each row weighted as a server meets it (--param weights=row), into
#    data/outlets/smollm2-sharegpt-live/ (committed: ~1 MB each);
# 3. the live bench on the committed test live rows (384 samples), beside the fraction-row heads, the
#    counter heads and the baselines, into docs/outlets_real_live_trained/;
# 4. the same on all 2,416 test samples, and the anchored re-predictions table the yardstick reads.
# The trajectory (~145 MB) stays under $LENPRED_HOME/trajectories (not committed).
set -euo pipefail
cd "$(dirname "$0")/../.."

# shellcheck source=experiments/lib.sh
. experiments/lib.sh
D=data/draft/smollm2-135m
HEADS=${HEADS:-data/outlets/smollm2-sharegpt-live}
PREDS=${PREDS:-out/preds}
BENCH=${BENCH:-docs/outlets_real_live_trained}
VARIANTS=${VARIANTS:-outlets outlets-running outlets-fused outlets-target outlets-history}

# 1. live rows of every training and validation sample
TRAJ=$HOME_DIR/trajectories/smollm2-sharegpt--$(basename "$D")--live-train-val
sharded_features "$TRAJ" "$D" train,val --rows live --no-progress

# 2. the heads, each row weighted as a server meets it
for v in $VARIANTS; do
  [ -f "$HEADS/$v/meta.json" ] || run outlets train --traj "$TRAJ" --run $R --variant "$v" --param weights=row \
      --out "$HEADS/$v"
done

# 3. the prefill anchor of the best live head (blend with the carried mlp head per band, fit on val),
#    then the live bench on the committed test live rows
for h in mlp ngram; do
  [ -f "$PREDS/$h.parquet" ] || { if [ $h = mlp ]; then f=(--features data/features/smollm2-sharegpt); else f=(); fi
    run predict --head data/heads/$h-smollm2-sharegpt --run $R "${f[@]}" --roles train,val,test \
        --out "$PREDS/$h.parquet"; }
done
ANCHOR=${ANCHOR:-data/outlets/anchor-live-smollm2-sharegpt}
[ -f "$ANCHOR/meta.json" ] || run outlets anchor --traj "$TRAJ" --run $R \
    --head "$HEADS/outlets-running" --prefill-predictions mlp="$PREDS/mlp.parquet" --out "$ANCHOR"
live=()
for v in $VARIANTS; do live+=("$v-live=$HEADS/$v"); done
run outlets bench --traj data/outlets/traj-live-test-smollm2-sharegpt --run $R \
    --heads "${live[@]}" data/outlets/smollm2-sharegpt/outlets data/outlets/smollm2-sharegpt/outlets-running \
    --counters data/outlets/counters/quantile-mlp data/outlets/counters/hazard-mlp \
    --anchors outlets-running-live-anchored="$ANCHOR" \
    --prefill-predictions mlp="$PREDS/mlp.parquet" ngram="$PREDS/ngram.parquet" --out "$BENCH"

# 4. the doubling check and the scheduler's table: live rows of all 2,416 test samples (~5.5 min of two
#    one-thread shards on an AMX host, ~485 k target tokens; ~57 MB, not committed), the same bench on them
#    (docs/outlets_real_live_full/, copied to docs/outlets_real/outlets_live.json: the headline), and the
#    anchor's re-predictions with their quantiles for every test sample (what bench_yardstick's 'anchored'
#    predictor reads; committed)
TEST=$HOME_DIR/trajectories/smollm2-sharegpt--$(basename "$D")--live-test-all
FULL=${FULL:-docs/outlets_real_live_full}
sharded_features "$TEST" "$D" test --rows live --no-progress
run outlets bench --traj "$TEST" --run $R \
    --heads "${live[@]}" data/outlets/smollm2-sharegpt/outlets data/outlets/smollm2-sharegpt/outlets-running \
    --counters data/outlets/counters/quantile-mlp data/outlets/counters/hazard-mlp \
    --anchors outlets-running-live-anchored="$ANCHOR" outlets-anchored=data/outlets/anchor-smollm2-sharegpt \
    --prefill-predictions mlp="$PREDS/mlp.parquet" ngram="$PREDS/ngram.parquet" --out "$FULL"
cp "$FULL/outlets_live.json" "$FULL/outlets_mae_live.png" docs/outlets_real/
run outlets predict --head "$ANCHOR" --traj "$TEST" --run $R --roles test --prefill-predictions mlp="$PREDS/mlp.parquet" \
    --out data/outlets/predictions-anchored-live-test-smollm2-sharegpt.parquet
