#!/usr/bin/env bash
# OUTLETS at full scale on the reference run, step by step; every step is resumable (rerun the
# script after a stop: finished steps are skipped or continue where they stopped).
#
#   bash experiments/outlets/full_scale.sh                 # on the CPU: the committed draft head
#   DEVICE=cuda DRAFT=1 bash experiments/outlets/full_scale.sh
#                                                          # on a GPU: retrain the draft head first
#
# CPU: the trajectory pass runs as SHARDS processes of one thread each (default: one per core), in
# bf16 where the CPU has amx_bf16 / avx512_bf16 (docs/outlets.md, "Teacher forcing on this CPU").
# Nothing else should run beside it. Outputs: the trajectory under $LENPRED_HOME/trajectories, the
# rest under out/outlets-full/ (not committed; data/outlets/README.md says what is).
set -euo pipefail
cd "$(dirname "$0")/../.."

# shellcheck source=experiments/lib.sh
. experiments/lib.sh
OUT=${OUT:-out/outlets-full}
DEVICE=${DEVICE:-cpu}
DRAFT=${DRAFT:-0}
STEPS=${STEPS:-4000}
D=data/draft/smollm2-135m

if [ "$DRAFT" = 1 ]; then
  # 0. (GPU) the draft head, released recipe (7 unrolled steps, weights 0.8^i), from the state cache
  CACHE=${CACHE:-$HOME_DIR/draft-states/smollm2-sharegpt-full}
  run draft cache --run $R --cache "$CACHE" --roles train,val,test --device "$DEVICE"
  run draft train --run $R --cache "$CACHE" --ckpt "$OUT/draft-ckpt" --out "$OUT/draft" --ttt-steps 7 \
      --max-steps "$STEPS" --lr 6e-4 --warmup-steps 100 --checkpoint-every 50 --eval-every 250 --device "$DEVICE"
  D=$OUT/draft
fi

# 1. trajectory rows: every sample of every training, validation and test prompt (states-only pass)
TRAJ=$HOME_DIR/trajectories/smollm2-sharegpt--$(basename "$D")--full
sharded_features "$TRAJ" "$D" train,val,test --device "$DEVICE"

# 2. the heads (each variant on the same rows: the ablation), the prefill predictions, the anchor
for v in outlets outlets-fused outlets-both outlets-noprogress outlets-running outlets-target outlets-l1raw \
         outlets-softlabel probe; do
  [ -f "$OUT/heads/$v/meta.json" ] || run outlets train --traj "$TRAJ" --run $R --variant $v --out "$OUT/heads/$v"
done
for h in mlp ridge; do
  [ -f "$OUT/preds/$h.parquet" ] || run predict --head data/heads/$h-smollm2-sharegpt --run $R \
      --features data/features/smollm2-sharegpt --roles val,test --out "$OUT/preds/$h.parquet"
done
[ -f "$OUT/anchor/meta.json" ] || run outlets anchor --traj "$TRAJ" --run $R --head "$OUT/heads/outlets" \
    --prefill-predictions mlp="$OUT/preds/mlp.parquet" --out "$OUT/anchor"

# 3. the bench on all test samples, with the carried prefill heads and the carried prefill oracle;
#    the re-predictions table the simulator reads
#    (the trajectory of step 1 has fraction rows: it holds the live points from 32 tokens on, not t = 16;
#    `outlets features --rows both` in step 1 would add it, and the live bench would then take its default)
run outlets bench --traj "$TRAJ" --run $R --heads "$OUT"/heads/* \
    --prefill-predictions mlp="$OUT/preds/mlp.parquet" ridge="$OUT/preds/ridge.parquet" \
    --anchors outlets-anchored="$OUT/anchor" --live-points 32,64,128,256,512 --out "$OUT/bench"
run outlets predict --head "$OUT/heads/outlets" --traj "$TRAJ" --run $R --roles test --out "$OUT/outlets-test.parquet"
