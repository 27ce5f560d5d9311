#!/usr/bin/env bash
# The second prompt source of issue 9 part 5: data/runs/smollm2-alpaca-eval, 200 AlpacaEval prompts x 4
# samples under the reference run's card (data/runs/collect_reference.sh) except --source, so heads
# trained on ShareGPT can be benched on it (transfer). Resumable: rerun to continue.
# Prompts: AlpacaEval's 805 instructions (self-instruct, OpenAssistant, Koala, helpful-base, Vicuna)
# from the alpaca-eval 0.6.6 sdist that `make install` downloads into .venv/share/lenpred
# (see docs/sources.md); chat template, default system prompt, prompts <= 512 tokens, dedup, seed 0.
# Sampling as the reference: temperature 1.0, top_p 1.0, min_p 0.1, frequency_penalty 0.3,
# max_new_tokens 1024, seed 0; llama.cpp engine. 800 samples x ~290 tokens (the reference mean) = ~230k
# generated tokens: ~40 minutes of both cores at the reference run's 90-120 tokens/s.
set -euo pipefail
cd "$(dirname "$0")/../.."
LENPRED=${LENPRED:-.venv/bin/lenpred}
CARD=(--model smollm2-135m --engine llamacpp --source alpaca-eval --max-prompt-tokens 512 --prompt-seed 0
      --temperature 1.0 --top-p 1.0 --min-p 0.1 --frequency-penalty 0.3 --max-new-tokens 1024 --seed 0)
RUN=${RUN:-data/runs/smollm2-alpaca-eval}
"$LENPRED" collect --run "$RUN" "${CARD[@]}" --prompts "${PROMPTS:-200}" --samples "${SAMPLES:-4}" --n-parallel "${N_PARALLEL:-64}" "$@"
