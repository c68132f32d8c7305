#!/usr/bin/env bash
# Per-turn baselines (research/trloo_turns/NOTES.md): run from the repository root.  One worker, one
# thread, the three arms in order.  Resumable: re-run after a kill.  Then copy the results in:
#   .venv/bin/python research/trloo_turns/summarize.py --collect
set -euo pipefail
for spec in grpo grpo_per_turn trloo; do
  t0=$(date +%s)
  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 nice -n 10 \
    .venv/bin/rl-lab sweep "research/trloo_turns/$spec.yaml" --workers 1 --threads 1 --no-progress
  echo "[trloo_turns] $spec: $(( $(date +%s) - t0 )) s"
done
