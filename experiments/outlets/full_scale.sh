#!/usr/bin/env bash
# OUTLETS at full scale on the reference run, step by step; every step is resumable (rerun the
# script after a stop: finished steps are skipped or continue where they stopped).
#
#   bash experiments/outlets/full_scale.sh            # all steps, on the CPU
#   DEVICE=cuda bash experiments/outlets/full_scale.sh  # the same on a GPU (teacher forcing and
#                                                      # draft training take minutes there)
#
# CPU use: one pinned core at nice 10 by default (CORES=0,1 THREADS=2 for both); the script lowers its
# own autogroup's weight too (with the kernel's autogroup scheduling on, as on most desktops and these
# machines, nice only orders processes inside one session: a niced job started with setsid or from
# another terminal still takes half a shared core from an interactive one). Outputs under
# out/outlets-full/ (not committed); the cache outside the work tree ($LENPRED_HOME), so a later
# session on the same machine continues it.
set -euo pipefail
cd "$(dirname "$0")/../.."

R=data/runs/smollm2-sharegpt
HOME_DIR=${LENPRED_HOME:-$HOME/.cache/lenpred}
CACHE=${CACHE:-$HOME_DIR/draft-states/smollm2-sharegpt-full}
OUT=${OUT:-out/outlets-full}
DEVICE=${DEVICE:-cpu}
CORES=${CORES:-1}
THREADS=${THREADS:-1}
STEPS=${STEPS:-4000}
LP=${LENPRED:-.venv/bin/lenpred}
echo 19 > /proc/self/autogroup 2>/dev/null || true
# LENPRED may be a command of several words ("python3 -m lenpred" where the package is not installed)
# shellcheck disable=SC2086
run() { echo "+ $*" >&2; taskset -c "$CORES" nice -n 10 env OMP_NUM_THREADS="$THREADS" $LP "$@"; }

# 1. teacher forcing: every training, validation and test sample into the shared state cache
run draft cache --run $R --cache "$CACHE" --roles train,val,test --threads "$THREADS" --device "$DEVICE"

# 2. the draft head, released recipe (7 unrolled steps, weights 0.8^i); checkpoints resume
run draft train --run $R --cache "$CACHE" --ckpt "$OUT/draft-ckpt" --out "$OUT/draft" --ttt-steps 7 \
    --max-steps "$STEPS" --lr 6e-4 --warmup-steps 100 --checkpoint-every 50 --eval-every 250 \
    --threads "$THREADS" --device "$DEVICE"

# 3. trajectory rows from the new head: every training prompt, every validation and test sample
run outlets features --run $R --draft "$OUT/draft" --cache "$CACHE" --roles train,val,test \
    --out "$OUT/traj" --device "$DEVICE"

# 4. the heads (each variant on the same rows: the ablation), the prefill predictions, the anchor
for v in outlets outlets-fused outlets-both outlets-noprogress outlets-running probe; do
  [ -f "$OUT/heads/$v/meta.json" ] || run outlets train --traj "$OUT/traj" --run $R --variant $v --out "$OUT/heads/$v"
done
[ -f "$OUT/preds/mlp.parquet" ] || run predict --head data/heads/mlp-smollm2-sharegpt --run $R \
    --features data/features/smollm2-sharegpt --roles val,test --out "$OUT/preds/mlp.parquet"
run outlets anchor --traj "$OUT/traj" --run $R --head "$OUT/heads/outlets" \
    --prefill-predictions mlp="$OUT/preds/mlp.parquet" --out "$OUT/anchor"

# 5. the bench on all test samples, with the carried prefill head and the carried prefill oracle
run outlets bench --traj "$OUT/traj" --run $R --heads "$OUT"/heads/* \
    --prefill-predictions mlp="$OUT/preds/mlp.parquet" --anchors outlets-anchored="$OUT/anchor" \
    --out "$OUT/bench"
