# Shared by the experiment scripts (sourced after `cd` to the repository root): the reference run, where
# lenpred keeps its caches, how many one-thread processes a pass uses, the lenpred command, and the sharded
# trajectory pass. Each setting can be overridden from the environment.
R=data/runs/smollm2-sharegpt
HOME_DIR=${LENPRED_HOME:-$HOME/.cache/lenpred}
SHARDS=${SHARDS:-$(nproc)}
LP=${LENPRED:-.venv/bin/lenpred}
# LENPRED may be a command of several words ("python3 -m lenpred" where the package is not installed)
# shellcheck disable=SC2086
run() { echo "+ $*" >&2; env OMP_NUM_THREADS=1 $LP "$@"; }

# sharded_features TRAJ DRAFT ROLES [FLAG ...]: the OUTLETS trajectory of ROLES read through DRAFT, as SHARDS
# one-thread processes (TRAJ-shard-I) merged into TRAJ; skipped when TRAJ is complete (a stopped pass resumes
# from each shard's last chunk). A failed shard stops the script before the merge.
sharded_features() {
  local traj=$1 draft=$2 roles=$3
  shift 3
  [ -f "$traj/meta.json" ] && return 0
  local parts=() pids=() i p
  for i in $(seq 0 $((SHARDS - 1))); do
    parts+=("$traj-shard-$i")
    run outlets features --run $R --draft "$draft" --roles "$roles" --shard "$i/$SHARDS" --threads 1 \
        --out "$traj-shard-$i" "$@" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  run outlets features --merge "${parts[@]}" --out "$traj"
}
