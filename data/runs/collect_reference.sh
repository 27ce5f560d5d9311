#!/usr/bin/env bash
# The exact commands that made data/runs/smollm2-sharegpt (resumable: rerun to continue).
# Card: SmolLM2-135M-Instruct (embedded Q4_1 GGUF) on ShareGPT V3 first turns (chat template,
# default system prompt, prompts <= 512 tokens, dedup, seed 0); temperature 1.0, top_p 1.0,
# min_p 0.1, frequency_penalty 0.3, max_new_tokens 1024, seed 0; llama.cpp engine.
# Chosen with benchmarks/pilot_cards.py: the only pilot card under 10% truncation (see README).
set -euo pipefail
cd "$(dirname "$0")/../.."
LENPRED=${LENPRED:-.venv/bin/lenpred}
CARD=(--model smollm2-135m --engine llamacpp --source sharegpt --max-prompt-tokens 512 --prompt-seed 0
      --temperature 1.0 --top-p 1.0 --min-p 0.1 --frequency-penalty 0.3 --max-new-tokens 1024 --seed 0)
RUN=data/runs/smollm2-sharegpt
# 96 prompts x 24 samples first (per-prompt distributions), then 384 prompts x 8 (the bound across prompts)
"$LENPRED" collect --run "$RUN" "${CARD[@]}" --prompts 96 --samples 24 --n-parallel "${N_PARALLEL:-64}" "$@"
"$LENPRED" collect --run "$RUN" "${CARD[@]}" --prompts 384 --samples 8 --n-parallel "${N_PARALLEL:-64}" "$@"
# the extension (issue 9 part 0): 2,400 prompts in all, 2 samples for every new prompt (the first 384
# keep their 8 or 24). Same card; the prompt list only grows (the first 384 are the same prompts).
"$LENPRED" collect --run "$RUN" "${CARD[@]}" --prompts "${EXTEND_PROMPTS:-2400}" --samples 2 --n-parallel "${N_PARALLEL:-64}" "$@"
