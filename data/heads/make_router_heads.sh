#!/usr/bin/env bash
# The router-side text heads committed here (issue 31): trained on the reference ShareGPT run's train split,
# early-stopped / tuned on its val split, with the default hyperparameters. Each head's meta.json records the
# run, its card hash and the parameters (lenpred.predictors.io); a run of another model or sampling card is
# refused when it is loaded with that card. Seconds each on one core.
set -euo pipefail
cd "$(dirname "$0")/../.."
LENPRED=${LENPRED:-.venv/bin/lenpred}
for P in ngram gbdt; do
  rm -rf "data/heads/$P-smollm2-sharegpt"
  $LENPRED train --run data/runs/smollm2-sharegpt --predictor "$P" --out "data/heads/$P-smollm2-sharegpt"
done
