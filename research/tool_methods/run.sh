#!/usr/bin/env bash
# The tool-task method comparison (research/tool_methods/NOTES.md): run from the repository root.
# One worker, one thread, specs in priority order (the control first, hybrid RL/IL last: it is the
# one cut if the budget runs out).  Resumable: re-run after a kill.  Then copy the results in:
#   .venv/bin/python research/tool_methods/summarize.py --collect
set -euo pipefail
for spec in grpo mask_void empg trloo hybrid_il; do
  t0=$(date +%s)
  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 nice -n 10 \
    .venv/bin/rl-lab sweep "research/tool_methods/$spec.yaml" --workers 1 --threads 1 --no-progress
  echo "[tool_methods] $spec: $(( $(date +%s) - t0 )) s"
done
