#!/usr/bin/env bash
# Issue 38 part 4: an EAGLE-3 draft head retrained on the whole training split with hard labels (the run's
# own sampled tokens), then its tau and the OUTLETS ablation on its states. Every step is resumable: rerun
# the script after a stop and finished steps are skipped (the states pass continues from its last shard,
# training from its last checkpoint). Run it with nothing else on the machine.
#
#   bash experiments/draft/hard_run.sh            # all steps
#   STEPS=1209 bash experiments/draft/hard_run.sh  # optimiser steps (default: one epoch of the split)
#   TEST_SAMPLES=2 bash experiments/draft/hard_run.sh  # the OUTLETS bench on 384 test samples, not 2,416
#
# 1. the states pass: the training prompts' samples teacher-forced into a hard-label state cache, SHARDS
#    processes of one thread each filling one cache (`draft cache --shard I/N`), in bfloat16 where the CPU
#    has it (`--compute-dtype auto`); the cache (~5.5 GB) stays under $LENPRED_HOME (not committed);
# 2. training: the committed head's recipe (docs/draft.md: lr 6e-4, 100 warm-up steps, 3 unroll steps,
#    an 8,192-id draft vocabulary, 2,048 tokens per step) on all training prompts instead of the first 172;
#    the head goes to data/draft/smollm2-135m-hard (committed, ~19 MB);
# 3. tau: benchmarks/bench_spec on the first 12 test prompts, greedy, chain k = 1 and the 48-node tree,
#    for the new head and the committed one in turn (one thread, same machine);
# 4. the OUTLETS ablation: live rows of the training, validation and test samples read through the new
#    head, the draft-dependent head variants trained on them, the live bench against the carried mlp head,
#    the anchored outlets-running head, t-only and the oracle (compare with the committed head's
#    docs/outlets_real_live_full, or with TEST_SAMPLES=2 its 384-sample docs/outlets_real_live_trained).
set -euo pipefail
cd "$(dirname "$0")/../.."

# shellcheck source=experiments/lib.sh
. experiments/lib.sh
PY=${PYTHON:-.venv/bin/python}
CACHE=${CACHE:-$HOME_DIR/draft-states/smollm2-sharegpt-train-hard}
HEAD=${HEAD:-data/draft/smollm2-135m-hard}
STEPS=${STEPS:-1209}
OLD=data/draft/smollm2-135m
OUT=${OUT:-docs/draft_hard}
VARIANTS=${VARIANTS:-outlets outlets-running outlets-fused}
mkdir -p "$OUT"

# 1. the states pass (each slice skips what the cache already holds)
pids=()
for i in $(seq 0 $((SHARDS - 1))); do
  run draft cache --run $R --roles train --labels hard --compute-dtype auto --shard "$i/$SHARDS" --threads 1 \
      --cache "$CACHE" --no-progress &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done

# 2. training (the validation samples, 32 of them, are teacher-forced by `draft train` itself)
[ -f "$HEAD/meta.json" ] || env OMP_NUM_THREADS="$SHARDS" $LP draft train --run $R --cache "$CACHE" --out "$HEAD" \
    --threads "$SHARDS" --max-steps "$STEPS" --lr 6e-4 --warmup-steps 100 --step-decay 0.8 --ttt-steps 3 \
    --draft-vocab-size 8192 --tokens-per-batch 2048 --eval-every 250 --checkpoint-every 50

# 3. tau, the new head and the committed one on the same prompts
for h in "$HEAD" "$OLD"; do
  f="$OUT/spec-$(basename "$h").json"
  [ -f "$f" ] || env OMP_NUM_THREADS=1 $PY -m benchmarks.bench_spec --run $R --draft "$h" --prompts 12 \
      --max-new-tokens 128 --ks 1 --modes greedy --trees '5,8,48' --threads 1 --out "$f"
done

# 4. the OUTLETS ablation on the new head's states
TRAJ=$HOME_DIR/trajectories/smollm2-sharegpt--$(basename "$HEAD")--live-train-val
# TEST_SAMPLES=2: the test pass on 2 samples of each prompt (384, ~95 k tokens: the size of the committed
# head's docs/outlets_real_live_trained bench) instead of all 2,416 (~485 k tokens)
if [ -n "${TEST_SAMPLES:-}" ]; then
  TEST=$HOME_DIR/trajectories/smollm2-sharegpt--$(basename "$HEAD")--live-test-s$TEST_SAMPLES
  test_flags=(--max-samples-per-prompt "$TEST_SAMPLES")
else
  TEST=$HOME_DIR/trajectories/smollm2-sharegpt--$(basename "$HEAD")--live-test-all
  test_flags=()
fi
sharded_features "$TRAJ" "$HEAD" train,val --rows live --no-progress
sharded_features "$TEST" "$HEAD" test --rows live --no-progress "${test_flags[@]}"
HEADS=${HEADS:-data/outlets/smollm2-sharegpt-live-hard}  # committed (~1 MB each)
live=()
for v in $VARIANTS; do
  [ -f "$HEADS/$v/meta.json" ] || run outlets train --traj "$TRAJ" --run $R --variant "$v" --param weights=row \
      --out "$HEADS/$v"
  live+=("$v-live=$HEADS/$v")
done
PREDS=${PREDS:-out/preds}
for h in mlp ngram; do
  [ -f "$PREDS/$h.parquet" ] || { if [ $h = mlp ]; then f=(--features data/features/smollm2-sharegpt); else f=(); fi
    run predict --head data/heads/$h-smollm2-sharegpt --run $R "${f[@]}" --roles train,val,test \
        --out "$PREDS/$h.parquet"; }
done
# the prefill anchor of outlets-running (blend with the carried mlp head per band, fit on val), as for the
# committed head's best live figure (outlets-running-live-anchored)
ANCHOR=${ANCHOR:-data/outlets/anchor-live-hard-smollm2-sharegpt}
[ -f "$ANCHOR/meta.json" ] || run outlets anchor --traj "$TRAJ" --run $R \
    --head "$HEADS/outlets-running" --prefill-predictions mlp="$PREDS/mlp.parquet" --out "$ANCHOR"
run outlets bench --traj "$TEST" --run $R --heads "${live[@]}" \
    --anchors outlets-running-live-anchored="$ANCHOR" \
    --prefill-predictions mlp="$PREDS/mlp.parquet" ngram="$PREDS/ngram.parquet" \
    --out "$OUT/outlets_live${TEST_SAMPLES:+_s$TEST_SAMPLES}"
